"""Extractor ``praat_pitch``: F0 statistics and voiced time from Praat's autocorrelation pitch.

The settings of SPEARBench's explainable features (the authors' run_f0_extraction.py):
``to_pitch_ac(pitch_floor=75, pitch_ceiling=500)``, voiced frames = frames with F0 > 0; min,
p10, p25, median, p75, p90, max, mean and std (numpy's, ddof = 0) of their F0; voiced ratio =
voiced frames / frames and voiced time = that ratio × the clip's duration. Praat is one C++ call
per clip that holds the GIL, so a batch is spread over processes by ``ProcessExtractor``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

import numpy as np
import polars as pl

from sdscore.audio import AudioBatch
from sdscore.errors import MissingDependencyError

F0_FLOOR = 75.0
F0_CEILING = 500.0
FEATURES = ("f0_min", "f0_p10", "f0_p25", "f0_median", "f0_p75", "f0_p90", "f0_max", "f0_mean", "f0_std")
SCHEMA = {**{name: pl.Float64 for name in FEATURES}, "duration_s": pl.Float64, "voiced_time_s": pl.Float64,
          "voiced_ratio": pl.Float64}


def f0_statistics(x: np.ndarray, sample_rate: int, floor: float = F0_FLOOR, ceiling: float = F0_CEILING) -> dict:
    """The SCHEMA columns of one clip (F0 columns None when no frame is voiced or the clip is too
    short for one pitch frame)."""
    import parselmouth

    duration = len(x) / sample_rate
    out: dict = {name: None for name in FEATURES}
    out.update(duration_s=duration, voiced_time_s=0.0, voiced_ratio=0.0 if duration else None)
    if len(x) == 0:
        return out
    sound = parselmouth.Sound(np.asarray(x, dtype=np.float64), sampling_frequency=float(sample_rate))
    try:
        f0 = sound.to_pitch_ac(pitch_floor=floor, pitch_ceiling=ceiling).selected_array["frequency"]
    except parselmouth.PraatError:  # shorter than one analysis window (3 periods of the floor)
        return out
    voiced = f0[f0 > 0]
    if len(f0):
        out["voiced_ratio"] = len(voiced) / len(f0)
        out["voiced_time_s"] = out["voiced_ratio"] * duration
    if len(voiced):
        p10, p25, median, p75, p90 = np.percentile(voiced, [10, 25, 50, 75, 90])
        out.update(f0_min=float(voiced.min()), f0_p10=float(p10), f0_p25=float(p25), f0_median=float(median),
                   f0_p75=float(p75), f0_p90=float(p90), f0_max=float(voiced.max()),
                   f0_mean=float(voiced.mean()), f0_std=float(voiced.std()))
    return out


class PraatPitch:
    """Extractor ``praat_pitch`` → SCHEMA columns per item (see the module doc)."""

    name = "praat_pitch"
    requires: tuple[str, ...] = ()
    schema = SCHEMA

    def __init__(self, floor: float = F0_FLOOR, ceiling: float = F0_CEILING):
        if importlib.util.find_spec("parselmouth") is None:
            raise MissingDependencyError("the Praat pitch extractor needs parselmouth: pip install praat-parselmouth")
        if not 0 < floor < ceiling:
            raise ValueError(f"need 0 < floor < ceiling, got {floor} and {ceiling}")
        self.floor, self.ceiling = float(floor), float(ceiling)

    def run(self, batch: AudioBatch, inputs: Mapping[str, list] | None = None) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in SCHEMA}
        for x in batch:
            row = f0_statistics(x, batch.sample_rate, self.floor, self.ceiling)
            for c in SCHEMA:
                cols[c].append(row[c])
        return cols
