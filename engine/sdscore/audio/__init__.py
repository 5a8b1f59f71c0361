"""Audio loading: float32 mono at a requested rate, one file or a ragged batch.

Backends: ``native`` (the compiled core: WAV decode + polyphase resampler on threads that drop
the GIL; other containers through soundfile), ``soundfile`` and ``dali``. Items given a slice
(offset/duration in seconds) are read by seeking with soundfile (see ``sdscore.audio.slices``),
whatever the backend; whole-file items go through the chosen backend. Objects on a store
(``s3://``, ``gs://``; ``file://`` is a local path) are fetched whole and decoded from memory, or
for a slice read by ranged requests of its bytes only (``sdscore.audio.remote_audio``). Clips
embedded in a dataset file (``embedded://`` references a manifest reader puts in place of paths)
are read from that file and decoded from memory (``sdscore.audio.embedded_clips``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from sdscore import storage
from sdscore.audio.backends import BACKEND_ENV, BACKENDS, resolve_backend
from sdscore.audio.batch import AudioBatch
from sdscore.audio.checks import check_target_rate, resolve_max_seconds
from sdscore.audio.embedded_clips import is_embedded
from sdscore.audio.remote_audio import decode_objects, local_or_uri
from sdscore.audio.slices import decode_slices, is_whole_file, slice_arguments
from sdscore.errors import AudioError
from sdscore.ragged import pack
from sdscore.runtime.compute_budget import cores


def load_many(
    paths: Sequence[str | os.PathLike],
    sample_rate: int = 16000,
    num_threads: int | None = None,
    backend: str = "auto",
    max_seconds: float | None = None,
    offsets: Sequence[float | None] | None = None,
    durations: Sequence[float | None] | None = None,
) -> AudioBatch:
    """Load many files (local paths, file://, s3:// or gs:// URIs) into one AudioBatch; a bad file
    records its error and the rest load.

    num_threads defaults to the compute budget's cores() (sdscore.runtime.compute_budget); max_seconds caps each item's duration (default:
    $SDSCORE_MAX_AUDIO_SECONDS, else no cap). offsets/durations (seconds in each file's time
    base; None entries mean 0 and "to the end") load item i as that slice of its file; a bad
    slice (negative, not a number, past the end, empty) is item i's error.
    """
    sample_rate = check_target_rate(sample_rate)
    cap = resolve_max_seconds(max_seconds)
    threads = cores() if num_threads is None else int(num_threads)
    if threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    name = resolve_backend(backend)
    paths = [local_or_uri(p) for p in paths]
    threads = min(threads, max(1, len(paths)))
    remote = [i for i, path in enumerate(paths) if storage.is_remote(path)]
    embedded = [i for i, path in enumerate(paths) if is_embedded(path)]
    if offsets is None and durations is None and not remote and not embedded:
        return BACKENDS[name](paths, sample_rate, threads, cap)
    starts, lengths = slice_arguments(len(paths), offsets, durations)
    sliced = [i for i in range(len(paths)) if not is_whole_file(starts[i], lengths[i])]
    in_memory = set(remote) | set(embedded)
    whole = [i for i in range(len(paths)) if is_whole_file(starts[i], lengths[i]) and i not in in_memory]
    objects = [i for i in sorted(in_memory) if is_whole_file(starts[i], lengths[i])]
    if not sliced and not objects:
        return BACKENDS[name](paths, sample_rate, threads, cap)
    waves: list[np.ndarray] = [np.zeros(0, np.float32)] * len(paths)
    errors: list[str | None] = [None] * len(paths)
    if whole:
        batch = BACKENDS[name]([paths[i] for i in whole], sample_rate, min(threads, len(whole)), cap)
        for j, i in enumerate(whole):
            waves[i], errors[i] = batch[j], batch.errors[j]
    for i, (wave, error) in zip(objects, decode_objects([paths[i] for i in objects], sample_rate, threads, cap)):
        waves[i], errors[i] = wave, error
    if not sliced:
        data, item_offsets = pack(waves)
        return AudioBatch(data, item_offsets, errors, sample_rate)
    decoded = decode_slices([paths[i] for i in sliced], [starts[i] for i in sliced],
                            [lengths[i] for i in sliced], sample_rate, min(threads, len(sliced)), cap)
    for i, (wave, error) in zip(sliced, decoded):
        waves[i], errors[i] = wave, error
    data, item_offsets = pack(waves)
    return AudioBatch(data, item_offsets, errors, sample_rate)


def load(
    path: str | os.PathLike,
    sample_rate: int = 16000,
    backend: str = "auto",
    max_seconds: float | None = None,
    offset: float = 0.0,
    duration: float | None = None,
) -> np.ndarray:
    """Load one file (or its slice offset..offset+duration, in seconds) as float32 mono at
    sample_rate; raise AudioError naming the file and problem."""
    sliced = not is_whole_file(offset, duration)
    batch = load_many([path], sample_rate, num_threads=1, backend=backend, max_seconds=max_seconds,
                      offsets=[offset] if sliced else None, durations=[duration] if sliced else None)
    if batch.errors[0] is not None:
        raise AudioError(batch.errors[0])
    return batch[0].copy()


__all__ = ["BACKEND_ENV", "AudioBatch", "load", "load_many"]
