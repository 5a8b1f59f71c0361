"""Triton kernels of the similarity ops (imported only when a kernel runs; see `similarity.py`).

A row of D values is held whole in registers (BLOCK_D = next power of two >= D), so each row is
unit-ised in one load. Cosines use torch's convention ê = e / max(|e|, eps), sums run in float32
and scores are float32. Inputs are read through strides.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _load_rows(ptr, rows, row_ok, cols, col_ok, stride_n, stride_d):
    """Tile rows [BLOCK_N] x cols [BLOCK_D] as float32, zeros outside the masks."""
    ptrs = ptr + rows[:, None] * stride_n + cols[None, :] * stride_d
    return tl.load(ptrs, mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)


@triton.jit
def _unit(e, eps):
    """Each row of the float32 tile divided by max(|row|, eps)."""
    return e / tl.maximum(tl.sqrt(tl.sum(e * e, axis=1)), eps)[:, None]


@triton.jit
def _group_sums(
    emb_ptr, start, stop, cols, col_ok, stride_n, stride_d, eps, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr
):
    """(sum of unit rows, unit-ised mean row), float32 [BLOCK_D] each, over emb rows [start, stop)."""
    unit_sum = tl.zeros([BLOCK_D], dtype=tl.float32)
    total = tl.zeros([BLOCK_D], dtype=tl.float32)
    for r0 in range(start, stop, BLOCK_N):
        rows = (r0 + tl.arange(0, BLOCK_N)).to(tl.int64)
        e = _load_rows(emb_ptr, rows, rows < stop, cols, col_ok, stride_n, stride_d)
        unit_sum += tl.sum(_unit(e, eps), axis=0)
        total += tl.sum(e, axis=0)
    centroid = total / tl.maximum((stop - start).to(tl.float32), 1.0)
    return unit_sum, centroid / tl.maximum(tl.sqrt(tl.sum(centroid * centroid, axis=0)), eps)


@triton.jit
def _group_cosine_kernel(
    emb_ptr, offsets_ptr, ref_ptr, pair_ptr, cent_ptr, refout_ptr, dim, eps,
    stride_n, stride_d, stride_rg, stride_rd,
    HAS_REF: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid (G,): accumulate the group's sums, then score its rows (the second read hits cache)."""
    g = tl.program_id(0).to(tl.int64)
    start = tl.load(offsets_ptr + g)
    stop = tl.load(offsets_ptr + g + 1)
    n = (stop - start).to(tl.float32)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    unit_sum, centroid = _group_sums(emb_ptr, start, stop, cols, col_ok, stride_n, stride_d, eps, BLOCK_N, BLOCK_D)
    if HAS_REF:
        ref = tl.load(ref_ptr + g * stride_rg + cols * stride_rd, mask=col_ok, other=0.0).to(tl.float32)
        ref = ref / tl.maximum(tl.sqrt(tl.sum(ref * ref, axis=0)), eps)
    for r0 in range(start, stop, BLOCK_N):
        rows = (r0 + tl.arange(0, BLOCK_N)).to(tl.int64)
        row_ok = rows < stop
        unit = _unit(_load_rows(emb_ptr, rows, row_ok, cols, col_ok, stride_n, stride_d), eps)
        # mean over j != i of ê_i·ê_j = (ê_i·Σê - ê_i·ê_i) / (n - 1); ê_i·ê_i < 1 for tiny rows
        others = tl.sum(unit * unit_sum[None, :], axis=1) - tl.sum(unit * unit, axis=1)
        pairwise = tl.where(n > 1.0, others / tl.maximum(n - 1.0, 1.0), 1.0)
        tl.store(pair_ptr + rows, pairwise, mask=row_ok)
        tl.store(cent_ptr + rows, 1.0 - tl.sum(unit * centroid[None, :], axis=1), mask=row_ok)
        if HAS_REF:
            tl.store(refout_ptr + rows, tl.sum(unit * ref[None, :], axis=1), mask=row_ok)


