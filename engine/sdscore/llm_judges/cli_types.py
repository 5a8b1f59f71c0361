"""argparse value types shared by the judge options of every protocol."""

from __future__ import annotations

import argparse
import math


def positive_seconds(value: str) -> float:
    """A finite number of seconds > 0 (ArgumentTypeError otherwise)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value!r}")
    return seconds
