"""Resamples inputs that sit right after and right before a PROT_NONE page (a stray read is a
crash) and checks each result equals that of an ordinary copy; prints the number of checks.
Usage: python guarded_reads.py "[(sr_in, sr_out), ...]" "[length, ...]" (test_core_resample)."""

from __future__ import annotations

import ast
import ctypes
import mmap
import sys

import numpy as np
from sdscore import _core

libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE


def guarded(n: int, at_end: bool) -> tuple[mmap.mmap, np.ndarray]:
    """n float32 samples ending at (at_end) or starting after (else) an inaccessible page."""
    pages = (n * 4 + PAGE - 1) // PAGE + 1
    buf = mmap.mmap(-1, (pages + 1) * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    guard = base + pages * PAGE if at_end else base
    if libc.mprotect(guard, PAGE, 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = pages * PAGE - n * 4 if at_end else PAGE
    return buf, np.frombuffer(buf, dtype=np.float32, count=n, offset=offset)


def main() -> None:
    pairs, lengths = ast.literal_eval(sys.argv[1]), ast.literal_eval(sys.argv[2])
    rng = np.random.default_rng(5)
    checks = 0
    for a, b in pairs:
        for n in lengths:
            for at_end in (True, False):
                buf, x = guarded(n, at_end)
                x[:] = rng.standard_normal(n)
                y = _core.resample(x, a, b)
                np.testing.assert_array_equal(y, _core.resample(x.copy(), a, b))
                checks += 1
    print(_core.simd_isa(), checks)


if __name__ == "__main__":
    main()
