"""Audio through NVIDIA DALI: DALI decodes, the core resamples.

DALI's decoder is CPU-only (WAV, FLAC, OGG). Resampling is done by ``sdscore._core.resample``
(the same anti-aliased filter as the other backends), not by DALI's ``fn.audio_resample``:
measured with DALI 2.4 on the CPU, that operator does not low-pass when downsampling at any
``quality`` (a 12 kHz tone in 48 kHz audio comes out of 48 -> 16 kHz at full amplitude, at
4 kHz), so it cannot meet the loader's anti-aliasing contract; its GPU variant was never
verified here. A decode failure fails DALI's whole batch, so a failed batch is retried item by
item to pin the error on its file and keep the others.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from sdscore.audio.batch import AudioBatch
from sdscore.audio.checks import check_decoded, check_finite
from sdscore.errors import AudioError, MissingDependencyError
from sdscore.ragged import pack

MAX_BATCH = 64


def dali_available() -> bool:
    """True when nvidia-dali is importable."""
    try:
        import nvidia.dali  # noqa: F401
    except ImportError:
        return False
    return True


def _require_dali():
    try:
        import nvidia.dali as dali
    except ImportError as exc:
        raise MissingDependencyError(
            "the 'dali' audio backend needs NVIDIA DALI: pip install 'sdscore[dali]' "
            f"(nvidia-dali-cuda130) ({exc})"
        ) from exc
    return dali


@lru_cache(maxsize=8)
def _pipeline(num_threads: int):
    """A built CPU pipeline: encoded bytes → (mono float32 at the file's rate, that rate)."""
    dali = _require_dali()
    fn, types = dali.fn, dali.types

    @dali.pipeline_def(
        batch_size=MAX_BATCH, num_threads=num_threads, device_id=None, prefetch_queue_depth=1
    )
    def decode():
        encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
        audio, rate = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True)
        return audio, rate

    pipe = decode()
    pipe.build()
    return pipe


def _read_bytes(path: str) -> np.ndarray:
    if os.path.isdir(path):
        raise AudioError(f"{path}: is a directory")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise AudioError(f"{path}: no such file") from None
    except OSError as exc:
        raise AudioError(f"{path}: {exc.strerror or exc}") from None
    if not raw:
        raise AudioError(f"{path}: empty file")
    return np.frombuffer(raw, dtype=np.uint8)


def _to_numpy(tensor_list) -> list[np.ndarray]:
    if hasattr(tensor_list, "as_cpu"):
        tensor_list = tensor_list.as_cpu()
    return [np.array(t, dtype=np.float32).reshape(-1) for t in tensor_list]


def _run(pipe, encoded: list[np.ndarray]):
    pipe.feed_input("encoded", encoded)
    decoded, rates = pipe.run()
    return _to_numpy(decoded), [int(np.array(r).reshape(-1)[0]) for r in rates]


def _checked(path, decoded, rate, sample_rate, max_seconds) -> np.ndarray:
    check_decoded(path, len(decoded), rate, max_seconds)
    check_finite(path, decoded)
    if rate == sample_rate:
        return decoded
    from sdscore import _core

    return _core.resample(decoded, rate, sample_rate)  # releases the GIL


def _decode_chunk(sample_rate, num_threads, paths, encoded, max_seconds, pool):
    """(waveform, error) per item; DALI fails a whole batch on one bad file, so isolate it."""
    pipe = _pipeline(num_threads)
    try:
        outputs = list(zip(*_run(pipe, encoded)))
    except Exception as exc:
        _pipeline.cache_clear()  # DALI: "Current pipeline object is no longer valid"
        if len(paths) == 1:
            return [(np.zeros(0, np.float32), f"{paths[0]}: DALI cannot decode ({_reason(exc)})")]
        return [
            r
            for p, e in zip(paths, encoded)
            for r in _decode_chunk(sample_rate, num_threads, [p], [e], max_seconds, pool)
        ]

    def one(item):
        path, (decoded, rate) = item
        try:
            return _checked(path, decoded, rate, sample_rate, max_seconds), None
        except AudioError as exc:
            return np.zeros(0, np.float32), str(exc)

    return list(pool.map(one, zip(paths, outputs)))


def load_many(
    paths: Sequence[str], sample_rate: int, num_threads: int, max_seconds: float
) -> AudioBatch:
    """Decode and resample every path with DALI into one AudioBatch; failures become errors."""
    _require_dali()
    results: list[tuple[np.ndarray, str | None]] = [(np.zeros(0, np.float32), None)] * len(paths)
    readable: list[int] = []
    encoded: list[np.ndarray] = []
    for i, path in enumerate(paths):
        try:
            encoded.append(_read_bytes(os.fspath(path)))
            readable.append(i)
        except AudioError as exc:
            results[i] = (np.zeros(0, np.float32), str(exc))
    threads = max(1, num_threads)
    with ThreadPoolExecutor(threads) as pool:
        for start in range(0, len(readable), MAX_BATCH):
            idx = readable[start : start + MAX_BATCH]
            chunk = [os.fspath(paths[i]) for i in idx]
            decoded = _decode_chunk(
                int(sample_rate), threads, chunk, encoded[start : start + MAX_BATCH], max_seconds, pool
            )
            for i, result in zip(idx, decoded):
                results[i] = result
    data, offsets = pack([wave for wave, _ in results])
    return AudioBatch(data, offsets, [err for _, err in results], int(sample_rate))


def _reason(exc: Exception) -> str:
    """DALI's own words for a failure: the line after 'encountered:', else the first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for i, line in enumerate(lines[:-1]):
        if line == "encountered:":
            return lines[i + 1]
    return lines[0] if lines else type(exc).__name__
