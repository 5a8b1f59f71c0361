"""Speech recognition with word timings: pocketsphinx's bundled en-us model, or Whisper from a local dir.

Both return ``transcript`` and ``words`` ([{word, start, end}] in seconds). pocketsphinx decodes
one utterance at a time, its front end reset before each, so an item's result does not depend on
its neighbours.
Whisper runs batched through transformers, items over 30 s split into 30 s pieces; word times
come from the cross-attention alignment heads (``return_token_timestamps``).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from sdscore.audio import AudioBatch
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.features.extract import resample

SAMPLE_RATE = 16000
WHISPER_SECONDS = 30
WORD = pl.Struct({"word": pl.Utf8, "start": pl.Float64, "end": pl.Float64})
SCHEMA = {"transcript": pl.Utf8, "words": pl.List(WORD)}
_ALTERNATE = re.compile(r"\(\d+\)$")


def make_asr(backend: str = "pocketsphinx", **options):
    """The ``asr`` extractor: backend "pocketsphinx" (bundled, default) or "whisper" (model_dir=...)."""
    if backend == "pocketsphinx":
        return PocketsphinxAsr(**options)
    if backend == "whisper":
        return WhisperAsr(**options)
    raise ValueError(
        f"unknown asr backend {backend!r}; use 'pocketsphinx' or 'whisper'"
    )


class PocketsphinxAsr:
    """Extractor ``asr`` on pocketsphinx (its bundled en-us acoustic model, dictionary and LM)."""

    name = "asr"
    requires: tuple[str, ...] = ()
    schema = SCHEMA

    def __init__(self, **decoder_config):
        if importlib.util.find_spec("pocketsphinx") is None:
            raise MissingDependencyError(
                "the default ASR needs pocketsphinx: pip install pocketsphinx"
            )
        from pocketsphinx import Decoder

        self.decoder = Decoder(samprate=SAMPLE_RATE, **decoder_config)
        self.frame_rate = float(self.decoder.config["frate"])

    def run(
        self, batch: AudioBatch, inputs: Mapping[str, list] | None = None
    ) -> dict[str, list]:
        batch = resample(batch, SAMPLE_RATE)
        cols: dict[str, list] = {"transcript": [], "words": []}
        for x in batch:
            words = self.decode(x)
            cols["transcript"].append(" ".join(w["word"] for w in words))
            cols["words"].append(words)
        return cols

    def decode(self, x: np.ndarray) -> list[dict]:
        """Words with times of one 16 kHz utterance (fillers and silences dropped)."""
        if len(x) == 0:
            return []
        # int16 PCM (pocketsphinx's input) holds only full scale: samples outside [-1, 1] clip,
        # as in any float -> PCM conversion a reference pipeline must do before pocketsphinx.
        pcm = (np.clip(x, -1.0, 1.0) * 32767).astype(np.int16).tobytes()
        d = self.decoder
        d.reinit_feat()  # noise and cepstral-mean estimates carry over between utterances otherwise
        d.start_utt()
        d.process_raw(pcm, full_utt=True)
        d.end_utt()
        words = []
        for seg in d.seg():
            if seg.word.startswith(("<", "[")):
                continue
            words.append(
                {
                    "word": _ALTERNATE.sub("", seg.word),
                    "start": seg.start_frame / self.frame_rate,
                    "end": (seg.end_frame + 1) / self.frame_rate,
                }
            )
        return words


class WhisperAsr:
    """Extractor ``asr`` on a Whisper checkpoint in a local directory (HF layout), batched."""

    name = "asr"
    requires: tuple[str, ...] = ()
    schema = SCHEMA

    def __init__(
        self,
        model_dir: str,
        device: str = "cpu",
        batch_size: int = 8,
        language: str | None = None,
        max_new_tokens: int = 440,
    ):
        if importlib.util.find_spec("transformers") is None:
            raise MissingDependencyError(
                "Whisper ASR needs transformers: pip install 'sdscore[hf]'"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise ModelError(f"{path}: not a Whisper model directory (no config.json)")
        import torch
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        try:
            self.processor = WhisperProcessor.from_pretrained(
                path, local_files_only=True
            )
            self.model = WhisperForConditionalGeneration.from_pretrained(
                path, local_files_only=True
            )
        except (OSError, ValueError) as error:
            raise ModelError(
                f"{path}: cannot load a Whisper model and processor: {error}"
            ) from error
        if not getattr(self.model.generation_config, "alignment_heads", None):
            raise ModelError(
                f"{path}: generation_config.json has no alignment_heads, needed for word timings"
            )
        self.torch = torch
        self.model.to(device).eval()
        self.device, self.batch_size = device, batch_size
        self.language, self.max_new_tokens = language, max_new_tokens
        self.special = set(self.processor.tokenizer.all_special_ids)

    def run(
        self, batch: AudioBatch, inputs: Mapping[str, list] | None = None
    ) -> dict[str, list]:
        batch = resample(batch, SAMPLE_RATE)
        piece = WHISPER_SECONDS * SAMPLE_RATE
        pieces = [
            (i, s) for i, x in enumerate(batch) for s in range(0, len(x), piece)
        ]  # empty: no words
        words: list[list[dict]] = [[] for _ in range(len(batch))]
        for b in range(0, len(pieces), self.batch_size):
            part = pieces[b : b + self.batch_size]
            audio = [batch[i][s : s + piece] for i, s in part]
            for (i, s), found in zip(part, self.transcribe(audio)):
                words[i].extend(
                    {
                        **w,
                        "start": w["start"] + s / SAMPLE_RATE,
                        "end": w["end"] + s / SAMPLE_RATE,
                    }
                    for w in found
                )
        return {
            "transcript": [" ".join(w["word"] for w in ws) for ws in words],
            "words": words,
        }

    def transcribe(self, audio: list[np.ndarray]) -> list[list[dict]]:
        """Words with times for up to 30 s clips at 16 kHz, decoded as one batch."""
        feats = self.processor.feature_extractor(
            audio,
            sampling_rate=SAMPLE_RATE,
            return_tensors="pt",
            return_attention_mask=True,
        )
        kwargs = {"language": self.language} if self.language else {}
        with self.torch.inference_mode():
            out = self.model.generate(
                feats.input_features.to(self.device, self.model.dtype),
                attention_mask=feats.attention_mask.to(self.device),
                task="transcribe",
                return_token_timestamps=True,
                return_dict_in_generate=True,
                max_new_tokens=self.max_new_tokens,
                **kwargs,
            )
        return [
            self.words(seq.tolist(), times.tolist())
            for seq, times in zip(out["sequences"], out["token_timestamps"])
        ]

    def words(self, tokens: list[int], times: list[float]) -> list[dict]:
        """Group tokens into words (a word starts at a token with a leading space); times from DTW."""
        tokenizer = self.processor.tokenizer
        words: list[dict] = []
        for k, token in enumerate(tokens):
            if token in self.special:
                continue
            text = tokenizer.decode([token])
            end = times[k + 1] if k + 1 < len(times) else times[k]
            if not words or text.startswith(" "):
                if text.strip():
                    words.append(
                        {
                            "word": text.strip(),
                            "start": float(times[k]),
                            "end": float(end),
                        }
                    )
            else:
                words[-1]["word"] += text
                words[-1]["end"] = float(end)
        return words
