"""Audio objects on a store (s3://, gs://) and clips embedded in a dataset file (embedded://):
fetched or read whole and decoded from memory.

A whole object is read in one request (its length checked against what the store announced) and
decoded like `decode_bytes` (WAV by the native core, with the same truncated-header check as local
files; other containers through libsndfile); a slice is read by ranged requests instead
(`sdscore.audio.slices`). A missing, denied or short object is that item's error, naming its URI.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from sdscore import storage
from sdscore.audio.embedded_clips import describe, is_embedded, read_embedded
from sdscore.audio.memory import decode_bytes
from sdscore.errors import AudioError


def local_or_uri(path: str | os.PathLike) -> str:
    """A `file://` URI as its local path; anything else as given (a path that cannot be read is the
    loader's item error, not an exception for the whole batch)."""
    text = os.fspath(path)
    try:
        return storage.normalize(text)
    except storage.StorageError:
        return text


def decode_object(uri: str, sample_rate: int, max_seconds: float) -> np.ndarray:
    """Fetch one object (or read one embedded clip) and decode it to float32 mono at sample_rate;
    AudioError naming the URI (the clip's file, row and column)."""
    if is_embedded(uri):
        return decode_bytes(read_embedded(uri), sample_rate, name=describe(uri), max_seconds=max_seconds)
    try:
        data = storage.read_bytes(uri)
    except storage.StorageError as error:
        raise AudioError(str(error)) from None
    return decode_bytes(data, sample_rate, name=uri, max_seconds=max_seconds)


def _decode_or_error(uri: str, sample_rate: int, max_seconds: float) -> tuple[np.ndarray, str | None]:
    try:
        return decode_object(uri, sample_rate, max_seconds), None
    except AudioError as error:
        return np.zeros(0, np.float32), str(error)


def decode_objects(uris: Sequence[str], sample_rate: int, num_threads: int,
                   max_seconds: float) -> list[tuple[np.ndarray, str | None]]:
    """(waveform, error) per URI, fetched and decoded on a thread pool (requests and the core drop the GIL)."""
    if num_threads <= 1 or len(uris) <= 1:
        return [_decode_or_error(uri, sample_rate, max_seconds) for uri in uris]
    with ThreadPoolExecutor(max_workers=min(num_threads, len(uris))) as pool:
        return list(pool.map(lambda uri: _decode_or_error(uri, sample_rate, max_seconds), uris))
