"""Audio through libsndfile (WAV, FLAC, OGG/Vorbis/Opus, MP3), resampled by the native core."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import soundfile as sf

from sdscore.audio.batch import AudioBatch
from sdscore.audio.checks import check_decoded, check_finite
from sdscore.errors import AudioError
from sdscore.ragged import pack


def open_error(path: str, exc: Exception) -> AudioError:
    """The AudioError for a file libsndfile could not open or read: missing, a folder, or undecodable."""
    if not os.path.exists(path):
        return AudioError(f"{path}: no such file")
    if os.path.isdir(path):
        return AudioError(f"{path}: is a directory")
    return AudioError(f"{path}: cannot decode ({exc})")


def decode_file(path: str, sample_rate: int, max_seconds: float) -> np.ndarray:
    """Decode one file with soundfile, downmix to mono and resample; raise AudioError on failure."""
    path = os.fspath(path)
    try:
        info = sf.info(path)
    except Exception as exc:  # libsndfile reports everything as one generic error type
        raise open_error(path, exc) from None
    check_decoded(path, info.frames, info.samplerate, max_seconds)
    if info.channels <= 0:
        raise AudioError(f"{path}: 0 channels")
    try:
        frames, rate = sf.read(path, dtype="float32", always_2d=True)
    except Exception as exc:
        raise open_error(path, exc) from None
    return finish_frames(path, frames, rate, sample_rate, max_seconds)


def finish_frames(path: str, frames: np.ndarray, rate: int, sample_rate: int, max_seconds: float) -> np.ndarray:
    """Decoded frames [n, channels] → checked, mono (channel mean), resampled to sample_rate."""
    from sdscore._native import core

    check_decoded(path, len(frames), rate, max_seconds)
    check_finite(path, frames)
    mono = frames[:, 0].copy() if frames.shape[1] == 1 else frames.mean(axis=1, dtype=np.float32)
    return core.resample(np.ascontiguousarray(mono), int(rate), int(sample_rate))


def _decode_or_error(path: str, sample_rate: int, max_seconds: float):
    try:
        return decode_file(path, sample_rate, max_seconds), None
    except AudioError as exc:
        return np.zeros(0, np.float32), str(exc)


def decode_files(
    paths: Sequence[str], sample_rate: int, num_threads: int, max_seconds: float
) -> list[tuple[np.ndarray, str | None]]:
    """(waveform, error) per path, decoded on a thread pool (libsndfile and the core drop the GIL)."""
    if num_threads <= 1 or len(paths) <= 1:
        return [_decode_or_error(p, sample_rate, max_seconds) for p in paths]
    with ThreadPoolExecutor(max_workers=num_threads) as pool:
        return list(pool.map(lambda p: _decode_or_error(p, sample_rate, max_seconds), paths))


def load_many(
    paths: Sequence[str], sample_rate: int, num_threads: int, max_seconds: float
) -> AudioBatch:
    """Decode every path with soundfile into one AudioBatch; failures become error strings."""
    results = decode_files(paths, sample_rate, num_threads, max_seconds)
    data, offsets = pack([wave for wave, _ in results])
    return AudioBatch(data, offsets, [err for _, err in results], sample_rate)
