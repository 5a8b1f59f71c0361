"""Speaker consistency (SpeakerSleuth): cosine scores of speaker embeddings within groups of turns.

Turns are packed: `emb [N, D]` with int64 `offsets [G+1]`, group g = emb[offsets[g]:offsets[g+1]]
(a speaker's turns in one dialogue). Cosine matches torch.nn.functional.cosine_similarity:
cos(a, b) = a·b / (max(|a|, eps) · max(|b|, eps)), so a zero embedding scores 0 against anything.
Sums run in float32; scores are float32 (float64 for float64 input on the torch path). Empty
groups produce no rows. Strided views are read in place. `impl` picks the Triton kernel or the
torch reference (see `sdscore.kernels.dispatch`).
"""

from __future__ import annotations

import torch

from .checks import check_last_dim, check_offsets, check_rows, check_same_device
from .dispatch import use_triton
from .similarity_reference import group_cosine_reference, score_candidates_reference

MAX_DIM = 16384  # the kernels hold whole embeddings in registers


def _check_groups(emb: torch.Tensor, offsets: torch.Tensor, reference: torch.Tensor | None) -> None:
    check_rows(emb, "emb")
    if emb.shape[1] == 0:
        raise ValueError("emb must have at least one column, got shape (N, 0)")
    check_same_device(emb=emb, offsets=offsets, reference=reference)
    check_offsets(offsets, emb.shape[0], "emb")
    if reference is not None:
        check_rows(reference, "reference")
        groups = offsets.numel() - 1
        if tuple(reference.shape) != (groups, emb.shape[1]):
            raise ValueError(
                f"reference has shape {tuple(reference.shape)} "
                f"but offsets and emb give (G, D) = {(groups, emb.shape[1])}"
            )


def _too_wide(dim: int) -> str | None:
    return f"D = {dim} exceeds {MAX_DIM}" if dim > MAX_DIM else None


def group_cosine(
    emb: torch.Tensor,
    offsets: torch.Tensor,
    reference: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
    impl: str = "auto",
) -> dict[str, torch.Tensor | None]:
    """Per-turn consistency of each turn with the rest of its group.

    emb [N, D], offsets [G+1] int64, reference [G, D] | None. Returns a dict of [N] scores:
    "pairwise": mean cos to the OTHER turns of the group; 1.0 for a group of one turn (no other
    turn, so no evidence of inconsistency). "centroid": cosine distance 1 - cos to the group's
    centroid (mean of its raw embeddings). "reference": cos to the group's reference embedding,
    or None without `reference`. One kernel program per group reads its turns, sums the unit
    vectors S, then scores each turn as (ê_i·S - ê_i·ê_i) / (n - 1).
    """
    _check_groups(emb, offsets, reference)
    if use_triton(impl, emb, _too_wide(emb.shape[1])):
        from . import similarity_triton

        return similarity_triton.group_cosine(emb, offsets, reference, eps)
    return group_cosine_reference(emb, offsets, reference, eps=eps)


def score_candidates(
    cand: torch.Tensor,
    cand_group: torch.Tensor,
    emb: torch.Tensor,
    offsets: torch.Tensor,
    reference: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
    impl: str = "auto",
) -> dict[str, torch.Tensor | None]:
    """How well each candidate turn fits a group (discrimination: which candidate fits a masked turn).

    cand [M, D], cand_group [M] int64 in [0, G), emb [N, D], offsets [G+1], reference [G, D] | None.
    Returns a dict of [M] scores: "pairwise" (mean cos to the group's turns; 0 for an empty
    group), "centroid" (1 - cos to the group's centroid; 1 for an empty group, whose centroid is
    the zero vector) and "reference" (cos to the group's reference) or None.
    """
    _check_groups(emb, offsets, reference)
    check_rows(cand, "cand")
    check_last_dim(cand, "cand", emb.shape[1], "emb")
    check_same_device(cand=cand, cand_group=cand_group, emb=emb)
    if cand_group.ndim != 1 or cand_group.dtype != torch.int64:
        raise ValueError(f"cand_group must be 1-D int64, got shape {tuple(cand_group.shape)} and {cand_group.dtype}")
    if cand_group.shape[0] != cand.shape[0]:
        raise ValueError(f"cand_group has {cand_group.shape[0]} entries but cand has {cand.shape[0]} rows")
    groups = offsets.numel() - 1
    if cand_group.numel() and bool((cand_group < 0).any() | (cand_group >= groups).any()):
        bad = cand_group[(cand_group < 0) | (cand_group >= groups)][0]
        raise ValueError(f"cand_group holds {int(bad)} but offsets give G = {groups} groups")
    if use_triton(impl, emb, _too_wide(emb.shape[1])):
        from . import similarity_triton

        return similarity_triton.score_candidates(cand, cand_group, emb, offsets, reference, eps)
    return score_candidates_reference(cand, cand_group, emb, offsets, reference, eps=eps)
