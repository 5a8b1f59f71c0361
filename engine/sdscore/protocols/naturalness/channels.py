"""Reading chosen channels of a multi-channel file, each resampled as audio.load resamples."""

from __future__ import annotations

import os

import numpy as np
import soundfile as sf

from sdscore.audio.checks import check_finite
from sdscore.errors import AudioError


def read_channels(path: str, wanted: list[int], sr: int) -> list[np.ndarray]:
    """The wanted channels of one file, each resampled to sr by the core's resampler; AudioError
    naming the file for a missing, undecodable or empty file, a non-finite sample or an unknown channel."""
    from sdscore._native import core

    try:
        frames, rate = sf.read(path, dtype="float32", always_2d=True)
    except Exception as error:  # noqa: BLE001 - libsndfile reports every failure as one error type
        reason = "no such file" if not os.path.exists(path) else f"cannot decode ({error})"
        raise AudioError(f"{path}: {reason}") from None
    if len(frames) == 0:
        raise AudioError(f"{path}: no audio samples")
    check_finite(path, frames)
    bad = [c for c in wanted if c >= frames.shape[1]]
    if bad:
        raise AudioError(f"{path}: unknown channel {bad[0]} (the file has {frames.shape[1]} channel(s))")
    return [core.resample(np.ascontiguousarray(frames[:, c]), int(rate), int(sr)) for c in wanted]


def channel_count(path: str) -> int:
    """How many channels the file holds (AudioError naming it when it cannot be read)."""
    try:
        return int(sf.info(path).channels)
    except Exception as error:  # noqa: BLE001 - libsndfile reports every failure as one error type
        raise AudioError(f"{path}: cannot read ({error})") from None
