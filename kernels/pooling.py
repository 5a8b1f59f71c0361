"""Pooling of a reward model's last hidden layer: masked mean, last token, attention pooling.

Each op takes either a padded batch, `hidden [B, L, H]` with `mask [B, L]` (bool or integer,
nonzero = attended; left, right or arbitrary padding, holes allowed), or a packed one,
`values [T, H]` with int64 `offsets [B+1]` (row b is values[offsets[b]:offsets[b+1]]), and returns
`[B, H]` in the input's dtype. Sums run in float32 for float32/float16/bfloat16 input. A row with
no attended position pools to zeros, never NaN; padding is never read, so it may hold anything.
Strided views are read in place. `impl` picks the Triton kernel or the torch reference (see
`sdscore.kernels.dispatch`).
"""

from __future__ import annotations

import numpy as np
import torch

from .checks import check_offsets, check_rows, check_same_device
from .dispatch import use_triton
from .pooling_reference import (
    attention_pool_packed_reference,
    attention_pool_reference,
    last_token_packed_reference,
    last_token_reference,
    masked_mean_packed_reference,
    masked_mean_reference,
)

MAX_ATTENTION_H = 16384  # the attention kernel holds one hidden row per program in registers


def _check_layout(x: torch.Tensor, mask: torch.Tensor | None, offsets: torch.Tensor | None) -> None:
    """Raise ValueError unless (x, mask) is a padded batch or (x, offsets) a packed one."""
    if (mask is None) == (offsets is None):
        raise ValueError("pass either mask (padded hidden [B, L, H]) or offsets= (packed values [T, H]), not both")
    if offsets is None:
        check_rows(x, "hidden", ndim=3)
        if not isinstance(mask, torch.Tensor):
            raise ValueError(f"mask must be a torch.Tensor, got {type(mask).__name__}")
        if mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"mask must be bool or integer, got {mask.dtype}")
        if tuple(mask.shape) != tuple(x.shape[:2]):
            raise ValueError(
                f"mask has shape {tuple(mask.shape)} but hidden [B, L, H] has (B, L) = {tuple(x.shape[:2])}"
            )
        check_same_device(hidden=x, mask=mask)
    else:
        check_rows(x, "values", ndim=2)
        check_same_device(values=x, offsets=offsets)
        check_offsets(offsets, x.shape[0], "values")


def masked_mean(
    hidden: torch.Tensor, mask: torch.Tensor | None = None, *, offsets: torch.Tensor | None = None, impl: str = "auto"
) -> torch.Tensor:
    """Mean over attended positions: sum(h * mask) / max(sum(mask), 1) -> [B, H].

    hidden [B, L, H] + mask [B, L], or values [T, H] + offsets [B+1]. Empty rows give zeros.
    """
    _check_layout(hidden, mask, offsets)
    if use_triton(impl, hidden):
        from . import pooling_triton

        return pooling_triton.masked_mean(hidden, mask, offsets)
    if offsets is None:
        return masked_mean_reference(hidden, mask)
    return masked_mean_packed_reference(hidden, offsets)


def last_token(
    hidden: torch.Tensor, mask: torch.Tensor | None = None, *, offsets: torch.Tensor | None = None, impl: str = "auto"
) -> torch.Tensor:
    """Hidden state at each row's last attended index (any padding side, holes allowed) -> [B, H].

    hidden [B, L, H] + mask [B, L], or values [T, H] + offsets [B+1]. Empty rows give zeros.
    """
    _check_layout(hidden, mask, offsets)
    if use_triton(impl, hidden):
        from . import pooling_triton

        return pooling_triton.last_token(hidden, mask, offsets)
    if impl == "auto" and hidden.device.type == "cpu" and not (torch.jit.is_tracing() or torch.compiler.is_compiling()):
        return _last_token_indexed(hidden, mask, offsets)
    if offsets is None:
        return last_token_reference(hidden, mask)
    return last_token_packed_reference(hidden, offsets)


def _last_token_indexed(x: torch.Tensor, mask: torch.Tensor | None, offsets: torch.Tensor | None) -> torch.Tensor:
    """last_token on the CPU: each row's last attended index found on the host (numpy, reading the
    mask or offsets in place), then one index_select of those rows and zeros for empty rows. The same
    values as the torch reference (a copy of the same rows), at less than the cost of
    `x[arange(B), idx]`: the reference's where/amax over [B, L] and its masked copy of the result
    cost 3-5x that indexing, and advanced indexing itself ~3x an index_select.
    The reference stays the path of impl="torch", of tracing (ONNX export) and of other devices."""
    if offsets is None:
        batch, length = mask.shape
        if length == 0:
            return x.new_zeros(batch, x.shape[-1])
        keep = mask.numpy()
        if keep.dtype != np.bool_:
            keep = keep != 0
        last = (length - 1) - keep[:, ::-1].argmax(1)  # argmax of a bool row: its first True
        rows = np.arange(batch)
        empty = ~keep[rows, last]
        if batch < 2 or x.stride(0) == length * x.stride(1):  # rows of [B * L, H] are a view: one index_select
            picked = x.flatten(0, 1).index_select(0, torch.from_numpy(rows * length + last))
        else:
            picked = x[torch.from_numpy(rows), torch.from_numpy(last)]
    else:
        bounds = offsets.numpy()
        if x.shape[0] == 0:
            return x.new_zeros(bounds.shape[0] - 1, x.shape[1])
        empty = bounds[1:] == bounds[:-1]
        picked = x.index_select(0, torch.from_numpy(np.maximum(bounds[1:] - 1, 0)))
    if empty.any():
        picked[torch.from_numpy(empty)] = 0
    return picked


def attention_pool(
    hidden: torch.Tensor,
    mask: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
    bias: float = 0.0,
    *,
    offsets: torch.Tensor | None = None,
    impl: str = "auto",
) -> torch.Tensor:
    """Softmax over attended positions of hidden·weight + bias, then the weighted sum -> [B, H].

    hidden [B, L, H] + mask [B, L], or values [T, H] + offsets [B+1] (pass weight by keyword);
    weight [H]. Max-subtracted (online softmax in the kernel), so large scores cannot overflow.
    Empty rows give zeros.
    """
    _check_layout(hidden, mask, offsets)
    if weight is None:
        raise ValueError("attention_pool needs weight [H]")
    check_rows(weight, "weight", ndim=1)
    if weight.shape[0] != hidden.shape[-1]:
        raise ValueError(f"weight has shape {tuple(weight.shape)} but hidden has H = {hidden.shape[-1]}")
    check_same_device(hidden=hidden, weight=weight)
    too_wide = f"H = {hidden.shape[-1]} exceeds {MAX_ATTENTION_H}" if hidden.shape[-1] > MAX_ATTENTION_H else None
    if use_triton(impl, hidden, too_wide):
        from . import pooling_triton

        return pooling_triton.attention_pool(hidden, mask, offsets, weight, bias)
    if offsets is None:
        return attention_pool_reference(hidden, mask, weight, bias)
    return attention_pool_packed_reference(hidden, offsets, weight, bias)
