"""Torch references of the similarity ops: the CPU path, the ONNX-export path and the kernels' oracle.

Cosine follows torch.nn.functional.cosine_similarity exactly: cos(a, b) = a·b / (max(|a|, eps) ·
max(|b|, eps)), so with unit-ised rows ê = e / max(|e|, eps) every cosine is a plain dot product
and a zero vector has cosine 0 with everything (itself included). Sums run in float32 (float64 for
float64 input); scores come back in that dtype.
"""

from __future__ import annotations

import torch

from .pooling_reference import segment_ids, segment_sum


def unit_rows(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x [N, D] / max(|x|, eps) row by row, in the accumulation dtype."""
    x = x.to(torch.promote_types(x.dtype, torch.float32))
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(eps)


def group_sums(unit: torch.Tensor, emb: torch.Tensor, offsets: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    """Per group: (sum of unit rows [G, D], unit-ised centroid [G, D], size [G]); empty -> zeros.

    unit [N, D] are the unit-ised rows of emb [N, D]; the centroid is the mean of the raw rows.
    """
    size = (offsets[1:] - offsets[:-1]).to(unit.dtype)
    centroid = segment_sum(emb.to(unit.dtype), offsets) / size.clamp_min(1)[:, None]
    return segment_sum(unit, offsets), unit_rows(centroid, eps), size


def _dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise dot product of [N, D] and [N, D] -> [N]."""
    return (a * b).sum(-1)


def group_cosine_reference(
    emb: torch.Tensor, offsets: torch.Tensor, reference: torch.Tensor | None = None, *, eps: float = 1e-8
) -> dict[str, torch.Tensor | None]:
    """Per-turn consistency within groups: emb [N, D], offsets [G+1], reference [G, D] | None.

    Returns "pairwise" [N] (mean cos to the other turns of the group, 1.0 for a group of one),
    "centroid" [N] (1 - cos to the group's mean embedding) and "reference" [N] (cos to the
    group's reference embedding) or None.
    """
    unit = unit_rows(emb, eps)
    seg = segment_ids(offsets, emb.shape[0])
    unit_sum, centroid, size = group_sums(unit, emb, offsets, eps)
    n = size[seg]
    others = _dot(unit, unit_sum[seg]) - _dot(unit, unit)
    return {
        "pairwise": torch.where(n > 1, others / (n - 1).clamp_min(1), 1.0),
        "centroid": 1 - _dot(unit, centroid[seg]),
        "reference": None if reference is None else _dot(unit, unit_rows(reference, eps)[seg]),
    }


def score_candidates_reference(
    cand: torch.Tensor,
    cand_group: torch.Tensor,
    emb: torch.Tensor,
    offsets: torch.Tensor,
    reference: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
) -> dict[str, torch.Tensor | None]:
    """Fit of each candidate cand [M, D] to its group cand_group [M] of emb [N, D] / offsets [G+1].

    Returns "pairwise" [M] (mean cos to the group's turns; 0 for an empty group), "centroid" [M]
    (1 - cos to the group's mean; 1 for an empty group) and "reference" [M] or None.
    """
    unit = unit_rows(cand, eps)
    unit_sum, centroid, size = group_sums(unit_rows(emb, eps), emb, offsets, eps)
    return {
        "pairwise": _dot(unit, unit_sum[cand_group]) / size[cand_group].clamp_min(1),
        "centroid": 1 - _dot(unit, centroid[cand_group]),
        "reference": None if reference is None else _dot(unit, unit_rows(reference, eps)[cand_group]),
    }
