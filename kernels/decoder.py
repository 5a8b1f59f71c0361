"""Fused decoder-layer ops: RMSNorm, SiLU·mul of a fused gate/up projection, rotary embedding in place.

Each op validates its arguments, then runs a Triton kernel (`decoder_triton.py`: CUDA tensors, or
CPU ones under TRITON_INTERPRET=1) or its torch reference (`decoder_reference.py`: CPU, autograd,
ONNX export); `impl="auto" | "triton" | "torch"` overrides the choice (`dispatch.use_triton`).
The references are Hugging Face's Qwen2 layer op for op; the kernels compute in float32 and
round where those ops round, so both agree with the unfused layer to float32 summation order.

- `rms_norm(x, weight, eps)`: x [..., H], weight [H] -> [..., H];
- `silu_mul(gate_up)`: gate_up [..., 2I] (gate first) -> silu(gate) * up [..., I];
- `rotary_(x, cos, sin)`: x [B, T, heads, d] (a view of a q/k projection) rotated in place by
  cos/sin [B or 1, T, d]; returns x.
"""

from __future__ import annotations

import torch

from .checks import check_rows, check_same_device
from .decoder_reference import rms_norm_reference, rotary_reference, silu_mul_reference
from .dispatch import use_triton

MAX_RMS_WIDTH = 16384  # the RMSNorm kernel holds one row per program


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _inner_contiguous(x: torch.Tensor, name: str) -> str | None:
    if x.ndim and x.shape[-1] > 1 and x.stride(-1) != 1:
        return f"{name}'s last dimension is strided (stride {x.stride(-1)})"
    return None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, *, impl: str = "auto") -> torch.Tensor:
    """weight * x / sqrt(mean(x², -1) + eps), statistics in float32 -> [..., H] (see the module docstring)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.ndim < 1:
        raise ValueError(f"rms_norm: x must be a floating tensor [..., H], got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    check_rows(weight, "weight", ndim=1)
    if weight.shape[0] != x.shape[-1]:
        raise ValueError(f"rms_norm: weight has {weight.shape[0]} entries but x has H = {x.shape[-1]}")
    if not eps >= 0:
        raise ValueError(f"rms_norm: eps must be >= 0, got {eps}")
    check_same_device(x=x, weight=weight)
    why = _inner_contiguous(x, "x") or ("autograd needs the reference" if _needs_grad(x, weight) else None)
    if why is None and x.shape[-1] > MAX_RMS_WIDTH:
        why = f"H = {x.shape[-1]} exceeds {MAX_RMS_WIDTH}"
    if why is None and weight.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        why = f"weight is {weight.dtype}"
    if use_triton(impl, x, why):
        from . import decoder_triton

        return decoder_triton.rms_norm(x, weight, eps)
    return rms_norm_reference(x, weight, eps)


def silu_mul(gate_up: torch.Tensor, *, impl: str = "auto") -> torch.Tensor:
    """silu(gate_up[..., :I]) * gate_up[..., I:] -> [..., I]."""
    if not isinstance(gate_up, torch.Tensor) or not gate_up.is_floating_point() or gate_up.ndim < 1:
        raise ValueError(f"silu_mul: gate_up must be a floating tensor [..., 2I], got "
                         f"{tuple(gate_up.shape) if isinstance(gate_up, torch.Tensor) else type(gate_up).__name__}")
    if gate_up.shape[-1] % 2:
        raise ValueError(f"silu_mul: the last dimension holds gate and up halves, so it must be even; "
                         f"got {gate_up.shape[-1]}")
    why = _inner_contiguous(gate_up, "gate_up") or ("autograd needs the reference" if _needs_grad(gate_up) else None)
    if use_triton(impl, gate_up, why):
        from . import decoder_triton

        return decoder_triton.silu_mul(gate_up)
    return silu_mul_reference(gate_up)


def rotary_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, impl: str = "auto") -> torch.Tensor:
    """x [B, T, heads, d] ← x·cos + rotate_half(x)·sin, in place, cos/sin [B or 1, T, d]; returns x."""
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or not x.is_floating_point():
        raise ValueError(f"rotary_: x must be a floating tensor [B, T, heads, d], got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    batch, tokens, _, dim = x.shape
    if dim % 2:
        raise ValueError(f"rotary_: the head size must be even (rotate_half splits it), got {dim}")
    for name, t in (("cos", cos), ("sin", sin)):
        check_rows(t, name, ndim=3)
        if t.shape[0] not in (1, batch) or tuple(t.shape[1:]) != (tokens, dim):
            raise ValueError(f"rotary_: {name} has shape {tuple(t.shape)}, expected ({batch} or 1, {tokens}, {dim})")
    check_same_device(x=x, cos=cos, sin=sin)
    if _needs_grad(x, cos, sin):
        raise ValueError("rotary_ is an in-place inference op; these tensors require grad (use the reference)")
    why = _inner_contiguous(x, "x") or _inner_contiguous(cos, "cos") or _inner_contiguous(sin, "sin")
    if why is None and not (cos.dtype == sin.dtype == x.dtype):
        why = f"cos/sin are {cos.dtype}/{sin.dtype}, x is {x.dtype}"
    if use_triton(impl, x, why):
        from . import decoder_triton

        return decoder_triton.rotary_(x, cos, sin)
    return x.copy_(rotary_reference(x, cos, sin))