@triton.jit
def _group_stats_kernel(
    emb_ptr, offsets_ptr, unit_sum_ptr, centroid_ptr, dim, eps, stride_n, stride_d,
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid (G,): unit_sum[g] = sum of unit rows, centroid[g] = unit-ised mean row (float32 [G, D])."""
    g = tl.program_id(0).to(tl.int64)
    start = tl.load(offsets_ptr + g)
    stop = tl.load(offsets_ptr + g + 1)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    unit_sum, centroid = _group_sums(emb_ptr, start, stop, cols, col_ok, stride_n, stride_d, eps, BLOCK_N, BLOCK_D)
    tl.store(unit_sum_ptr + g * dim + cols, unit_sum, mask=col_ok)
    tl.store(centroid_ptr + g * dim + cols, centroid, mask=col_ok)


@triton.jit
def _candidate_kernel(
    cand_ptr, group_ptr, offsets_ptr, unit_sum_ptr, centroid_ptr, ref_ptr, pair_ptr, cent_ptr, refout_ptr,
    count, dim, eps, stride_n, stride_d, stride_group, stride_rg, stride_rd,
    HAS_REF: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Grid (cdiv(M, BLOCK_N),): score candidates against their group's sums from `_group_stats_kernel`."""
    rows = (tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    row_ok = rows < count
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    tile_ok = row_ok[:, None] & col_ok[None, :]
    g = tl.load(group_ptr + rows * stride_group, mask=row_ok, other=0)
    stop = tl.load(offsets_ptr + g + 1, mask=row_ok, other=0)
    n = (stop - tl.load(offsets_ptr + g, mask=row_ok, other=0)).to(tl.float32)
    unit = _unit(_load_rows(cand_ptr, rows, row_ok, cols, col_ok, stride_n, stride_d), eps)
    unit_sum = tl.load(unit_sum_ptr + g[:, None] * dim + cols[None, :], mask=tile_ok, other=0.0)
    centroid = tl.load(centroid_ptr + g[:, None] * dim + cols[None, :], mask=tile_ok, other=0.0)
    tl.store(pair_ptr + rows, tl.sum(unit * unit_sum, axis=1) / tl.maximum(n, 1.0), mask=row_ok)
    tl.store(cent_ptr + rows, 1.0 - tl.sum(unit * centroid, axis=1), mask=row_ok)
    if HAS_REF:
        ref = _unit(_load_rows(ref_ptr, g, row_ok, cols, col_ok, stride_rg, stride_rd), eps)
        tl.store(refout_ptr + rows, tl.sum(unit * ref, axis=1), mask=row_ok)


def similarity_blocks(dim: int) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_D) for embeddings of size `dim`: whole rows, about 4096 values per tile."""
    block_d = triton.next_power_of_2(dim)
    return max(1, min(16, 4096 // block_d)), block_d


def _num_warps(block_n: int, block_d: int) -> int:
    """About 8 tile values per thread, so whole embeddings stay in registers without spilling."""
    return min(32, max(4, block_n * block_d // 256))


def _outputs(rows: int, has_ref: bool, device: torch.device) -> tuple[torch.Tensor, ...]:
    """float32 [rows] outputs (pairwise, centroid, reference); without a reference the last is a stand-in."""
    pair, cent = (torch.empty(rows, dtype=torch.float32, device=device) for _ in range(2))
    return pair, cent, torch.empty(rows, dtype=torch.float32, device=device) if has_ref else pair


def group_cosine(
    emb: torch.Tensor, offsets: torch.Tensor, reference: torch.Tensor | None, eps: float
) -> dict[str, torch.Tensor | None]:
    """emb [N, D], offsets [G+1], reference [G, D] | None -> float32 "pairwise", "centroid", "reference" [N]."""
    pair, cent, ref_out = _outputs(emb.shape[0], reference is not None, emb.device)
    groups, dim = offsets.numel() - 1, emb.shape[1]
    if emb.shape[0] > 0:
        block_n, block_d = similarity_blocks(dim)
        ref = emb if reference is None else reference
        _group_cosine_kernel[(groups,)](
            emb, offsets, ref, pair, cent, ref_out, dim, eps, *emb.stride(), *ref.stride(),
            HAS_REF=reference is not None, BLOCK_N=block_n, BLOCK_D=block_d,
            num_warps=_num_warps(block_n, block_d),
        )
    return {"pairwise": pair, "centroid": cent, "reference": None if reference is None else ref_out}


def score_candidates(
    cand: torch.Tensor, cand_group: torch.Tensor, emb: torch.Tensor, offsets: torch.Tensor,
    reference: torch.Tensor | None, eps: float,
) -> dict[str, torch.Tensor | None]:
    """cand [M, D], cand_group [M] in [0, G), emb [N, D], offsets [G+1], reference [G, D] | None -> [M] scores."""
    pair, cent, ref_out = _outputs(cand.shape[0], reference is not None, cand.device)
    groups, dim = offsets.numel() - 1, emb.shape[1]
    if cand.shape[0] > 0:
        block_n, block_d = similarity_blocks(dim)
        warps = _num_warps(block_n, block_d)
        unit_sum = torch.empty(groups, dim, dtype=torch.float32, device=emb.device)
        centroid = torch.empty_like(unit_sum)
        _group_stats_kernel[(groups,)](
            emb, offsets, unit_sum, centroid, dim, eps, *emb.stride(),
            BLOCK_N=block_n, BLOCK_D=block_d, num_warps=warps,
        )
        ref = cand if reference is None else reference
        _candidate_kernel[(triton.cdiv(cand.shape[0], block_n),)](
            cand, cand_group, offsets, unit_sum, centroid, ref, pair, cent, ref_out,
            cand.shape[0], dim, eps, *cand.stride(), cand_group.stride(0), *ref.stride(),
            HAS_REF=reference is not None, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=warps,
        )
    return {"pairwise": pair, "centroid": cent, "reference": None if reference is None else ref_out}
