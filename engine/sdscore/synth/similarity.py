"""Voice-similarity proxy: cosine of z-scored MFCC mean/std statistics over a calibration sentence.

Picks SpeakerSleuth's S3 "most similar other speaker" without a neural speaker encoder.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.fft import dct

from sdscore.synth.voices import Voice

SAMPLE_RATE = 16000
METHOD = (
    "Every voice reads the same calibration sentence; each clip becomes [mean, std] of MFCC 1..19 "
    "over its speech frames (16 kHz, 25 ms Hann, 10 ms hop, 40 mel bands 60-7600 Hz); each dimension "
    "is z-scored across the voices; similarity is the cosine of those vectors; S3 takes the most "
    "similar voice of the same gender and another speaker identity."
)
_WIN, _HOP, _NFFT, _NMEL, _NCEP = 400, 160, 512, 40, 19


def _mel_filterbank() -> np.ndarray:
    """[_NMEL, _NFFT // 2 + 1] triangular filters evenly spaced on the mel scale."""

    def mel(f: np.ndarray) -> np.ndarray:
        """Hz to mel."""
        return 2595.0 * np.log10(1.0 + f / 700.0)

    edges_mel = np.linspace(mel(np.array(60.0)), mel(np.array(7600.0)), _NMEL + 2)
    edges = 700.0 * (10 ** (edges_mel / 2595.0) - 1.0)
    freqs = np.linspace(0, SAMPLE_RATE / 2, _NFFT // 2 + 1)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None, :] - lo) / (mid - lo)
    down = (hi - freqs[None, :]) / (hi - mid)
    return np.maximum(0.0, np.minimum(up, down))


def mfcc_stats(x: np.ndarray) -> np.ndarray:
    """[2 * 19] mean and std of MFCC 1..19 over the speech frames of a 16 kHz clip."""
    y = np.asarray(x, dtype=np.float64)
    y = np.append(y[0], y[1:] - 0.97 * y[:-1])
    n = 1 + max(0, (len(y) - _WIN) // _HOP)
    idx = np.arange(_WIN)[None, :] + _HOP * np.arange(n)[:, None]
    frames = np.pad(y, (0, max(0, _WIN - len(y))))[idx] * np.hanning(_WIN)
    power = np.abs(np.fft.rfft(frames, _NFFT)) ** 2
    energy = power.sum(axis=1)
    keep = energy >= energy.max() * 10 ** (-35 / 10)
    logmel = np.log(power[keep] @ _mel_filterbank().T + 1e-10)
    ceps = dct(logmel, type=2, norm="ortho", axis=1)[:, 1: _NCEP + 1]
    return np.concatenate([ceps.mean(axis=0), ceps.std(axis=0)])


def cosine_matrix(features: np.ndarray) -> np.ndarray:
    """[n, n] cosine similarity of per-dimension z-scored feature rows."""
    z = (features - features.mean(axis=0)) / (features.std(axis=0) + 1e-9)
    z /= np.linalg.norm(z, axis=1, keepdims=True) + 1e-12
    return z @ z.T


def most_similar(voices: Sequence[Voice], features: np.ndarray) -> dict[str, tuple[str, float]]:
    """Per voice, the same-gender voice of another identity with the highest cosine, and it."""
    sim = cosine_matrix(features)
    table: dict[str, tuple[str, float]] = {}
    for i, v in enumerate(voices):
        candidates = [j for j, w in enumerate(voices) if w.gender == v.gender and w.identity != v.identity]
        if not candidates:
            raise ValueError(f"voice {v.id!r} has no same-gender voice of another speaker")
        best = max(candidates, key=lambda j: (sim[i, j], -j))
        table[v.id] = (voices[best].id, round(float(sim[i, best]), 4))
    return table
