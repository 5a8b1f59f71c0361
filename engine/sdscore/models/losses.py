"""Pairwise reward losses: Bradley–Terry with an optional margin and TRL's reward-centering term.

Matches TRL RewardTrainer.compute_loss (SDiaReward trains with it):
    -logsigmoid(r_chosen - r_rejected - margin).mean() + λ · mean((r_chosen + r_rejected)²)
where λ is RewardConfig.center_rewards_coefficient (SDiaReward: 0.01). The centering term pulls
the rewards of every pair towards a zero mean without changing which of the two wins.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def bradley_terry_loss(
    r_chosen: torch.Tensor,
    r_rejected: torch.Tensor,
    margin: torch.Tensor | None = None,
    center_lambda: float | None = 0.01,
) -> torch.Tensor:
    """Scalar loss from rewards [N] of the chosen and rejected episodes of N pairs.

    margin [N] (optional): the chosen reward must beat the rejected by this much; NaN (a pair
    without a margin) counts as 0. center_lambda None or 0 drops the centering term.
    """
    if r_chosen.shape != r_rejected.shape or r_chosen.ndim != 1:
        raise ValueError(
            f"r_chosen and r_rejected must both be [N], got {tuple(r_chosen.shape)} and {tuple(r_rejected.shape)}"
        )
    diff = r_chosen - r_rejected
    if margin is not None:
        margin = torch.as_tensor(margin, dtype=diff.dtype, device=diff.device)
        if margin.shape != diff.shape:
            raise ValueError(f"margin must be [N] = {tuple(diff.shape)}, got {tuple(margin.shape)}")
        diff = diff - torch.where(torch.isnan(margin), torch.zeros_like(margin), margin)
    loss = -F.logsigmoid(diff).mean()
    if center_lambda:
        loss = loss + center_lambda * torch.mean((r_chosen + r_rejected) ** 2)
    return loss


def pairwise_correct(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    """bool [N]: the chosen reward is strictly higher (ties count as wrong, as in SDiaReward)."""
    return r_chosen > r_rejected
