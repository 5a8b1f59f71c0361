"""Slices of audio files: (offset, duration) in seconds, decoded from a frame range.

A slice is read with libsndfile's seek + read of just its frames, so a 2 s turn of a 1 h
recording costs 2 s of decoding (for WAV/FLAC exactly; OGG/MP3 seek inside the stream); on an
object store (s3://, gs://) only the header and the slice's bytes are fetched (ranged reads). Offsets
and durations are in the file's own time base and become frames by rounding half up (Lhotse's
``compute_num_samples``), so the slice equals ``soundfile.read(start=..., frames=...)`` there.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import soundfile as sf

from sdscore import storage
from sdscore.audio.checks import check_decoded, check_finite, format_seconds
from sdscore.audio.embedded_clips import is_embedded, open_embedded
from sdscore.audio.remote_audio import local_or_uri
from sdscore.audio.soundfile_backend import finish_frames, open_error
from sdscore.errors import AudioError

#: A slice may overrun the end of its file by at most this many frames (rounding of the end time);
#: it is then clamped. A longer overrun is an error: the manifest points past the recording.
END_TOLERANCE_FRAMES = 1


#: Bytes per sample of the uncompressed subtypes (a slice's byte length is then known before it is read).
_PCM_BYTES = {"PCM_S8": 1, "PCM_U8": 1, "PCM_16": 2, "PCM_24": 3, "PCM_32": 4, "FLOAT": 4, "DOUBLE": 8,
              "ULAW": 1, "ALAW": 1}


def is_whole_file(offset: float, duration: float | None) -> bool:
    """True for the default slice (offset 0, no duration): the file is loaded as a whole."""
    return duration is None and offset == 0.0


def check_slice(path: str, offset: float, duration: float | None) -> None:
    """Raise AudioError for a negative or non-finite offset, or a duration that is not positive."""
    if isinstance(offset, bool) or not isinstance(offset, (int, float)) or not math.isfinite(offset) or offset < 0:
        raise AudioError(f"{path}: slice offset must be a non-negative number of seconds, got {offset!r}")
    if duration is not None and (
        isinstance(duration, bool)
        or not isinstance(duration, (int, float))
        or not math.isfinite(duration)
        or duration <= 0
    ):
        raise AudioError(f"{path}: slice duration must be a positive number of seconds, got {duration!r}")


def seconds_to_frames(seconds: float, rate: int) -> int:
    """Frames in `seconds` at `rate`, rounded half up after rounding to 8 decimals (as Lhotse does)."""
    return math.floor(round(seconds * rate, 8) + 0.5)


def frame_range(path: str, offset: float, duration: float | None, rate: int, frames: int) -> tuple[int, int]:
    """(first frame, frame count) of a slice in a file of `frames` frames at `rate` Hz."""
    check_slice(path, offset, duration)
    start = seconds_to_frames(offset, rate)
    if start >= frames:
        raise AudioError(
            f"{path}: slice offset {format_seconds(offset)} s is at or beyond the end of the file "
            f"({format_seconds(frames / rate)} s)"
        )
    if duration is None:
        return start, frames - start
    count = seconds_to_frames(duration, rate)
    if count <= 0:
        raise AudioError(f"{path}: slice of {duration!r} s holds no samples at {rate} Hz")
    overrun = start + count - frames
    if overrun > END_TOLERANCE_FRAMES:
        raise AudioError(
            f"{path}: slice {format_seconds(offset)}–{format_seconds(offset + duration)} s ends beyond "
            f"the end of the file ({format_seconds(frames / rate)} s)"
        )
    return start, min(count, frames - start)


def read_slice_frames(path: str, offset: float, duration: float | None,
                      max_seconds: float = 0.0) -> tuple[np.ndarray, int]:
    """(frames [n, channels] float32, file rate) of one slice, read by seek + read; AudioError."""
    path = local_or_uri(path)
    check_slice(path, offset, duration)
    remote = open_remote(path) if storage.is_remote(path) else None
    source = open_embedded(path) if is_embedded(path) else path if remote is None else remote
    try:
        with sf.SoundFile(source) as handle:
            rate, total = int(handle.samplerate), int(handle.frames)
            if rate <= 0:
                raise AudioError(f"{path}: sample rate {rate} Hz is invalid")
            start, count = frame_range(path, offset, duration, rate, total)
            check_decoded(path, count, rate, max_seconds)  # the cap applies to the slice
            if remote is not None and handle.subtype in _PCM_BYTES:  # its frames in one ranged request
                remote.expect(count * handle.channels * _PCM_BYTES[handle.subtype])
            if handle.seekable():
                handle.seek(start)
                frames = handle.read(count, dtype="float32", always_2d=True)
            else:  # a stream libsndfile cannot seek: decode up to the slice's end, keep the slice
                frames = handle.read(start + count, dtype="float32", always_2d=True)[start:]
    except AudioError:
        raise
    except Exception as exc:  # noqa: BLE001 - libsndfile reports everything as one generic error type
        if remote is not None:
            raise remote_error(path, remote, exc) from None
        raise open_error(path, exc) from None
    finally:
        if remote is not None:
            remote.close()
    if remote is not None and remote.failure is not None:  # a ranged read failed or came back short
        raise AudioError(str(remote.failure))
    if len(frames) == 0:
        raise AudioError(f"{path}: slice at {format_seconds(offset)} s decoded no samples")
    return frames, rate


def open_remote(uri: str):
    """A ranged reader over an object (sdscore.storage.open_ranged): only the bytes a slice needs are
    fetched (the header, then its frames); AudioError naming the URI when it is missing or denied."""
    try:
        return storage.open_ranged(uri)
    except storage.StorageError as error:
        raise AudioError(str(error)) from None


def remote_error(uri: str, remote, exc: Exception) -> AudioError:
    """The AudioError for an object libsndfile could not read: the failed request if one failed, else
    the decoder's words."""
    if remote.failure is not None:
        return AudioError(str(remote.failure))
    return AudioError(f"{uri}: cannot decode ({exc})")


