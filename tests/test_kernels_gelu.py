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
        _core.gelu_(np.zeros((4, 4), np.float32).T, num_threads=1)
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        _core.gelu_(np.zeros(4, np.float32), num_threads=0)
    with pytest.raises(ValueError, match=r"bias must be a contiguous float32 vector of 4"):
        _core.gelu_(np.zeros((3, 4), np.float32), np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"bias must be a vector over x's last dimension \(4\)"):
        gelu_(torch.zeros(3, 4), torch.zeros(3))


@pytest.mark.parametrize("rows, cols", [(0, 192), (1, 1), (5, 7), (3, 8), (129, 192), (300, 9)])
def test_bias_is_added_per_column(rows, cols):
    """GELU(x + bias) over rows of any width (vector tails inside each row), more rows than one
    thread chunk, equal to torch; a strided x or a bf16 one takes the torch op with the bias."""
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    x, bias = torch.randn(rows, cols, generator=g) * 3, torch.randn(cols, generator=g)
    expected = reference(x + bias)
    for threads in (1, 2):
        torch.testing.assert_close(gelu_(x.clone(), bias, num_threads=threads), expected, atol=2e-6, rtol=1e-6)
    strided = x.t().clone().t()
    torch.testing.assert_close(gelu_(strided, bias), expected, atol=2e-6, rtol=1e-6)


def test_portable_loops_agree_with_the_vector_kernel(tmp_path):
    """SDSCORE_DISABLE_SIMD=1 forces std::erf; both paths give the exact GELU to ~1e-6, with a bias too."""
    x = (torch.randn(1001, 21) * 5).numpy()
    bias = torch.randn(21).numpy()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "b.npy", bias)
    code = ("import sys, numpy as np; from sdscore import _core; d = sys.argv[1]; x = np.load(d + '/x.npy'); "
            "xb = x.copy(); print(_core.gelu_isa()); _core.gelu_(x, num_threads=2); "
            "_core.gelu_(xb, np.load(d + '/b.npy'), num_threads=2); np.save(d + '/y.npy', x); np.save(d + '/yb.npy', xb)")
    env = dict(os.environ, SDSCORE_DISABLE_SIMD="1")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "generic"
    generic = torch.from_numpy(np.load(tmp_path / "y.npy"))
    torch.testing.assert_close(generic, reference(torch.from_numpy(x)), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(generic, gelu_(torch.from_numpy(x.copy())), atol=2e-6, rtol=1e-6)
    with_bias = torch.from_numpy(np.load(tmp_path / "yb.npy"))
    torch.testing.assert_close(with_bias, reference(torch.from_numpy(x + bias)), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(with_bias, gelu_(torch.from_numpy(x.copy()), torch.from_numpy(bias)), atol=2e-6, rtol=1e-6)
