"""Fixed-length contours: a variable-length series resampled to n points, as in TRACE's blueprint."""

from __future__ import annotations

import numpy as np


def contour(values: np.ndarray, points: int = 20) -> list[float] | None:
    """values [n] linearly interpolated at `points` evenly spaced positions; None when n == 0."""
    if points < 1:
        raise ValueError(f"contour points must be >= 1, got {points}")
    values = np.asarray(values, dtype=np.float64)
    if len(values) == 0:
        return None
    positions = np.linspace(0, len(values) - 1, points)
    return np.interp(positions, np.arange(len(values)), values).tolist()
