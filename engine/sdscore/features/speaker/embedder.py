"""SpeakerEmbedder: one API over the speaker encoders, with a content-hash embedding cache.

``SpeakerEmbedder("ge2e")`` uses resemblyzer's bundled weights (or ``model_dir``'s pretrained.pt);
``"ecapa"`` (SpeechBrain folder) and ``"wavlm"`` (Hugging Face folder) load from ``model_dir``. Files are hashed by content, so a
second pass over the same audio (another method, another threshold) reads embeddings from the
cache instead of decoding and running the model again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from sdscore.audio import AudioBatch, load_many
from sdscore.audio.checks import over_cap
from sdscore.errors import AudioError, ModelError
from sdscore.features.cache import ContentCache, hash_file, hash_samples
from sdscore.progress import Progress

EMBEDDERS = ("ge2e", "ecapa", "wavlm")
FILES_PER_CHUNK = 256  # files decoded and embedded together; the next chunk decodes meanwhile



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

    def _embed_keyed(self, keys: list[str], waves: Sequence[np.ndarray]) -> tuple[np.ndarray, list[str | None]]:
        """Embed waves whose keys miss the cache; store what succeeds."""
        embeddings, errors = self.encoder.embed_waveforms(waves)
        self.computed += sum(e is None for e in errors)
        self.cache.put_arrays({k: e for k, e, err in zip(keys, embeddings, errors) if err is None})
        return embeddings, errors

    def embed(self, batch: AudioBatch) -> np.ndarray:
        """Embeddings [N, D] of a loaded batch; AudioError naming the items that failed."""
        if batch.sample_rate != self.sample_rate:
            raise ValueError(f"the {self.name} embedder needs {self.sample_rate} Hz audio, got {batch.sample_rate} Hz")
        out = np.empty((len(batch), self.dim), dtype=np.float32)
        errors = list(batch.errors)
        keys = [hash_samples(batch[i], batch.sample_rate) if errors[i] is None else "" for i in range(len(batch))]
        cached = self.cache.get_arrays(k for k in keys if k)
        todo = [i for i, k in enumerate(keys) if k and k not in cached]
        for i, k in enumerate(keys):
            if k in cached:
                out[i] = cached[k]
        if todo:
            embeddings, failed = self._embed_keyed([keys[i] for i in todo], [batch[i] for i in todo])
            out[todo] = embeddings
            for i, error in zip(todo, failed):
                errors[i] = error
        if any(e is not None for e in errors):
            raise AudioError(_failures(errors, [f"item {i}" for i in range(len(batch))]))
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
        keys: dict[str, str] = {}
        errors: dict[str, str | None] = {}
        for path in unique:
            try:
                keys[path] = hash_file(path)
            except OSError as error:
                errors[path] = f"{path}: cannot read audio file: {error.strerror or error}"
        cached = self.cache.get_arrays(set(keys.values()))
        found = {path: cached[key] for path, key in keys.items() if key in cached}
        for path in list(found):  # as if decoded: a cache must not change which rows fail
            refused = over_cap(path, self.max_audio_seconds)
            if refused is not None:
                errors[path] = refused
                del found[path]
        todo_keys = list(dict.fromkeys(k for k in keys.values() if k not in cached))
        first_path = {}
        for path, key in keys.items():
            first_path.setdefault(key, path)
        todo = [first_path[k] for k in todo_keys]
        computed = self._embed_paths(todo, [keys[p] for p in todo], progress)
        out = np.full((len(paths), self.dim), np.nan, dtype=np.float32)
        result_errors: list[str | None] = []
        for row, path in enumerate(paths):
            if path in errors:
                result_errors.append(errors[path])
                continue
            value, error = found.get(path), None
            if value is None:
                value, error = computed[keys[path]]
            if error is None:
                out[row] = value
            result_errors.append(error)
        return out, result_errors

    def _embed_paths(self, paths: list[str], keys: list[str], progress: Progress | None) -> dict:
        """{key: (embedding [D] | None, error | None)} for files decoded in prefetched chunks."""
        results: dict[str, tuple[np.ndarray | None, str | None]] = {}
        chunks = [slice(i, i + FILES_PER_CHUNK) for i in range(0, len(paths), FILES_PER_CHUNK)]
        if progress is not None:
            progress("embed", 0, len(paths))
        with ThreadPoolExecutor(1, "sdscore-decode") as decoder:
            def decode(chunk: slice):
                return decoder.submit(load_many, paths[chunk], self.sample_rate, max_seconds=self.max_audio_seconds)

            pending = decode(chunks[0]) if chunks else None
            for n, chunk in enumerate(chunks):
                batch = pending.result()
                if n + 1 < len(chunks):
                    pending = decode(chunks[n + 1])
                ok = [i for i in range(len(batch)) if batch.errors[i] is None]
                chunk_keys = keys[chunk]
                for i in range(len(batch)):
                    if batch.errors[i] is not None:
                        results[chunk_keys[i]] = (None, batch.errors[i])
                if ok:
                    embeddings, errors = self._embed_keyed([chunk_keys[i] for i in ok], [batch[i] for i in ok])
                    for i, embedding, error in zip(ok, embeddings, errors):
                        results[chunk_keys[i]] = (embedding if error is None else None, _named(paths[chunk][i], error))
                if progress is not None:
                    progress("embed", min(chunk.stop, len(paths)), len(paths))
        return results


def _named(path: str, error: str | None) -> str | None:
    """An encoder's error text prefixed with the file it concerns."""
    return None if error is None else f"{path}: {error}"
