"""Triton kernels of the pooling ops (imported only when a kernel runs; see `pooling.py`).

Every kernel reads its input through strides, so views (slices, transposes) need no copy, and
accumulates in float32. A row is padded (`x [B, L, H]` + `mask [B, L]`, nonzero = attended) or
packed (`x [T, H]` + int64 `offsets [B+1]`); the PACKED constexpr picks which. Masked-out
positions are never loaded, so garbage in the padding cannot leak into the result.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_L = 16  # positions per tile of masked_mean / last_token
MAX_BLOCK_H = 256  # hidden columns per program of masked_mean / last_token


@triton.jit
def _row_range(offsets_ptr, row, length, PACKED: tl.constexpr):
    """[start, stop) of row `row`: its segment when packed, [0, length) when padded."""
    if PACKED:
        start = tl.load(offsets_ptr + row)
        stop = tl.load(offsets_ptr + row + 1)
    else:
        start = row * 0
        stop = start + length
    return start, stop


@triton.jit
def _attended(mask_ptr, row, t, stop, stride_mb, stride_mt, PACKED: tl.constexpr):
    """Boolean [BLOCK] of the positions `t` that lie in the row and are attended."""
    keep = t < stop
    if not PACKED:
        m = tl.load(mask_ptr + row * stride_mb + t * stride_mt, mask=keep, other=0)
        keep = keep & (m != 0)
    return keep


@triton.jit
def _masked_mean_kernel(
    x_ptr, mask_ptr, offsets_ptr, out_ptr, length, width,
    stride_xb, stride_xt, stride_xh, stride_mb, stride_mt, stride_ob,
    PACKED: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (B, cdiv(H, BLOCK_H)): out[b, cols] = mean of x[b, t, cols] over attended t."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    col_ok = cols < width
    start, stop = _row_range(offsets_ptr, row, length, PACKED)
    x_row = x_ptr + row * stride_xb + cols[None, :] * stride_xh
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    count = tl.zeros([BLOCK_L], dtype=tl.float32)
    for t0 in range(start, stop, BLOCK_L):
        t = (t0 + tl.arange(0, BLOCK_L)).to(tl.int64)
        keep = _attended(mask_ptr, row, t, stop, stride_mb, stride_mt, PACKED)
        x = tl.load(x_row + t[:, None] * stride_xt, mask=keep[:, None] & col_ok[None, :], other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=0)
        count += keep.to(tl.float32)
    mean = acc / tl.maximum(tl.sum(count, axis=0), 1.0)
    tl.store(out_ptr + row * stride_ob + cols, mean.to(out_ptr.dtype.element_ty), mask=col_ok)


@triton.jit
def _last_token_kernel(
    x_ptr, mask_ptr, offsets_ptr, out_ptr, length, width,
    stride_xb, stride_xt, stride_xh, stride_mb, stride_mt, stride_ob,
    PACKED: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (B, cdiv(H, BLOCK_H)): out[b, cols] = x[b, last attended t, cols], zeros if none."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    col_ok = cols < width
    start, stop = _row_range(offsets_ptr, row, length, PACKED)
    if PACKED:
        last = stop - 1
    else:
        best = tl.full([BLOCK_L], -1, dtype=tl.int64)
        for t0 in range(0, length, BLOCK_L):
            t = (t0 + tl.arange(0, BLOCK_L)).to(tl.int64)
            keep = _attended(mask_ptr, row, t, stop, stride_mb, stride_mt, PACKED)
            best = tl.maximum(best, tl.where(keep, t, -1))
        last = tl.max(best, axis=0)
    found_width = tl.where(last >= start, width, 0)  # no attended position: load nothing
    x = tl.load(x_ptr + row * stride_xb + last * stride_xt + cols * stride_xh, mask=cols < found_width, other=0.0)
    tl.store(out_ptr + row * stride_ob + cols, x.to(out_ptr.dtype.element_ty), mask=col_ok)


@triton.jit
def _attention_pool_kernel(
    x_ptr, mask_ptr, offsets_ptr, w_ptr, bias, part_ptr, stat_ptr, length, width, splits,
    stride_xb, stride_xt, stride_xh, stride_mb, stride_mt, stride_w,
    PACKED: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (B, splits): online softmax over one slice of a row's positions (flash-decoding style).

    Writes the slice's unnormalised weighted sum part[b, split, :H] (float32) and its running
    max and normaliser stat[b, split] = (m, l); `_softmax_combine_kernel` merges the slices.
    """
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    cols = tl.arange(0, BLOCK_H)
    col_ok = cols < width
    start, stop = _row_range(offsets_ptr, row, length, PACKED)
    per_split = tl.cdiv(tl.cdiv(stop - start, splits), BLOCK_L) * BLOCK_L
    lo = start + split * per_split
    hi = tl.minimum(stop, lo + per_split)
    w = tl.load(w_ptr + cols * stride_w, mask=col_ok, other=0.0).to(tl.float32)
    x_row = x_ptr + row * stride_xb + cols[None, :] * stride_xh
    acc = tl.zeros([BLOCK_H], dtype=tl.float32)
    m_run = tl.max(tl.full([BLOCK_L], float("-inf"), dtype=tl.float32), axis=0)
    l_run = tl.sum(tl.zeros([BLOCK_L], dtype=tl.float32), axis=0)
    for t0 in range(lo, hi, BLOCK_L):
        t = (t0 + tl.arange(0, BLOCK_L)).to(tl.int64)
        keep = _attended(mask_ptr, row, t, hi, stride_mb, stride_mt, PACKED)
        x = tl.load(x_row + t[:, None] * stride_xt, mask=keep[:, None] & col_ok[None, :], other=0.0)
        x = x.to(tl.float32)
        scores = tl.where(keep, tl.sum(x * w[None, :], axis=1) + bias, float("-inf"))
        m_new = tl.maximum(m_run, tl.max(scores, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: keep zeros
        p = tl.exp(scores - shift)
        alpha = tl.exp(m_run - shift)
        l_run = l_run * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * x, axis=0)
        m_run = m_new
    slot = row * splits + split
    tl.store(part_ptr + slot * width + cols, acc, mask=col_ok)
    tl.store(stat_ptr + slot * 2, m_run)
    tl.store(stat_ptr + slot * 2 + 1, l_run)


@triton.jit
def _softmax_combine_kernel(
    part_ptr, stat_ptr, out_ptr, width, splits, stride_ob,
    BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr,
):
    """Grid (B, cdiv(H, BLOCK_H)): out[b] = sum_s e^(m_s - M) part[b, s] / sum_s e^(m_s - M) l_s."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    col_ok = cols < width
    s = tl.arange(0, BLOCK_S)
    s_ok = s < splits
    slot = row * splits + s
    m = tl.load(stat_ptr + slot * 2, mask=s_ok, other=float("-inf"))
    l = tl.load(stat_ptr + slot * 2 + 1, mask=s_ok, other=0.0)
    top = tl.max(m, axis=0)
    scale = tl.exp(m - tl.where(top == float("-inf"), 0.0, top))
    part = tl.load(part_ptr + slot[:, None] * width + cols[None, :], mask=s_ok[:, None] & col_ok[None, :], other=0.0)
    # the slice holding the top score has l >= 1, so a non-empty row has den >= 1, an empty one 0
    den = tl.maximum(tl.sum(scale * l, axis=0), 1.0)
    out = tl.sum(scale[:, None] * part, axis=0) / den
    tl.store(out_ptr + row * stride_ob + cols, out.to(out_ptr.dtype.element_ty), mask=col_ok)


def _layout(x: torch.Tensor, mask: torch.Tensor | None, offsets: torch.Tensor | None):
    """Kernel arguments common to all ops: (B, L, H, x strides, mask, mask strides, offsets, PACKED)."""
    if offsets is None:
        batch, length, width = x.shape
        if mask.dtype == torch.bool:
            mask = mask.view(torch.uint8)
        return batch, length, width, x.stride(), mask, mask.stride(), x, False
    width = x.shape[1]
    return offsets.numel() - 1, 0, width, (0, *x.stride()), x, (0, 0), offsets, True


def _pool_rows(kernel, x: torch.Tensor, mask: torch.Tensor | None, offsets: torch.Tensor | None) -> torch.Tensor:
    batch, length, width, xs, mask, ms, offsets, packed = _layout(x, mask, offsets)
    out = torch.empty(batch, width, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    block_h = min(MAX_BLOCK_H, triton.next_power_of_2(width))
    grid = (batch, triton.cdiv(width, block_h))
    kernel[grid](
        x, mask, offsets, out, length, width, *xs, *ms, out.stride(0),
        PACKED=packed, BLOCK_L=BLOCK_L, BLOCK_H=block_h,
    )
    return out


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None, offsets: torch.Tensor | None) -> torch.Tensor:
    """Mean over attended positions: x [B, L, H] + mask [B, L], or x [T, H] + offsets [B+1] -> [B, H]."""
    return _pool_rows(_masked_mean_kernel, x, mask, offsets)


def last_token(x: torch.Tensor, mask: torch.Tensor | None, offsets: torch.Tensor | None) -> torch.Tensor:
    """Row at the last attended position, same layouts as `masked_mean` -> [B, H]."""
    return _pool_rows(_last_token_kernel, x, mask, offsets)


def attention_blocks(width: int) -> tuple[int, int]:
    """(BLOCK_L, BLOCK_H) of attention_pool for hidden size `width` (BLOCK_H covers the row)."""
    block_h = triton.next_power_of_2(width)
    return max(1, min(16, 4096 // block_h)), block_h


def _num_warps(block_l: int, block_h: int) -> int:
    """About 8 tile values per thread, so a whole hidden row stays in registers without spilling."""
    return min(32, max(4, block_l * block_h // 256))


def _default_splits(batch: int, positions: int, block_l: int, device: torch.device) -> int:
    """Enough (row, slice) programs to fill the GPU, each slice at least 4 tiles long."""
    if device.type != "cuda":
        return 1
    programs = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(triton.cdiv(programs, batch), triton.cdiv(positions, 4 * block_l), 64))


def attention_pool(
    x: torch.Tensor, mask: torch.Tensor | None, offsets: torch.Tensor | None,
    weight: torch.Tensor, bias: float, splits: int | None = None,
) -> torch.Tensor:
    """Softmax(x·weight + bias)-weighted sum over attended positions -> [B, H].

    Same layouts as `masked_mean`; weight [H]. Each row's positions are cut into `splits` slices
    pooled in parallel, then merged (default: enough slices to fill the GPU, 1 on CPU).
    """
    batch, length, width, xs, mask, ms, offsets, packed = _layout(x, mask, offsets)
    out = torch.empty(batch, width, dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    block_l, block_h = attention_blocks(width)
    if splits is None:
        positions = length if not packed else triton.cdiv(x.shape[0], batch)
        splits = _default_splits(batch, positions, block_l, x.device)
    part = torch.empty(batch, splits, width, dtype=torch.float32, device=x.device)
    stat = torch.empty(batch, splits, 2, dtype=torch.float32, device=x.device)
    _attention_pool_kernel[(batch, splits)](
        x, mask, offsets, weight, float(bias), part, stat, length, width, splits,
        *xs, *ms, weight.stride(0),
        PACKED=packed, BLOCK_L=block_l, BLOCK_H=block_h, num_warps=_num_warps(block_l, block_h),
    )
    combine_h = min(MAX_BLOCK_H, block_h)
    _softmax_combine_kernel[(batch, triton.cdiv(width, combine_h))](
        part, stat, out, width, splits, out.stride(0),
        BLOCK_S=triton.next_power_of_2(splits), BLOCK_H=combine_h,
    )
    return out
