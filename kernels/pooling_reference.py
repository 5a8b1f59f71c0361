"""Torch references of the pooling ops: the CPU path, the ONNX-export path and the kernels' oracle.

Padded inputs are `hidden [B, L, H]` with `mask [B, L]` (nonzero = attended, any padding side,
holes allowed); packed inputs are `values [T, H]` with int64 `offsets [B+1]`. Positions that are
not attended are never read into the result (NaN padding stays out). Sums run in float32 (float64
for float64 input) and the result has the input's dtype. An empty row pools to zeros.
"""

from __future__ import annotations

import torch


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def segment_ids(offsets: torch.Tensor, n_rows: int) -> torch.Tensor:
    """Segment index [T] of each packed row, for offsets [B+1] ending at T (no host sync)."""
    rows = torch.arange(n_rows, device=offsets.device)
    return torch.searchsorted(offsets, rows, right=True) - 1


def segment_sum(values: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Per-segment sum of weights[t] * values[t]: values [T, H], offsets [B+1], weights [T] -> [B, H].

    One index_add over the rows (exports to ONNX as a ScatterND add); empty segments give zeros.
    """
    if weights is not None:
        values = values * weights[:, None]
    total = values.new_zeros(offsets.numel() - 1, values.shape[1])
    return total.index_add_(0, segment_ids(offsets, values.shape[0]), values)


def _weighted_sum(weights: torch.Tensor, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """sum_t weights[b, t] * x[b, t] over kept positions: weights [B, L], x [B, L, H] -> [B, H].

    One batched matmul; if that read a non-finite value in the padding (0 * NaN), the padding is
    zeroed and the sum redone, so padding never reaches the result. Traced or compiled (ONNX
    export), the padding is always zeroed: no data-dependent branch.
    """
    if torch.jit.is_tracing() or torch.compiler.is_compiling():
        return torch.bmm(weights[:, None], torch.where(keep[..., None], x, 0))[:, 0]
    out = torch.bmm(weights[:, None], x)[:, 0]
    if not bool(torch.isfinite(out).all()):
        out = torch.bmm(weights[:, None], torch.where(keep[..., None], x, 0))[:, 0]
    return out


def masked_mean_reference(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over attended positions: hidden [B, L, H], mask [B, L] -> [B, H]."""
    keep = mask != 0
    weights = keep.to(_accumulation_dtype(hidden.dtype))
    count = weights.sum(1, keepdim=True).clamp_min(1)
    return (_weighted_sum(weights, hidden.to(weights.dtype), keep) / count).to(hidden.dtype)


def masked_mean_packed_reference(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Mean of each segment: values [T, H], offsets [B+1] -> [B, H]."""
    total = segment_sum(values.to(_accumulation_dtype(values.dtype)), offsets)
    count = (offsets[1:] - offsets[:-1]).clamp_min(1)[:, None]
    return (total / count).to(values.dtype)


def last_token_reference(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Hidden state at the last attended index of each row: hidden [B, L, H], mask [B, L] -> [B, H]."""
    batch, length, width = hidden.shape
    if length == 0:
        return hidden.new_zeros(batch, width)
    positions = torch.arange(length, device=hidden.device)
    last = torch.where(mask != 0, positions, -1).amax(1)
    picked = hidden[torch.arange(batch, device=hidden.device), last.clamp_min(0)]
    return torch.where((last >= 0)[:, None], picked, 0)


def last_token_packed_reference(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Last row of each segment: values [T, H], offsets [B+1] -> [B, H]."""
    batch = offsets.numel() - 1
    if values.shape[0] == 0:
        return values.new_zeros(batch, values.shape[1])
    nonempty = offsets[1:] > offsets[:-1]
    picked = values[(offsets[1:] - 1).clamp_min(0)]
    return torch.where(nonempty[:, None], picked, 0)


def attention_pool_reference(
    hidden: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor, bias: float = 0.0
) -> torch.Tensor:
    """Softmax(hidden·weight + bias) over attended positions, then the weighted sum.

    hidden [B, L, H], mask [B, L], weight [H] -> [B, H]. Max-subtracted, so large scores are safe.
    """
    batch, length, width = hidden.shape
    if length == 0:
        return hidden.new_zeros(batch, width)
    x = hidden.to(_accumulation_dtype(hidden.dtype))
    keep = mask != 0
    scores = (x @ weight.to(x.dtype) + bias).masked_fill(~keep, float("-inf"))
    top = scores.amax(1, keepdim=True)
    p = torch.exp(scores - torch.where(top.isneginf(), 0, top))
    # the top score contributes exp(0) = 1, so a non-empty row has p.sum >= 1 and an empty one 0
    return (_weighted_sum(p, x, keep) / p.sum(1, keepdim=True).clamp_min(1)).to(hidden.dtype)


def attention_pool_packed_reference(
    values: torch.Tensor, offsets: torch.Tensor, weight: torch.Tensor, bias: float = 0.0
) -> torch.Tensor:
    """Attention pooling of each segment: values [T, H], offsets [B+1], weight [H] -> [B, H]."""
    acc_dtype = _accumulation_dtype(values.dtype)
    seg = segment_ids(offsets, values.shape[0])
    x = values.to(acc_dtype)
    scores = x @ weight.to(acc_dtype) + bias
    top = scores.new_zeros(offsets.numel() - 1)
    top.scatter_reduce_(0, seg, scores, reduce="amax", include_self=False)
    p = torch.exp(scores - top[seg])
    den = segment_sum(p[:, None], offsets)
    return (segment_sum(x, offsets, p) / den.clamp_min(1)).to(values.dtype)
