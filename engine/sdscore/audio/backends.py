"""Audio backend choice: the argument, then $SDSCORE_AUDIO_BACKEND, then auto (native)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from sdscore.audio import dali_backend, native_backend, soundfile_backend
from sdscore.audio.batch import AudioBatch

BACKEND_ENV = "SDSCORE_AUDIO_BACKEND"

LoadMany = Callable[[Sequence[str], int, int, float], AudioBatch]

#: name → load_many(paths, sample_rate, num_threads, max_seconds)
BACKENDS: dict[str, LoadMany] = {
    "native": native_backend.load_many,
    "soundfile": soundfile_backend.load_many,
    "dali": dali_backend.load_many,
}


def resolve_backend(backend: str | None = "auto") -> str:
    """Name of the backend to use; 'auto' (or None) defers to the env var, then to 'native'."""
    name = (backend or "auto").strip().lower()
    source = "backend argument"
    if name == "auto":
        env = os.environ.get(BACKEND_ENV, "").strip().lower()
        name, source = (env, BACKEND_ENV) if env else ("auto", "")
    if name == "auto":
        return "native"
    if name not in BACKENDS:
        choices = ", ".join(["auto", *BACKENDS])
        raise ValueError(f"unknown audio backend {name!r} (from {source}); choose one of {choices}")
    return name
