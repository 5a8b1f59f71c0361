"""Triton kernels of the decoder-layer ops (imported only when a kernel runs; see `decoder.py`).

Each kernel reads its input through strides (the last dimension contiguous), computes in float32
and rounds where Hugging Face's unfused layer rounds (each bf16/fp16 op of the reference rounds
its result: `decoder_reference.py`), so a kernel differs from the reference only by float32
summation order — one memory pass where the reference makes three to six.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_BLOCK = 256  # columns per program of silu_mul


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, width, eps, stride_xr, stride_or, BLOCK_H: tl.constexpr):
    """Grid (rows,): out[r] = w * round(x[r] * rsqrt(mean(x[r]²) + eps)), statistics in float32."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < width
    x = tl.load(x_ptr + row * stride_xr + cols, mask=ok, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / width
    normed = (x * (1.0 / tl.sqrt(var + eps))).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_or + cols, (w * normed).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, inter, stride_gr, stride_or, BLOCK: tl.constexpr):
    """Grid (rows, cdiv(I, BLOCK)): out[r, c] = round(silu(gate[r, c])) * up[r, c]."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < inter
    gate = tl.load(gu_ptr + row * stride_gr + cols, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(gu_ptr + row * stride_gr + inter + cols, mask=ok, other=0.0).to(tl.float32)
    act = (gate / (1.0 + tl.exp(-gate))).to(gu_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_or + cols, (act * up).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _rotary_kernel(
    x_ptr, cos_ptr, sin_ptr, tokens, half,
    stride_xb, stride_xt, stride_xh, stride_cb, stride_ct, stride_sb, stride_st,
    BLOCK: tl.constexpr,
):
    """Grid (B * T, heads), in place: x = round(round(x·cos) + round(rotate_half(x)·sin)) over one
    head of one token (each product and the sum rounded to x's dtype, as the reference's ops are)."""
    bt = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    b, t = bt // tokens, bt % tokens
    i = tl.arange(0, BLOCK)
    ok = i < half
    base = x_ptr + b * stride_xb + t * stride_xt + head * stride_xh
    x1 = tl.load(base + i, mask=ok, other=0.0).to(tl.float32)
    x2 = tl.load(base + half + i, mask=ok, other=0.0).to(tl.float32)
    c = cos_ptr + b * stride_cb + t * stride_ct
    s = sin_ptr + b * stride_sb + t * stride_st
    c1 = tl.load(c + i, mask=ok, other=0.0).to(tl.float32)
    c2 = tl.load(c + half + i, mask=ok, other=0.0).to(tl.float32)
    s1 = tl.load(s + i, mask=ok, other=0.0).to(tl.float32)
    s2 = tl.load(s + half + i, mask=ok, other=0.0).to(tl.float32)
    dt = x_ptr.dtype.element_ty
    o1 = ((x1 * c1).to(dt).to(tl.float32) + (-x2 * s1).to(dt).to(tl.float32)).to(dt)
    o2 = ((x2 * c2).to(dt).to(tl.float32) + (x1 * s2).to(dt).to(tl.float32)).to(dt)
    tl.store(base + i, o1, mask=ok)
    tl.store(base + half + i, o2, mask=ok)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H] (last dimension contiguous), weight [H] -> [..., H] in promote(x, weight)."""
    width = x.shape[-1]
    rows = x.reshape(-1, width)
    out = torch.empty(rows.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    if rows.shape[0] and width:
        block = triton.next_power_of_2(width)
        _rms_norm_kernel[(rows.shape[0],)](rows, weight.contiguous(), out, width, float(eps), rows.stride(0),
                                           out.stride(0), BLOCK_H=block, num_warps=min(16, max(1, block // 256)))
    return out.view(x.shape)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [..., 2I] (last dimension contiguous) -> [..., I]."""
    inter = gate_up.shape[-1] // 2
    rows = gate_up.reshape(-1, 2 * inter)
    out = torch.empty((rows.shape[0], inter), dtype=gate_up.dtype, device=gate_up.device)
    if rows.shape[0] and inter:
        block = min(MAX_BLOCK, triton.next_power_of_2(inter))
        _silu_mul_kernel[(rows.shape[0], triton.cdiv(inter, block))](rows, out, inter, rows.stride(0), out.stride(0),
                                                                    BLOCK=block)
    return out.view(*gate_up.shape[:-1], inter)


def rotary_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, heads, d] rotated in place by cos/sin [B, T, d] (each with a contiguous last dimension)."""
    batch, tokens, heads, dim = x.shape
    cos, sin = cos.expand(batch, tokens, dim), sin.expand(batch, tokens, dim)
    if x.numel():
        half = dim // 2
        _rotary_kernel[(batch * tokens, heads)](
            x, cos, sin, tokens, half, x.stride(0), x.stride(1), x.stride(2), cos.stride(0), cos.stride(1),
            sin.stride(0), sin.stride(1), BLOCK=triton.next_power_of_2(half),
        )
    return x
