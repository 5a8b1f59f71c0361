"""Typed facade over the compiled core `sdscore._core`; fails loudly with a build hint."""

from __future__ import annotations

try:
    from sdscore import _core as core
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "sdscore's compiled core (sdscore._core) is not built or failed to load "
        f"({exc}). Build it with `make install` or `pip install -e .` from the "
        "repository root (needs a C++17 compiler, CMake >= 3.18 and pybind11)."
    ) from exc

__all__ = ["core"]
