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


def nonnegative_number(value: str) -> float:
    """A finite number >= 0, e.g. a sampling temperature (ArgumentTypeError otherwise)."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number >= 0):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value!r}")
    return number
