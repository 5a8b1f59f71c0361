"""Exact (erf) GELU in place, for inference on the CPU.

`gelu_(x, bias=None)` overwrites x with GELU(x + bias), GELU(v) = 0.5 v (1 + erf(v / sqrt(2))) —
`torch.nn.functional.gelu(x + bias)` with approximate="none" — and returns it; the bias (over x's
last dimension) is what a Linear computed without its bias leaves to add. A contiguous CPU float32 tensor outside autograd runs in the
compiled core (`sdscore._core.gelu_`: a vectorised rational erf, AVX2+FMA, within ~1e-7 of the
exact erf; portable loops with std::erf otherwise; threads as torch's), about twice torch's CPU
kernel on the bench machine and without a second buffer. Other devices, dtypes and layouts get
the torch op, written back into x. It is an inference op: a tensor that requires grad (with grad
mode on) is refused — use F.gelu there.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def core_supports(x: torch.Tensor) -> bool:
    """True when gelu_ runs the compiled kernel on this tensor."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and x.is_contiguous()


def gelu_(x: torch.Tensor, bias: torch.Tensor | None = None, num_threads: int | None = None) -> torch.Tensor:
    """x ← GELU(x + bias) (exact, erf form), in place; returns x. bias: None or [x.shape[-1]].
    num_threads defaults to torch.get_num_threads()."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"gelu_ needs a floating tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if bias is not None and (bias.ndim != 1 or x.ndim == 0 or bias.shape[0] != x.shape[-1]):
        raise ValueError(f"gelu_: bias must be a vector over x's last dimension ({x.shape[-1] if x.ndim else 1}), "
                         f"got shape {tuple(bias.shape)}")
    if torch.is_grad_enabled() and (x.requires_grad or (bias is not None and bias.requires_grad)):
        raise ValueError("gelu_ is an in-place inference op; this tensor requires grad (use F.gelu)")
    if not core_supports(x) or (bias is not None and not core_supports(bias)):
        return x.copy_(F.gelu(x if bias is None else x + bias))
    from sdscore._native import core  # the compiled core; imported here so the Triton ops need no build

    if x.numel():
        core.gelu_(x.detach().numpy(), None if bias is None else bias.detach().numpy(),
                   num_threads or torch.get_num_threads())
    return x
