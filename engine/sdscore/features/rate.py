"""Speech and articulation rate from ASR word timings, as TRACE defines them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import polars as pl

from sdscore.audio import AudioBatch


def speech_rates(
    words: list[dict], duration: float
) -> tuple[float | None, float | None]:
    """(words / duration × 60, words / Σ word durations × 60) in words per minute; None when undefined."""
    n = len(words)
    speaking = sum(max(0.0, w["end"] - w["start"]) for w in words)
    speech = n / duration * 60.0 if duration > 0 else None
    articulation = n / speaking * 60.0 if speaking > 0 else None
    return speech, articulation


class SpeechRate:
    """Extractor ``rate`` → speech_rate_wpm, articulation_rate_wpm (reads the ``asr`` words)."""

    name = "rate"
    requires: tuple[str, ...] = ("asr",)
    schema: ClassVar[dict[str, pl.DataType]] = {
        "speech_rate_wpm": pl.Float64,
        "articulation_rate_wpm": pl.Float64,
    }

    def run(self, batch: AudioBatch, inputs: Mapping[str, list]) -> dict[str, list]:
        if "words" not in inputs:
            raise ValueError("rate needs the asr extractor's 'words' column")
        cols: dict[str, list] = {"speech_rate_wpm": [], "articulation_rate_wpm": []}
        for words, duration in zip(inputs["words"], batch.durations):
            speech, articulation = (
                (None, None) if words is None else speech_rates(words, float(duration))
            )
            cols["speech_rate_wpm"].append(speech)
            cols["articulation_rate_wpm"].append(articulation)
        return cols
