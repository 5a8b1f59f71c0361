"""Decoder-layer ops (RMSNorm, SiLU·mul, rotary in place): Triton kernel vs torch reference vs
Hugging Face's own ops, on odd and empty sizes, in float32 / float16 / bfloat16; every error path.

Without CUDA the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1, set in conftest.py).
The references must equal Hugging Face's modules exactly (they are what the fused layer runs on
the CPU); the kernels round where those ops round, so they sit within a few units in the last
place of the output dtype (float32 summation order is the only difference).
"""

from __future__ import annotations

import pytest
import torch
from sdscore import kernels
from sdscore.kernels import dispatch

HAS_TRITON = dispatch.triton_available()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
IMPLS = ["torch", pytest.param("triton", marks=pytest.mark.skipif(not HAS_TRITON, reason="triton not installed"))]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# kernel vs reference: float32 to summation order; half types to one rounding step of the output
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2)}
SIZES = [1, 7, 769]


def _hf():
    return pytest.importorskip("transformers.models.qwen2_5_omni.modeling_qwen2_5_omni")


def _close(got, want, dtype):
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", SIZES)
@pytest.mark.parametrize("rows", [0, 1, 5])
def test_rms_norm_matches_the_hf_module(impl, dtype, width, rows):
    hf = _hf()
    g = torch.Generator().manual_seed(width * 10 + rows)
    x = (torch.randn(2, rows, width, generator=g) * 3).to(DEVICE, dtype)
    norm = hf.Qwen2_5OmniRMSNorm(width, eps=1e-6).to(DEVICE, dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(width, generator=g))
        want = norm(x)
        got = kernels.rms_norm(x, norm.weight, 1e-6, impl=impl)
    assert got.shape == want.shape and got.dtype == want.dtype
    if impl == "torch":
        assert torch.equal(got, want)
    else:
        _close(got, want, dtype)


@pytest.mark.parametrize("impl", IMPLS)
def test_rms_norm_reads_strided_rows_and_mixed_weight_dtype(impl):
    x = torch.randn(6, 40, device=DEVICE)[::2, :33].to(torch.bfloat16)  # row stride 80, 33 columns
    w = torch.randn(33, device=DEVICE)  # float32 weight over bf16 input: the result is float32, as in torch
    got = kernels.rms_norm(x, w, 1e-5, impl=impl)
    want = kernels.rms_norm_reference(x, w, 1e-5)
    assert got.dtype == torch.float32
    _close(got, want, torch.bfloat16)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inter", SIZES)
@pytest.mark.parametrize("rows", [0, 1, 9])
def test_silu_mul_matches_the_hf_mlp_activation(impl, dtype, inter, rows):
    g = torch.Generator().manual_seed(inter + rows)
    gate_up = (torch.randn(rows, 2 * inter, generator=g) * 4).to(DEVICE, dtype)
    gate, up = gate_up[:, :inter], gate_up[:, inter:]
    want = torch.nn.functional.silu(gate) * up  # Qwen2MLP: act_fn(gate_proj(x)) * up_proj(x)
    got = kernels.silu_mul(gate_up, impl=impl)
    assert got.shape == (rows, inter) and got.dtype == dtype
    if impl == "torch":
        assert torch.equal(got, want)
    else:
        _close(got, want, dtype)


def _rope(batch, tokens, dim, dtype, seed):
    """cos/sin as Qwen2.5-Omni's rotary embedding returns them for text positions (MRoPE sections recomposed)."""
    g = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 4000, (batch, tokens), generator=g).float()
    inv = 1.0 / (1e6 ** (torch.arange(0, dim, 2).float() / dim))
    freqs = positions[..., None] * inv
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().to(DEVICE, dtype), emb.sin().to(DEVICE, dtype)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, heads, dim", [(0, 2, 8), (1, 1, 2), (7, 3, 14), (13, 5, 128)])
def test_rotary_in_place_matches_apply_rotary_pos_emb(impl, dtype, tokens, heads, dim):
    hf = _hf()
    g = torch.Generator().manual_seed(tokens * 7 + dim)
    qkv = torch.randn(2, tokens, 2 * heads + 1, dim, generator=g).to(DEVICE, dtype)  # q, k and v heads in one buffer
    q, k = qkv[:, :, :heads], qkv[:, :, heads:2 * heads]
    cos, sin = _rope(2, tokens, dim, dtype, tokens)
    want_q, want_k = hf.apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    v_before = qkv[:, :, -1].clone()
    assert kernels.rotary_(q, cos, sin, impl=impl) is q
    kernels.rotary_(k, cos, sin, impl=impl)
    got_q, got_k = qkv[:, :, :heads].transpose(1, 2), qkv[:, :, heads:2 * heads].transpose(1, 2)
    if impl == "torch":
        assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
    else:
        _close(got_q, want_q, dtype)
        _close(got_k, want_k, dtype)
    assert torch.equal(qkv[:, :, -1], v_before)  # the v heads beside them are untouched