def decode_slice(
    path: str, sample_rate: int, max_seconds: float, offset: float, duration: float | None
) -> np.ndarray:
    """Decode one slice (seek + read of its frames), downmix to mono, resample; raise AudioError."""
    frames, rate = read_slice_frames(path, offset, duration, max_seconds)
    return finish_frames(os.fspath(path), frames, rate, sample_rate, max_seconds)


def _decode_or_error(path: str, sample_rate: int, max_seconds: float, offset: float, duration: float | None):
    try:
        return decode_slice(path, sample_rate, max_seconds, offset, duration), None
    except AudioError as exc:
        return np.zeros(0, np.float32), str(exc)


def decode_slices(
    paths: Sequence[str],
    offsets: Sequence[float],
    durations: Sequence[float | None],
    sample_rate: int,
    num_threads: int,
    max_seconds: float,
) -> list[tuple[np.ndarray, str | None]]:
    """(waveform, error) per slice, decoded on a thread pool (libsndfile and the core drop the GIL)."""
    jobs = list(zip(paths, offsets, durations))
    one = lambda job: _decode_or_error(job[0], sample_rate, max_seconds, job[1], job[2])
    if num_threads <= 1 or len(jobs) <= 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=num_threads) as pool:
        return list(pool.map(one, jobs))


def slice_arguments(
    n: int, offsets: Sequence[float] | None, durations: Sequence[float | None] | None
) -> tuple[list[float], list[float | None]]:
    """Per-item offsets (default 0) and durations (default None); ValueError quoting both sizes."""
    if offsets is None:
        offsets = [0.0] * n
    if durations is None:
        durations = [None] * n
    offsets, durations = list(offsets), list(durations)
    if len(offsets) != n:
        raise ValueError(f"offsets has {len(offsets)} entries for {n} paths")
    if len(durations) != n:
        raise ValueError(f"durations has {len(durations)} entries for {n} paths")
    return [0.0 if o is None else _number(o) for o in offsets], [None if d is None else _number(d) for d in durations]


def _number(value):
    """A Python float for numeric values (numpy scalars included); anything else as given, so
    check_slice names it in that item's error."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return float(value) if isinstance(value, (int, float, np.integer, np.floating)) else value


def write_slice(path: str, offset: float, duration: float | None, target: str | os.PathLike) -> None:
    """Copy a slice's frames, every channel at the file's own rate, into a float32 WAV at target.

    For consumers that take files (features cached by file content): decoding target whole gives
    exactly the frames ``load(path, offset=..., duration=...)`` reads. Raises AudioError.
    """
    frames, rate = read_slice_frames(path, offset, duration)
    check_finite(os.fspath(path), frames)
    sf.write(os.fspath(target), frames, rate, subtype="FLOAT", format="WAV")
