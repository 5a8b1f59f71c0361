"""span_attention (compiled core, CPU) against its torch reference and against SDPA with a mask."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from sdscore import _core
from sdscore.kernels import span_attention, span_attention_reference


def ragged(b: int, n: int, h: int, d: int, seed: int = 0, left: bool = False):
    """qkv [b, n, 3, h, d] and spans covering lengths 0, 1, 7, 8, 9 (the vector block ± 1) and n."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(b, n, 3, h, d, generator=g)
    lengths = torch.tensor([[0, 1, 7, 8, 9, n][i % 6] for i in range(b)])
    starts = n - lengths if left else torch.zeros_like(lengths)
    return qkv, starts, lengths


@pytest.mark.parametrize("d", [8, 16, 32, 64, 24, 5])
@pytest.mark.parametrize("left", [False, True])
def test_core_matches_the_reference_on_ragged_spans(d, left):
    qkv, starts, lengths = ragged(7, 37, 3, d, seed=d, left=left)
    ref = span_attention_reference(qkv, starts, lengths)
    got = span_attention(qkv, starts, lengths, impl="core", num_threads=2)
    torch.testing.assert_close(got, ref, atol=2e-6, rtol=1e-5)
    assert _core.span_attention_isa(d) in ("avx512f", "avx2+fma", "generic")


def test_spans_in_the_middle_and_zero_outside():
    qkv = torch.randn(3, 20, 3, 2, 16)
    starts, lengths = torch.tensor([4, 0, 19]), torch.tensor([9, 0, 1])
    got = span_attention(qkv, starts, lengths, impl="core")
    torch.testing.assert_close(got, span_attention_reference(qkv, starts, lengths), atol=2e-6, rtol=1e-5)
    assert got[0, :4].abs().sum() == 0 and got[0, 13:].abs().sum() == 0 and got[1].abs().sum() == 0
    # a single position attends only to itself: the output is its own value
    torch.testing.assert_close(got[2, 19], qkv[2, 19, 2], atol=1e-6, rtol=0)


def test_reference_equals_masked_sdpa():
    """The reference is attention restricted to the span: SDPA over the padded batch with a key mask."""
    qkv, starts, lengths = ragged(6, 29, 4, 16, seed=3)
    keep = torch.arange(29)[None] < lengths[:, None]
    q, k, v = qkv.permute(2, 0, 3, 1, 4)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :]).transpose(1, 2)
    ref = span_attention_reference(qkv, starts, lengths)
    torch.testing.assert_close(ref[keep], sdpa[keep], atol=1e-6, rtol=1e-5)


def test_thread_counts_give_identical_results():
    qkv, starts, lengths = ragged(11, 50, 4, 16, seed=5)
    one = span_attention(qkv, starts, lengths, impl="core", num_threads=1)
    for threads in (2, 3, 64):
        assert torch.equal(span_attention(qkv, starts, lengths, impl="core", num_threads=threads), one)


def test_large_and_extreme_scores_stay_finite():
    qkv = torch.randn(2, 40, 3, 2, 16) * 30.0  # logits in the hundreds: exp must not overflow
    starts, lengths = torch.tensor([0, 3]), torch.tensor([40, 30])
    got = span_attention(qkv, starts, lengths, impl="core")
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, span_attention_reference(qkv, starts, lengths), atol=1e-4, rtol=1e-4)


def test_auto_picks_the_reference_when_a_gradient_is_needed():
    qkv, starts, lengths = ragged(3, 12, 2, 16)
    qkv.requires_grad_(True)
    out = span_attention(qkv, starts, lengths)  # auto: the core kernel cannot backpropagate
    out.sum().backward()
    assert qkv.grad is not None
    with pytest.raises(ValueError, match="needs a CPU float32 tensor without gradient"):
        span_attention(qkv, starts, lengths, impl="core")
    with pytest.raises(ValueError, match="needs a CPU float32"):
        span_attention(qkv.detach().double(), starts, lengths, impl="core")


def test_bad_arguments_are_named():
    qkv = torch.randn(2, 5, 3, 1, 8)
    with pytest.raises(ValueError, match=r"row 1 spans \[3, 7\), outside its 5 positions"):
        span_attention(qkv, torch.tensor([0, 3]), torch.tensor([5, 4]))
    with pytest.raises(ValueError, match=r"qkv must be a tensor \[B, L, 3, H, D\]"):
        span_attention(torch.randn(2, 5, 2, 1, 8), torch.tensor([0, 0]), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="lengths must be an integer tensor"):
        span_attention(qkv, torch.tensor([0, 0]), torch.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match="impl must be one of"):
        span_attention(qkv, torch.tensor([0, 0]), torch.tensor([1, 1]), impl="triton")
    with pytest.raises(ValueError, match="row 0 spans"):  # the core checks too, for direct callers
        _core.span_attention(qkv.numpy(), np.array([4, 0]), np.array([2, 1]), 1.0, 1)


def test_portable_loops_agree_with_the_vector_kernel(tmp_path):
    """SDSCORE_DISABLE_SIMD=1 forces the generic loops (std::exp, one query at a time)."""
    qkv, starts, lengths = ragged(6, 33, 2, 16, seed=9)
    np.save(tmp_path / "qkv.npy", qkv.numpy())
    code = (
        "import sys, numpy as np; from sdscore import _core; "
        "q = np.load(sys.argv[1] + '/qkv.npy'); print(_core.span_attention_isa(16)); "
        f"np.save(sys.argv[1] + '/out.npy', _core.span_attention(q, np.array({starts.tolist()}), "
        f"np.array({lengths.tolist()}), 0.25, 2))"
    )
    env = dict(os.environ, SDSCORE_DISABLE_SIMD="1")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "generic"
    generic = torch.from_numpy(np.load(tmp_path / "out.npy"))
    torch.testing.assert_close(generic, span_attention(qkv, starts, lengths, impl="core"), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("d", [16, 32, 64])
def test_the_avx2_kernel_agrees_with_the_avx512_one(tmp_path, d):
    """SDSCORE_DISABLE_AVX512=1 keeps the 8-lane kernel on an AVX-512 CPU; both give the same
    attention (the same exp polynomial per lane; sums in another order). Spans of 0-37 keys cover
    the 16- and 32-key blocks' partial last blocks."""
    qkv, starts, lengths = ragged(6, 37, 2, d, seed=11, left=True)
    np.save(tmp_path / "qkv.npy", qkv.numpy())
    code = (
        "import sys, numpy as np; from sdscore import _core; "
        f"q = np.load(sys.argv[1] + '/qkv.npy'); print(_core.span_attention_isa({d})); "
        f"np.save(sys.argv[1] + '/out.npy', _core.span_attention(q, np.array({starts.tolist()}), "
        f"np.array({lengths.tolist()}), {d ** -0.5}, 2))"
    )
    env = dict(os.environ, SDSCORE_DISABLE_AVX512="1")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() in ("avx2+fma", "generic")
    eight_lanes = torch.from_numpy(np.load(tmp_path / "out.npy"))
    torch.testing.assert_close(eight_lanes, span_attention(qkv, starts, lengths, impl="core"), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(eight_lanes, span_attention_reference(qkv, starts, lengths), atol=2e-6, rtol=1e-5)
