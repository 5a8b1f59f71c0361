"""ITU-R BS.1770-4 loudness in numba, batched: integrated LUFS, spread and contour of gated blocks.

Same algorithm and numbers as pyloudnorm's ``Meter(rate).integrated_loudness`` (its K-weighting
biquads designed at the audio's own rate, 400 ms blocks with 75 % overlap, absolute −70 LUFS and
relative −10 LU gates), for mono audio. The blueprint's spread and contour are taken over the
blocks that pass both gates. Items run in parallel in one numba call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numba
import numpy as np
import polars as pl

from sdscore.audio import AudioBatch
from sdscore.features.contours import contour

BLOCK_SECONDS = 0.4
OVERLAP = 0.75
ABSOLUTE_GATE = -70.0
RELATIVE_GATE = -10.0


def biquad(kind: str, gain_db: float, q: float, fc: float, rate: float) -> np.ndarray:
    """Normalised coefficients [b0, b1, b2, a1, a2] of pyloudnorm's (RBJ cookbook) biquads."""
    a = 10 ** (gain_db / 40.0)
    w0 = 2.0 * np.pi * (fc / rate)
    alpha = np.sin(w0) / (2.0 * q)
    cos = np.cos(w0)
    if kind == "high_shelf":
        b = [
            a * ((a + 1) + (a - 1) * cos + 2 * np.sqrt(a) * alpha),
            -2 * a * ((a - 1) + (a + 1) * cos),
            a * ((a + 1) + (a - 1) * cos - 2 * np.sqrt(a) * alpha),
        ]
        den = [
            (a + 1) - (a - 1) * cos + 2 * np.sqrt(a) * alpha,
            2 * ((a - 1) - (a + 1) * cos),
            (a + 1) - (a - 1) * cos - 2 * np.sqrt(a) * alpha,
        ]
    elif kind == "high_pass":
        b = [(1 + cos) / 2, -(1 + cos), (1 + cos) / 2]
        den = [1 + alpha, -2 * cos, 1 - alpha]
    else:
        raise ValueError(f"unknown biquad kind {kind!r}")
    return np.array([b[0], b[1], b[2], den[1], den[2]]) / den[0]


def k_weighting(rate: float) -> np.ndarray:
    """The two K-weighting stages [2, 5] at `rate`: the head's high shelf, then the RLB high pass."""
    return np.stack(
        [
            biquad("high_shelf", 4.0, 1 / np.sqrt(2), 1500.0, rate),
            biquad("high_pass", 0.0, 0.5, 38.0, rate),
        ]
    )


@numba.njit(cache=True)
def _block_powers(
    x: np.ndarray, stages: np.ndarray, rate: float, block: float, step: float
) -> np.ndarray:
    """K-weight x (direct form II transposed, float64) and return the mean square of each block."""
    y = x.astype(np.float64)
    for s in range(stages.shape[0]):
        b0, b1, b2, a1, a2 = (
            stages[s, 0],
            stages[s, 1],
            stages[s, 2],
            stages[s, 3],
            stages[s, 4],
        )
        z1 = 0.0
        z2 = 0.0
        for i in range(len(y)):
            xi = y[i]
            yi = b0 * xi + z1
            z1 = b1 * xi - a1 * yi + z2
            z2 = b2 * xi - a2 * yi
            y[i] = yi
    duration = len(y) / rate
    n_blocks = int(np.round((duration - block) / (block * step))) + 1
    powers = np.zeros(max(n_blocks, 0))
    for j in range(n_blocks):
        lo = int(block * (j * step) * rate)
        hi = int(block * (j * step + 1) * rate)
        total = 0.0
        for i in range(lo, min(hi, len(y))):
            total += y[i] * y[i]
        powers[j] = total / (block * rate)
    return powers


@numba.njit(cache=True)
def block_powers_many(
    data: np.ndarray,
    offsets: np.ndarray,
    stages: np.ndarray,
    rate: float,
    block: float,
    step: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Block mean squares of every item of a ragged batch: (values, offsets [n+1])."""
    n = len(offsets) - 1
    counts = np.zeros(n, np.int64)
    for i in range(n):
        duration = (offsets[i + 1] - offsets[i]) / rate
        counts[i] = max(int(np.round((duration - block) / (block * step))) + 1, 0)
    out_offsets = np.zeros(n + 1, np.int64)
    for i in range(n):
        out_offsets[i + 1] = out_offsets[i] + counts[i]
    values = np.zeros(out_offsets[n])
    for i in range(n):
        values[out_offsets[i] : out_offsets[i + 1]] = _block_powers(
            data[offsets[i] : offsets[i + 1]], stages, rate, block, step
        )
    return values, out_offsets


def gate(powers: np.ndarray) -> tuple[float | None, np.ndarray]:
    """(integrated LUFS or None when nothing passes, loudness of the gated blocks) from block powers."""
    with np.errstate(divide="ignore"):
        loud = -0.691 + 10.0 * np.log10(powers)
    above = loud >= ABSOLUTE_GATE
    if not above.any():
        return None, np.zeros(0)
    relative = -0.691 + 10.0 * np.log10(powers[above].mean()) + RELATIVE_GATE
    kept = (loud > relative) & (loud > ABSOLUTE_GATE)
    if not kept.any():
        return None, np.zeros(0)
    return float(-0.691 + 10.0 * np.log10(powers[kept].mean())), loud[kept]


class Bs1770Loudness:
    """Extractor ``loudness`` → loudness_lufs, loudness_std_lu, loudness_contour_lufs (at the batch's rate)."""

    name = "loudness"
    requires: tuple[str, ...] = ()
    schema: ClassVar[dict[str, pl.DataType]] = {
        "loudness_lufs": pl.Float64,
        "loudness_std_lu": pl.Float64,
        "loudness_contour_lufs": pl.List(pl.Float64),
    }

    def __init__(self, contour_points: int = 20):
        if contour_points < 1:
            raise ValueError(f"contour_points must be >= 1, got {contour_points}")
        self.contour_points = contour_points

    def block_powers(self, batch: AudioBatch) -> list[np.ndarray]:
        """Mean square of each K-weighted 400 ms block, per item (empty when shorter than a block)."""
        rate = float(batch.sample_rate)
        values, offsets = block_powers_many(
            batch.data,
            batch.offsets,
            k_weighting(rate),
            rate,
            BLOCK_SECONDS,
            1.0 - OVERLAP,
        )
        return [values[offsets[i] : offsets[i + 1]] for i in range(len(batch))]

    def run(
        self, batch: AudioBatch, inputs: Mapping[str, list] | None = None
    ) -> dict[str, list]:
        cols: dict[str, list] = {c: [] for c in self.schema}
        for i, powers in enumerate(self.block_powers(batch)):
            too_short = batch.lengths[i] < BLOCK_SECONDS * batch.sample_rate
            lufs, blocks = (None, np.zeros(0)) if too_short else gate(powers)
            cols["loudness_lufs"].append(lufs)
            cols["loudness_std_lu"].append(
                float(blocks.std()) if lufs is not None else None
            )
            cols["loudness_contour_lufs"].append(contour(blocks, self.contour_points))
        return cols
