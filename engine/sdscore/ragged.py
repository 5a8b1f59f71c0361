"""The one ragged representation: flat values plus int64 offsets ``[n+1]``, built here only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def offsets_from_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """Offsets ``[n+1]`` (int64, starting at 0) for items of the given lengths."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {lengths.shape}")
    if (lengths < 0).any():
        raise ValueError(f"lengths must be non-negative, got minimum {int(lengths.min())}")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def pack(items: Sequence[np.ndarray], dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate 1-D arrays into (values, offsets); an empty sequence gives ([], [0])."""
    offsets = offsets_from_lengths([len(x) for x in items])
    values = np.empty(int(offsets[-1]), dtype=dtype)
    for x, start, stop in zip(items, offsets[:-1], offsets[1:]):
        values[start:stop] = x
    return values, offsets


def check_offsets(offsets: np.ndarray, n_values: int) -> None:
    """Raise ValueError unless offsets are int64, start at 0, never decrease and end at n_values."""
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError(f"offsets must be 1-D with at least one entry, got shape {offsets.shape}")
    if offsets.dtype != np.int64:
        raise ValueError(f"offsets must be int64, got {offsets.dtype}")
    if offsets[0] != 0:
        raise ValueError(f"offsets must start at 0, got {int(offsets[0])}")
    if (np.diff(offsets) < 0).any():
        raise ValueError("offsets must be non-decreasing")
    if offsets[-1] != n_values:
        raise ValueError(f"offsets end at {int(offsets[-1])} but there are {n_values} values")
