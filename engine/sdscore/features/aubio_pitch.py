"""Extractor ``pitch_aubio``: TRACE's own pitch tracker, aubio's ``yin``, re-implemented batched.

The TRACE authors' blueprint code (``_pitch_stats_aubio``) loads the file at 24 kHz and runs
``aubio.pitch("yin", 2048, 512, 24000)`` with ``set_unit("Hz")`` and ``set_silence(-40)``, feeding
hops ``y[i:i + 512]`` for ``i in range(0, len(y) - 512, 512)``; a hop is kept when its pitch is not
NaN, ``get_confidence() >= 0.8`` and 80 <= pitch <= 300 Hz; mean, std (numpy, ddof 0) and a
20-point contour (``np.interp`` at ``linspace(0, 1, 20)``) of the kept pitches. aubio 0.4.9's
``yin`` (src/pitch/pitchyin.c, pitch.c) on each hop:

- the 2048-sample buffer slides by the hop (zeros before the start);
- d(τ) = Σ_{j<1024} (x_j − x_{j+τ})², τ = 1..1023; CMND yin(0) = 1, yin(τ) = d(τ)·τ / Σ_{k≤τ} d(k)
  (1 where that sum is 0);
- the period is the first τ in 2..1020 with yin(τ) < 0.15 (aubio's default tolerance) and
  yin(τ) < yin(τ+1), else the argmin of yin (the last of equal minima); refined by a parabola through yin (not d) at τ−1,
  τ, τ+1; pitch = 24000 / period; confidence = 1 − yin(τ);
- the pitch is 0 when the hop itself (512 samples, not the buffer) is below −40 dB
  (10·log10 of its mean square).

Here d(τ) comes from one FFT correlation per block of buffers (as the batched YIN extractor),
in float64 where aubio sums float32 products, and the per-buffer pick runs in one numba loop:
the kept pitches agree with aubio's to float rounding (tests/test_aubio_pitch.py checks mean
and std against the aubio package itself on real recordings when it is installed).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import numba
import numpy as np
import polars as pl

from sdscore.audio import AudioBatch
from sdscore.features.extract import resample
from sdscore.features.pitch import PITCH_SCHEMA, correlation, pitch_columns

BUFFERS_PER_FFT = 2048


@numba.njit(cache=True, nogil=True)
def aubio_yin_pick(
    buffers: np.ndarray, corr: np.ndarray, tolerance: float
) -> tuple[np.ndarray, np.ndarray]:
    """(period in samples, refined; confidence) per buffer [F, 2W], from corr[f, τ] = Σ_{j<W}
    x_j x_{j+τ}, with aubio's yin rules (module doc). Period 0 where aubio's is not positive."""
    n, w = buffers.shape[0], buffers.shape[1] // 2
    period = np.zeros(n)
    confidence = np.zeros(n)
    yin = np.ones(w)
    for f in range(n):
        x = buffers[f].astype(np.float64)
        e0 = 0.0
        for j in range(w):
            e0 += x[j] * x[j]
        shifted, running = e0, 0.0
        yin[0] = 1.0
        pos = -1
        for tau in range(1, w):
            shifted += x[tau + w - 1] * x[tau + w - 1] - x[tau - 1] * x[tau - 1]
            d = max(e0 + shifted - 2.0 * corr[f, tau], 0.0)
            running += d
            yin[tau] = d * tau / running if running != 0.0 else 1.0
            p = tau - 3
            if tau > 4 and yin[p] < tolerance and yin[p] < yin[p + 1]:
                pos = p
                break
        if pos < 0:  # fvec_min_elem: the last of equal minima
            pos = 0
            for tau in range(1, w):
                if yin[tau] <= yin[pos]:
                    pos = tau
        refined = float(pos)
        if 0 < pos < w - 1:
            s0, s1, s2 = yin[pos - 1], yin[pos], yin[pos + 1]
            curve = s0 - 2.0 * s1 + s2
            if curve != 0.0:
                refined = pos + 0.5 * (s0 - s2) / curve
        period[f] = refined
        confidence[f] = 1.0 - yin[pos]
    return period, confidence


class AubioYinPitch:
    """Extractor ``pitch_aubio`` → the ``pitch`` extractor's columns, by TRACE's aubio tracker."""

    name = "pitch_aubio"
    requires: tuple[str, ...] = ()
    schema: ClassVar[dict[str, pl.DataType]] = PITCH_SCHEMA

    def __init__(
        self,
        sample_rate: int = 24000,
        buffer_size: int = 2048,
        hop_size: int = 512,
        tolerance: float = 0.15,
        silence_db: float = -40.0,
        min_confidence: float = 0.8,
        fmin: float = 80.0,
        fmax: float = 300.0,
        contour_points: int = 20,
    ):
        if buffer_size < 8 or buffer_size % 2:
            raise ValueError(f"buffer_size must be an even number >= 8, got {buffer_size}")
        if not 1 <= hop_size <= buffer_size:
            raise ValueError(f"hop_size must be in [1, buffer_size={buffer_size}], got {hop_size}")
        if fmin >= fmax:
            raise ValueError(f"fmin ({fmin} Hz) must be below fmax ({fmax} Hz)")
        if contour_points < 1:
            raise ValueError(f"contour_points must be >= 1, got {contour_points}")
        self.sample_rate, self.buffer_size, self.hop_size = sample_rate, buffer_size, hop_size
        self.tolerance, self.silence_db, self.min_confidence = tolerance, silence_db, min_confidence
        self.fmin, self.fmax, self.contour_points = fmin, fmax, contour_points

    def buffers(self, y: np.ndarray) -> np.ndarray:
        """aubio's sliding buffer after each hop ``y[i:i + hop]``, i in range(0, len(y) − hop, hop)."""
        hops = len(range(0, len(y) - self.hop_size, self.hop_size))
        padded = np.concatenate([np.zeros(self.buffer_size - self.hop_size, np.float32), y.astype(np.float32)])
        if hops == 0:
            return np.zeros((0, self.buffer_size), np.float32)
        return np.lib.stride_tricks.sliding_window_view(padded, self.buffer_size)[:: self.hop_size][:hops]

    def track(self, batch: AudioBatch) -> list[tuple[np.ndarray, np.ndarray]]:
        """(pitch Hz, 0 for a silent hop; confidence) per hop for each item, before filtering."""
        batch = resample(batch, self.sample_rate)
        out = []
        for y in batch:
            bufs = self.buffers(y)
            period, conf = np.zeros(len(bufs)), np.zeros(len(bufs))
            for i in range(0, len(bufs), BUFFERS_PER_FFT):
                chunk = np.ascontiguousarray(bufs[i : i + BUFFERS_PER_FFT])
                period[i : i + len(chunk)], conf[i : i + len(chunk)] = aubio_yin_pick(
                    chunk, correlation(chunk), self.tolerance
                )
            pitch = np.where(period > 0, self.sample_rate / np.where(period > 0, period, 1.0), 0.0)
            hops = bufs[:, -self.hop_size :].astype(np.float64)
            with np.errstate(divide="ignore"):
                level_db = 10.0 * np.log10(np.mean(hops * hops, axis=1)) if len(hops) else np.zeros(0)
            pitch[level_db < self.silence_db] = 0.0
            out.append((pitch, conf))
        return out

    def keep(self, pitch: np.ndarray, confidence: np.ndarray) -> np.ndarray:
        """The authors' filter: not NaN, confidence >= min_confidence, fmin <= pitch <= fmax."""
        return ~np.isnan(pitch) & (confidence >= self.min_confidence) & (pitch >= self.fmin) & (pitch <= self.fmax)

    def run(self, batch: AudioBatch, inputs: Mapping[str, list] | None = None) -> dict[str, list]:
        return pitch_columns((pitch[self.keep(pitch, conf)] for pitch, conf in self.track(batch)), self.contour_points)
