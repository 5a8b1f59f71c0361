"""Torch references of the decoder-layer ops: the CPU path, the ONNX-export path and the kernels' oracle.

Each reference is, op for op, what Hugging Face's Qwen2 / Qwen2.5-Omni decoder layer computes, so
a model whose layers call these gives the unfused layer's results bit for bit (the tests check it):

- `rms_norm_reference(x, weight, eps)`: Qwen2RMSNorm — float32 mean of squares, x·rsqrt(var+eps)
  in float32, rounded to x's dtype, then times weight (in the promoted dtype);
- `silu_mul_reference(gate_up)`: Qwen2MLP's act_fn(gate_proj(x)) * up_proj(x) on the output of
  one fused gate/up projection, gate in the first half of the last dimension, up in the second;
- `rotary_reference(x, cos, sin)`: apply_rotary_pos_emb for one of q or k laid out [B, T, heads, d]
  (the projection's output viewed, before the transpose), cos/sin [B, T, d] as the rotary
  embedding returns them (Qwen2.5-Omni's MRoPE sections already recomposed): x·cos + rotate_half(x)·sin.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x / sqrt(mean(x², -1) + eps)) with the statistics in float32 -> x's shape."""
    normed = x.to(torch.float32)
    normed = normed * torch.rsqrt(normed.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def silu_mul_reference(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of gate_up [..., 2I] (gate = [..., :I], up = [..., I:]) -> [..., I]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[-x2, x1] of x = [x1, x2] split in halves of the last dimension."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin for x [B, T, heads, d] and cos/sin [B, T, d] -> a new [B, T, heads, d]."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return (x * cos) + (rotate_half(x) * sin)
