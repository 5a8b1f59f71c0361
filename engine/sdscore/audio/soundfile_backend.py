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


_UNKNOWN_SIZE = 0xFFFFFFFF
_SOX_PIPE_SIZE = 0x7FFFF000  # sox writing to a pipe
_WRAPPED_FLOOR = 0xFFFFF000  # "file length - header" stored before the length was known: 2^32 - 44 ...


def _is_placeholder_size(declared: int) -> bool:
    """A size streaming writers leave in a header they cannot finish (csrc/audio/wav_decoder.cpp)."""
    return declared == _SOX_PIPE_SIZE or declared >= _WRAPPED_FLOOR
_MAX_CHUNKS = 4096  # chunks walked before the data chunk (real files have a handful)


def check_wav_data_size(path: str) -> None:
    """AudioError when a RIFF/RF64 WAV's data chunk declares more bytes than the file holds (a
    truncated file or a header that lies; libsndfile reads what is there without a word), or 0
    bytes with samples after it; the same rule as the native decoder (csrc/audio/wav_decoder.cpp).
    A placeholder size that the file does not hold (0xFFFFFFFF without ds64, sox's 0x7FFFF000 for
    pipes, 2^32 - header) is the streaming writers' "size unknown": to the end of the file."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(12)
            if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64", b"BW64") or head[8:12] != b"WAVE":
                return  # not a WAV: libsndfile judges it
            pos, ds64_size = 12, None
            for _ in range(_MAX_CHUNKS):
                handle.seek(pos)
                header = handle.read(8)
                if len(header) < 8:
                    return  # no data chunk: libsndfile says so
                declared = int.from_bytes(header[4:], "little")
                body, avail = pos + 8, size - pos - 8
                if header[:4] == b"ds64" and declared >= 24:
                    fields = handle.read(24)
                    ds64_size = int.from_bytes(fields[8:16], "little") if len(fields) == 24 else None
                elif header[:4] == b"data":
                    from_ds64 = declared == _UNKNOWN_SIZE and ds64_size is not None
                    n = ds64_size if from_ds64 else declared
                    unknown = not from_ds64 and _is_placeholder_size(declared) and n > avail
                    if not unknown and n > avail:
                        raise AudioError(f"{path}: truncated or lying header: the data chunk declares {n} bytes "
                                         f"but the file holds {avail} after it")
                    if n == 0 and avail > 0:
                        raise AudioError(f"{path}: the data chunk declares 0 bytes but {avail} bytes follow it "
                                         "(a streamed file whose header was never finished?)")
                    return
                pos = body + declared + (declared & 1)
    except OSError:
        return  # libsndfile names the problem when it opens the file


def decode_file(path: str, sample_rate: int, max_seconds: float) -> np.ndarray:
    """Decode one file with soundfile, downmix to mono and resample; raise AudioError on failure."""
    path = os.fspath(path)
    try:
        info = sf.info(path)
    except Exception as exc:  # libsndfile reports everything as one generic error type
        raise open_error(path, exc) from None
    check_wav_data_size(path)
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