@pytest.mark.parametrize("impl", IMPLS)
def test_rotary_broadcasts_one_cos_row_over_the_batch(impl):
    x = torch.randn(3, 5, 2, 8, device=DEVICE)
    cos, sin = _rope(1, 5, 8, torch.float32, 1)
    want = kernels.rotary_reference(x, cos.expand(3, -1, -1), sin.expand(3, -1, -1))
    torch.testing.assert_close(kernels.rotary_(x.clone(), cos, sin, impl=impl), want, rtol=1e-6, atol=1e-6)


def test_errors_name_the_problem():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="weight has 5 entries but x has H = 4"):
        kernels.rms_norm(x, torch.ones(5), 1e-6)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        kernels.rms_norm(x, torch.ones(4), -1.0)
    with pytest.raises(ValueError, match="x must be a floating tensor"):
        kernels.rms_norm(torch.arange(4), torch.ones(4), 1e-6)
    with pytest.raises(ValueError, match="must be even; got 5"):
        kernels.silu_mul(torch.randn(2, 5))
    with pytest.raises(ValueError, match="gate_up must be a floating tensor"):
        kernels.silu_mul(torch.arange(4))
    with pytest.raises(ValueError, match=r"x must be a floating tensor \[B, T, heads, d\]"):
        kernels.rotary_(torch.randn(2, 3, 4), torch.ones(1, 2, 4), torch.ones(1, 2, 4))
    with pytest.raises(ValueError, match="head size must be even"):
        kernels.rotary_(torch.randn(1, 2, 1, 5), torch.ones(1, 2, 5), torch.ones(1, 2, 5))
    with pytest.raises(ValueError, match=r"cos has shape \(1, 3, 4\), expected \(1 or 1, 2, 4\)"):
        kernels.rotary_(torch.randn(1, 2, 1, 4), torch.ones(1, 3, 4), torch.ones(1, 2, 4))
    with pytest.raises(ValueError, match="in-place inference op"):
        kernels.rotary_(torch.randn(1, 2, 1, 4, requires_grad=True), torch.ones(1, 2, 4), torch.ones(1, 2, 4))
    with pytest.raises(ValueError, match="impl must be one of"):
        kernels.silu_mul(torch.randn(2, 4), impl="cuda")


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_triton_refuses_what_it_cannot_run_and_auto_falls_back():
    strided = torch.randn(4, 8, device=DEVICE).t()  # last dimension strided
    with pytest.raises(ValueError, match="last dimension is strided"):
        kernels.silu_mul(strided, impl="triton")
    assert torch.equal(kernels.silu_mul(strided), kernels.silu_mul_reference(strided))
    with pytest.raises(ValueError, match="exceeds 16384"):
        kernels.rms_norm(torch.randn(1, 16385, device=DEVICE), torch.ones(16385, device=DEVICE), 1e-6, impl="triton")
    grad = torch.randn(2, 4, device=DEVICE, requires_grad=True)
    with pytest.raises(ValueError, match="autograd needs the reference"):
        kernels.rms_norm(grad, torch.ones(4, device=DEVICE), 1e-6, impl="triton")
    kernels.rms_norm(grad, torch.ones(4, device=DEVICE), 1e-6).sum().backward()  # auto: the reference, differentiable
    assert grad.grad is not None


@pytest.mark.skipif(not HAS_TRITON, reason="triton not installed")
def test_kernels_compile_for_a_cuda_gpu():
    """The GPU code path, not only the interpreter's, builds for sm_90 (ptxas ships with triton)."""
    from kernels_cuda_compile import compile_in_subprocess

    done = compile_in_subprocess("decoder")
    if done.returncode == 77:
        pytest.skip(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
