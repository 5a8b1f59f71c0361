"""sdscore.kernels.gelu_ (compiled core, in place) against torch's exact GELU."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from sdscore.kernels import gelu_

# 0 and 1 element, one short of / exactly / one past a vector, one past a thread chunk (16384)
SIZES = [0, 1, 7, 8, 9, 63, 16385, 100_003]


def reference(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x.double()).float()


@pytest.mark.parametrize("n", SIZES)
def test_matches_exact_gelu_on_ragged_sizes(n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 4
    got = gelu_(x.clone())
    torch.testing.assert_close(got, reference(x), atol=2e-6, rtol=1e-6)


def test_in_place_and_wide_range():
    """Values far into both tails (erf saturates), zeros, and a 2-D block written in place."""
    x = torch.cat([torch.linspace(-30, 30, 60_001), torch.zeros(5), torch.tensor([-1e30, 1e30, 3e-39])])
    y = x.clone()
    out = gelu_(y)
    assert out.data_ptr() == y.data_ptr()
    torch.testing.assert_close(y, reference(x), atol=2e-6, rtol=1e-6)
    block = torch.randn(37, 192)
    expected = reference(block)
    gelu_(block)
    torch.testing.assert_close(block, expected, atol=2e-6, rtol=1e-6)


def test_thread_counts_agree():
    x = torch.randn(70_001)
    one = gelu_(x.clone(), num_threads=1)
    for threads in (2, 3, 8):
        torch.testing.assert_close(gelu_(x.clone(), num_threads=threads), one, atol=0, rtol=0)


def test_strided_bf16_and_grad_inputs():
    """Non-contiguous and bf16 tensors take the torch op (still in place); grad inputs are refused."""
    x = torch.randn(8, 10)
    strided = x.clone().t()
    gelu_(strided)
    torch.testing.assert_close(strided, F.gelu(x.t()))
    half = torch.randn(33).bfloat16()
    expected = F.gelu(half)
    torch.testing.assert_close(gelu_(half), expected)
    with pytest.raises(ValueError, match="requires grad"):
        gelu_(torch.randn(4, requires_grad=True))
    with pytest.raises(ValueError, match="floating tensor"):
        gelu_(torch.arange(4))
    from sdscore import _core

    with pytest.raises(ValueError, match="writable, C-contiguous"):
        _core.gelu_(np.zeros((4, 4), np.float32).T, 1)
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        _core.gelu_(np.zeros(4, np.float32), 0)


def test_portable_loops_agree_with_the_vector_kernel(tmp_path):
    """SDSCORE_DISABLE_SIMD=1 forces std::erf; both paths give the exact GELU to ~1e-6."""
    x = (torch.randn(20_011) * 5).numpy()
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np; from sdscore import _core; x = np.load(sys.argv[1] + '/x.npy'); "
            "print(_core.gelu_isa()); _core.gelu_(x, 2); np.save(sys.argv[1] + '/y.npy', x)")
    env = dict(os.environ, SDSCORE_DISABLE_SIMD="1")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "generic"
    generic = torch.from_numpy(np.load(tmp_path / "y.npy"))
    torch.testing.assert_close(generic, reference(torch.from_numpy(x)), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(generic, gelu_(torch.from_numpy(x.copy())), atol=2e-6, rtol=1e-6)
