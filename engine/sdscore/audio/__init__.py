"""Audio loading: float32 mono at a requested rate, one file or a ragged batch.

Backends: ``native`` (the compiled core: WAV decode + polyphase resampler on threads that drop
the GIL; other containers through soundfile), ``soundfile`` and ``dali``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from sdscore.audio.backends import BACKEND_ENV, BACKENDS, resolve_backend
from sdscore.audio.batch import AudioBatch
from sdscore.audio.checks import check_target_rate, resolve_max_seconds
from sdscore.errors import AudioError


def load_many(
    paths: Sequence[str | os.PathLike],
    sample_rate: int = 16000,
    num_threads: int | None = None,
    backend: str = "auto",
    max_seconds: float | None = None,
) -> AudioBatch:
    """Load many files into one AudioBatch; a bad file records its error and the rest load.

    num_threads defaults to the CPU count; max_seconds caps each file's duration (default:
    $SDSCORE_MAX_AUDIO_SECONDS, else no cap).
    """
    sample_rate = check_target_rate(sample_rate)
    cap = resolve_max_seconds(max_seconds)
    threads = (os.cpu_count() or 1) if num_threads is None else int(num_threads)
    if threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    name = resolve_backend(backend)
    paths = [os.fspath(p) for p in paths]
    return BACKENDS[name](paths, sample_rate, min(threads, max(1, len(paths))), cap)


def load(
    path: str | os.PathLike,
    sample_rate: int = 16000,
    backend: str = "auto",
    max_seconds: float | None = None,
) -> np.ndarray:
    """Load one file as float32 mono at sample_rate; raise AudioError naming the file and problem."""
    batch = load_many([path], sample_rate, num_threads=1, backend=backend, max_seconds=max_seconds)
    if batch.errors[0] is not None:
        raise AudioError(batch.errors[0])
    return batch[0].copy()


__all__ = ["BACKEND_ENV", "AudioBatch", "load", "load_many"]
