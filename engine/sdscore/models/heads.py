"""Pooling over a backbone's last hidden layer and the scalar reward head.

Module and parameter names follow SDiaReward's released model (`pooler.attn` = Linear(H, 1) for
attention pooling, `score_head` = Linear(H, 1, bias=False)), so their state dicts load unchanged.
The pooling itself runs in sdscore.kernels: Triton on CUDA, the torch reference elsewhere.
"""

from __future__ import annotations

import torch
from torch import nn

from sdscore import kernels

POOLINGS = ("mean", "attn", "last")
_ALIASES = {"avg": "mean", "attention": "attn", "last_token": "last", "eos": "last"}


def pooling_name(name: str) -> str:
    """Canonical pooling name (SDiaReward's aliases accepted); ValueError for an unknown one."""
    canonical = _ALIASES.get(str(name).lower(), str(name).lower())
    if canonical not in POOLINGS:
        raise ValueError(f"unknown pooling {name!r}; expected one of {POOLINGS} (or {sorted(_ALIASES)})")
    return canonical


def score_pooled(pooled: torch.Tensor, score_head: nn.Linear) -> torch.Tensor:
    """float32 [B] rewards: score_head applied to pooled states [B, H] in float32."""
    w = score_head.weight.float()
    b = None if score_head.bias is None else score_head.bias.float()
    return nn.functional.linear(pooled.float(), w, b)[:, 0]


class Pooler(nn.Module):
    """hidden [B, L, H] + mask [B, L] (1 = attended, any padding side) → float32 [B, H]."""

    def __init__(self, kind: str, hidden_size: int, impl: str = "auto"):
        super().__init__()
        self.kind = pooling_name(kind)
        self.impl = impl
        if self.kind == "attn":
            self.attn = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # The Triton kernels have no backward: while training, the torch reference runs.
        grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in self.parameters()))
        impl = "torch" if grad else self.impl
        if self.kind == "mean":
            return kernels.masked_mean(hidden, mask, impl=impl)
        if self.kind == "last":
            return kernels.last_token(hidden, mask, impl=impl)
        # softmax is shift-invariant: attn.bias (kept for SDiaReward's state dict) changes nothing
        return kernels.attention_pool(hidden, mask, self.attn.weight[0], 0.0, impl=impl)


class PoolingHead(nn.Module):
    """Pooler + score_head: what sits on top of any backbone, and what `--head-only` trains."""

    def __init__(self, hidden_size: int, pooling: str = "mean", bias: bool = False, impl: str = "auto"):
        super().__init__()
        self.pooler = Pooler(pooling, hidden_size, impl)
        self.score_head = nn.Linear(hidden_size, 1, bias=bias)

    def pool(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """float32 [B, H]."""
        return self.pooler(hidden, mask)

    def score(self, pooled: torch.Tensor) -> torch.Tensor:
        """float32 [B] rewards from pooled states."""
        return score_pooled(pooled, self.score_head)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.score(self.pool(hidden, mask))
