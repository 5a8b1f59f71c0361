"""SpeakerEmbedder: one API over the speaker encoders, with a content-hash embedding cache.

``SpeakerEmbedder("ge2e")`` uses resemblyzer's bundled weights (or ``model_dir``'s pretrained.pt);
``"ecapa"`` (SpeechBrain folder) and ``"wavlm"`` (Hugging Face folder) load from ``model_dir``. Files are hashed by content, so a
second pass over the same audio (another method, another threshold) reads embeddings from the
cache instead of decoding and running the model again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from sdscore.audio import AudioBatch, load_many
from sdscore.audio.checks import over_cap
from sdscore.errors import AudioError, ModelError
from sdscore.features.batched_extraction import CacheEntries, ItemFailed, extract_cached
from sdscore.features.cache import ContentCache, file_digest, hash_samples
from sdscore.progress import Progress

EMBEDDERS = ("ge2e", "ecapa", "wavlm")
FILES_PER_CHUNK = 256  # files decoded and embedded together; the next chunk decodes meanwhile (2+ cores)



def _encoder(name: str, model_dir: str | os.PathLike | None, device: str, options: dict):
    if name == "ge2e":
        from sdscore.features.speaker.ge2e import Ge2eEncoder

        return Ge2eEncoder(model_dir, device=device, **options)
    if model_dir is None:
        raise ModelError(f"the {name} embedder loads from a local folder: pass model_dir")
    if name == "ecapa":
        from sdscore.features.speaker.ecapa import EcapaEncoder

        return EcapaEncoder(model_dir, device=device, **options)
    from sdscore.features.speaker.wavlm import WavlmEncoder

    return WavlmEncoder(model_dir, device=device, **options)


def _failures(errors: Sequence[str | None], names: Sequence[str]) -> str:
    bad = [f"{name}: {error}" for name, error in zip(names, errors) if error is not None]
    return f"{len(bad)} of {len(errors)} could not be embedded: " + "; ".join(bad[:5]) + ("; ..." if len(bad) > 5 else "")


class SpeakerEmbedder:
    """Speaker embeddings [N, D] (float32) by encoder name, cached by audio content.

    options go to the encoder (e.g. ``workers`` for ge2e, ``normalize_embeddings`` for ecapa).
    ``computed`` counts embeddings actually computed (cache misses).
    """

    def __init__(self, name: str = "ge2e", model_dir: str | os.PathLike | None = None, *,
                 cache_dir: str | os.PathLike | None = None, device: str = "cpu",
                 max_audio_seconds: float | None = None, **options):
        if name not in EMBEDDERS:
            raise ValueError(f"unknown speaker embedder {name!r}; expected one of {', '.join(EMBEDDERS)}")
        self.name = name
        self.encoder = _encoder(name, model_dir, device, options)
        self.dim = int(self.encoder.dim)
        self.sample_rate = int(self.encoder.sample_rate)
        self.version = self.encoder.version
        self.cache = ContentCache(cache_dir, self.version)  # namespace: embedder + weights digest
        self.computed = 0
        self.max_audio_seconds = max_audio_seconds  # files longer fail (None: load_many's default)

    def _embed_waves(self, waves: Sequence[np.ndarray], names: Sequence[str] | None = None,
                     ) -> list[tuple[np.ndarray | None, str | None]]:
        """(embedding, None) or (None, error) per wave, batched in one encoder call; an error is
        prefixed with the item's name when names are given."""
        embeddings, errors = self.encoder.embed_waveforms(waves)
        self.computed += sum(e is None for e in errors)
        names = names if names is not None else [None] * len(waves)
        return [(embedding, None) if error is None else (None, error if name is None else _named(name, error))
                for name, embedding, error in zip(names, embeddings, errors)]

    def embed(self, batch: AudioBatch) -> np.ndarray:
        """Embeddings [N, D] of a loaded batch; AudioError naming the items that failed."""
        if batch.sample_rate != self.sample_rate:
            raise ValueError(f"the {self.name} embedder needs {self.sample_rate} Hz audio, got {batch.sample_rate} Hz")

        def key(i: int) -> str:
            if batch.errors[i] is not None:
                raise ItemFailed(batch.errors[i])
            return hash_samples(batch[i], batch.sample_rate)

        outcomes = list(extract_cached(range(len(batch)), lambda items, _: self._embed_waves([batch[i] for i in items]),
                                       max_items=max(1, len(batch)), key=key, cache=CacheEntries(self.cache, "array")))
        errors = [error for _, error in outcomes]
        if any(e is not None for e in errors):
            raise AudioError(_failures(errors, [f"item {i}" for i in range(len(batch))]))
        out = np.empty((len(batch), self.dim), dtype=np.float32)
        for i, (value, _) in enumerate(outcomes):
            out[i] = value
        return out

    def embed_files(self, paths: Sequence[str | os.PathLike]) -> np.ndarray:
        """Embeddings [N, D] of audio files; AudioError naming the files that failed."""
        embeddings, errors = self.try_embed_files(paths)
        if any(e is not None for e in errors):
            raise AudioError(_failures(errors, [os.fspath(p) for p in paths]))
        return embeddings

    def try_embed_files(
        self, paths: Sequence[str | os.PathLike], progress: Progress | None = None
    ) -> tuple[np.ndarray, list[str | None]]:
        """Embeddings [N, D] with NaN rows and error texts for files that failed; nothing raises per file.

        Repeated paths and files with the same content are embedded once. progress, if given, is
        called as progress("embed", done, total) over the distinct files to compute.
        """
        paths = [os.fspath(p) for p in paths]
        unique = list(dict.fromkeys(paths))
        outcomes = dict(zip(unique, extract_cached(
            unique, self._embed_decoded, max_items=FILES_PER_CHUNK, load=self._decode, key=_file_key,
            cache=CacheEntries(self.cache, "array"),
            # as if decoded: a cache must not change which rows fail
            check_hit=lambda path, _: over_cap(path, self.max_audio_seconds),
            describe=lambda _, path: path,
            progress=None if progress is None else lambda done, total: progress("embed", done, total))))
        out = np.full((len(paths), self.dim), np.nan, dtype=np.float32)
        errors: list[str | None] = []
        for row, path in enumerate(paths):
            value, error = outcomes[path]
            if error is None:
                out[row] = value
            errors.append(error)
        return out, errors

    def _decode(self, paths: list[str]) -> AudioBatch:
        return load_many(paths, self.sample_rate, max_seconds=self.max_audio_seconds)

    def _embed_decoded(self, paths: list[str], batch: AudioBatch) -> list[tuple[np.ndarray | None, str | None]]:
        """(embedding, None) or (None, error) per decoded file; files that failed to decode keep their error."""
        outcomes: list[tuple[np.ndarray | None, str | None]] = [(None, error) for error in batch.errors]
        ok = [i for i in range(len(batch)) if batch.errors[i] is None]
        if ok:
            for i, outcome in zip(ok, self._embed_waves([batch[i] for i in ok], [paths[i] for i in ok])):
                outcomes[i] = outcome
        return outcomes


def _file_key(path: str) -> str:
    """A file's content digest; ItemFailed (this file's error) when it cannot be read."""
    try:
        return file_digest(path)
    except OSError as error:
        raise ItemFailed(f"{path}: cannot read audio file: {error.strerror or error}") from None


def _named(path: str, error: str | None) -> str | None:
    """An encoder's error text prefixed with the file it concerns."""
    return None if error is None else f"{path}: {error}"
