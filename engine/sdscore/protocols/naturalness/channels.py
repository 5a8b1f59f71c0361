"""Reading chosen channels of a multi-channel file, each resampled as audio.load resamples.

A clip is a local path (or file:// URI), an object on a store (s3://, gs://: fetched whole, in one
request) or a clip embedded in a dataset file (embedded://: its cell's bytes); every one is decoded
by libsndfile, as a local file is, so the same bytes give the same samples wherever they are."""

from __future__ import annotations

import io
import os

import numpy as np
import soundfile as sf

from sdscore import storage
from sdscore.audio.checks import check_finite, sound_info
from sdscore.audio.embedded_clips import describe, is_embedded, open_embedded
from sdscore.errors import AudioError


def _name(path: str) -> str:
    """How errors name a clip: its path or URI; an embedded clip by its file, row and column."""
    return describe(path) if is_embedded(path) else path


def _source(path: str) -> str | io.BytesIO:
    """What soundfile reads for a clip: a local path, or the bytes of an object or embedded clip;
    AudioError naming it when it cannot be fetched (missing, denied, truncated, unsupported scheme)."""
    if is_embedded(path):
        return open_embedded(path)  # AudioError naming the file, row and column
    try:
        if storage.is_remote(path):
            return io.BytesIO(storage.read_bytes(path))
        return storage.normalize(path)
    except storage.StorageError as error:
        raise AudioError(str(error)) from None


def read_channels(path: str, wanted: list[int], sr: int) -> list[np.ndarray]:
    """The wanted channels of one clip (path, object URI or embedded reference), each resampled to sr
    by the core's resampler; AudioError naming the clip for a missing, undecodable or empty one, a
    non-finite sample or an unknown channel."""
    from sdscore._native import core

    path = os.fspath(path)
    name = _name(path)
    source = _source(path)
    try:
        frames, rate = sf.read(source, dtype="float32", always_2d=True)
    except Exception as error:  # noqa: BLE001 - libsndfile reports every failure as one error type
        missing = isinstance(source, str) and not os.path.exists(source)
        reason = "no such file" if missing else f"cannot decode ({error})"
        raise AudioError(f"{name}: {reason}") from None
    if len(frames) == 0:
        raise AudioError(f"{name}: no audio samples")
    check_finite(name, frames)
    bad = [c for c in wanted if c >= frames.shape[1]]
    if bad:
        raise AudioError(f"{name}: unknown channel {bad[0]} (the file has {frames.shape[1]} channel(s))")
    return [core.resample(np.ascontiguousarray(frames[:, c]), int(rate), int(sr)) for c in wanted]


def channel_count(path: str) -> int:
    """How many channels the clip holds, from its header alone (a ranged read for an object);
    AudioError naming it when it cannot be read."""
    path = os.fspath(path)
    try:
        return int(sound_info(path).channels)
    except AudioError:
        raise  # an embedded clip's error already names its file, row and column
    except storage.StorageError as error:
        raise AudioError(str(error)) from None
    except Exception as error:  # noqa: BLE001 - libsndfile reports every failure as one error type
        raise AudioError(f"{_name(path)}: cannot read ({error})") from None
