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

    def packed(self, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """forward() over packed rows: values [T, H] with int64 offsets [B+1] (row b is
        values[offsets[b]:offsets[b+1]]; the padding-free layout of a fused forward) -> [B, H]."""
        kw = {"offsets": offsets, "impl": self.impl}
        if self.kind == "mean":
            return kernels.masked_mean(values, **kw)
        if self.kind == "last":
            return kernels.last_token(values, **kw)
        return kernels.attention_pool(values, None, self.attn.weight[0], 0.0, **kw)

    def pool_prefixed(
        self, prefix: torch.Tensor, prefix_mask: torch.Tensor, cont: torch.Tensor, cont_mask: torch.Tensor,
        group: torch.Tensor,
    ) -> torch.Tensor:
        """float32 [N, H]: the pooling of N sequences, each the shared prefix of its group followed by
        its own continuation, equal to forward() over the concatenated sequences.

        prefix [G, P, H] + prefix_mask [G, P]: the groups' shared prefixes (computed once per group);
        cont [N, C, H] + cont_mask [N, C]: each sequence's continuation; group [N] int64: the group
        of each sequence. Mean: the prefix's sum (mean × count) joins each continuation's; attn: the
        two softmax parts are merged by their log-sum-exp; last: the continuation's last position
        (a continuation must hold at least one position).
        """
        kw = {"impl": self.impl}
        n_cont = cont_mask.sum(1)
        if self.kind == "last":
            if bool((n_cont == 0).any()):
                raise ValueError("last-token pooling over a shared prefix needs a non-empty continuation per sequence")
            return kernels.last_token(cont, cont_mask, **kw).float()
        n_prefix = prefix_mask.sum(1)
        if self.kind == "mean":
            total_p = kernels.masked_mean(prefix, prefix_mask, **kw).float() * n_prefix[:, None]
            total_c = kernels.masked_mean(cont, cont_mask, **kw).float() * n_cont[:, None]
            count = (n_prefix[group] + n_cont).clamp(min=1)
            return (total_p[group] + total_c) / count[:, None]
        weight = self.attn.weight[0]
        mean_p = kernels.attention_pool(prefix, prefix_mask, weight, 0.0, **kw).float()
        mean_c = kernels.attention_pool(cont, cont_mask, weight, 0.0, **kw).float()
        max_p, norm_p = _softmax_parts(prefix, prefix_mask, weight)
        max_c, norm_c = _softmax_parts(cont, cont_mask, weight)
        top = torch.maximum(max_p[group], max_c)
        share_p = norm_p[group] * torch.exp(max_p[group] - top)
        share_c = norm_c * torch.exp(max_c - top)
        total = (share_p + share_c).clamp(min=torch.finfo(torch.float32).tiny)
        return (share_p[:, None] * mean_p[group] + share_c[:, None] * mean_c) / total[:, None]


def _softmax_parts(hidden: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(max, sum of exp(score - max)) of each row's attention scores hidden·weight over its attended
    positions, float32 [B] each; an empty row gives (-inf → 0 share, 0)."""
    scores = hidden.float() @ weight.float()
    keep = mask.bool()
    scores = scores.masked_fill(~keep, float("-inf"))
    top = scores.amax(1)
    safe_top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    norm = torch.exp(scores - safe_top[:, None]).masked_fill(~keep, 0.0).sum(1)
    return torch.where(torch.isfinite(top), top, torch.full_like(top, -1e30)), norm


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
