"""Waveform helpers of the synthesiser: read/write 16-bit WAV, speech bounds, trim, resample, keys.

Every clip written here is peak-normalised to -1 dBFS, and every rendered clip is trimmed so
that speech starts and ends exactly PAD_S from its edges (speech = frames within -35 dB of peak).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from sdscore import audio
from sdscore.atomic_write import atomic_path

#: Part of every content key: bump it when rendering or derivation changes, so that files
#: cached in an existing corpus folder are not reused.
CACHE_VERSION = 1
PEAK = 10 ** (-1 / 20)
PAD_S = 0.05
_FRAME_S = 0.01
_THRESHOLD_DB = -35.0
_FLOOR = 0.01


def content_key(*parts: object) -> str:
    """Stable 20-hex-digit key of JSON-serialisable parts (content-addressed file names)."""
    blob = json.dumps([CACHE_VERSION, *parts], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def key_rng(key: str) -> np.random.Generator:
    """A generator seeded by a content key, so derived audio depends only on its inputs."""
    return np.random.default_rng(int(key, 16))


def read(path: str | Path, sample_rate: int) -> np.ndarray:
    """Samples of a file written at sample_rate, as float64 mono (no duration cap).

    Callers pass the file's own rate and resample with `resample`, so the output never depends
    on which audio backend (and resampler) sdscore.audio picks.
    """
    return audio.load(path, sample_rate=sample_rate, max_seconds=0.0).astype(np.float64)


def write(path: str | Path, samples: np.ndarray, sample_rate: int) -> None:
    """Peak-normalise (jointly over channels) and write 16-bit PCM WAV atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    x = np.asarray(samples, dtype=np.float64)
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak > 0:
        x = x * (PEAK / peak)
    pcm = np.round(np.clip(x, -1.0, 1.0) * 32767).astype(np.int16)
    with atomic_path(path) as temp:
        sf.write(str(temp), pcm, sample_rate, subtype="PCM_16", format="WAV")


def resample(x: np.ndarray, sr_in: float, sr_out: int) -> np.ndarray:
    """Band-limited resampling (soxr, deterministic)."""
    if sr_in == sr_out:
        return x
    return soxr.resample(x, sr_in, sr_out, quality="HQ")


def frame_hop(sr: int) -> int:
    """Samples per 10 ms analysis frame."""
    return max(1, round(sr * _FRAME_S))


def frame_rms(x: np.ndarray, sr: int) -> np.ndarray:
    """RMS of consecutive 10 ms frames (the last partial frame dropped)."""
    hop = frame_hop(sr)
    n = len(x) // hop
    if n == 0:
        return np.zeros(0)
    return np.sqrt(np.mean(x[: n * hop].reshape(n, hop) ** 2, axis=1))


def active_frames(x: np.ndarray, sr: int) -> np.ndarray:
    """Boolean mask of 10 ms frames within 35 dB of the loudest; none if that is under -40 dBFS."""
    rms = frame_rms(x, sr)
    if rms.size == 0 or rms.max() < _FLOOR:
        return np.zeros(rms.shape, dtype=bool)
    return rms >= rms.max() * 10 ** (_THRESHOLD_DB / 20)


def speech_bounds(x: np.ndarray, sr: int) -> tuple[int, int]:
    """First and one-past-last sample of speech (by active frames); (0, 0) for silence."""
    active = np.flatnonzero(active_frames(x, sr))
    if active.size == 0:
        return 0, 0
    hop = frame_hop(sr)
    return int(active[0] * hop), int((active[-1] + 1) * hop)


def trim(x: np.ndarray, sr: int, pad: float = PAD_S) -> np.ndarray:
    """Cut to speech with exactly `pad` seconds before and after it (zero-filled if short)."""
    start, end = speech_bounds(x, sr)
    if end <= start:
        raise ValueError("cannot trim a clip that holds no speech")
    p = round(pad * sr)
    lead = np.zeros(max(0, p - start))
    tail = np.zeros(max(0, end + p - len(x)))
    return np.concatenate([lead, x[max(0, start - p): end + p], tail])


def silence(seconds: float, sr: int) -> np.ndarray:
    """Zeros of the given duration (at least zero samples)."""
    return np.zeros(max(0, round(seconds * sr)))
