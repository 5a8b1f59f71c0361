"""`--head-only`: fit a new score head on stored pooled states, save it beside a base model.

SDiaReward's own training freezes the whole backbone and fits only `score_head` on mean-pooled
last-layer states (RESEARCH.md), so with the pooled states stored once (the reward scorer writes
them), a head is refitted in seconds. Only the score head is fitted: the states were pooled
already, so a pooling with weights (attn) keeps the base model's pooler, and a head for another
pooling than the one the states were stored with cannot be fitted from them (it needs the hidden
states: store the states again with that pooling).

On disk (head_only_files.py): `sdscore_head.json` ({"base_model", "kind", "pooling", "hidden_size",
...}) and `head.safetensors`; `load_reward_model` loads the base, then this head over it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sdscore.atomic_write import atomic_path, write_json
from sdscore.models.head_only_files import HEAD_ONLY_CONFIG, HEAD_ONLY_WEIGHTS
from sdscore.models.heads import pooling_name
from sdscore.models.losses import bradley_terry_loss, pairwise_correct
from sdscore.models.training import cosine_schedule

FORMAT_VERSION = 1


@dataclass(frozen=True)
class HeadTrainConfig:
    """Hyperparameters of a head-only fit (a linear probe on pooled states: a convex problem)."""

    lr: float = 1e-2
    weight_decay: float = 0.05
    warmup_ratio: float = 0.15
    max_grad_norm: float = 1.0
    batch_size: int = 256
    epochs: int = 100
    center_lambda: float = 0.01
    bias: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"head config: {name} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"head config: lr must be > 0, got {self.lr}")


def _states(values: Any, name: str) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(values, dtype=np.float32) if not torch.is_tensor(values) else values).float().cpu()
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be pooled states [N, H] with N >= 1, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} has NaN or Inf values")
    return x


def _margins(values: Any, n: int, name: str) -> torch.Tensor:
    if values is None:
        return torch.zeros(n)
    m = torch.as_tensor(np.asarray(values, dtype=np.float32)).reshape(-1)
    if m.shape[0] != n:
        raise ValueError(f"{name} has {m.shape[0]} values for {n} pairs")
    return m


def train_head(
    pooled_chosen: Any,
    pooled_rejected: Any,
    margins: Any = None,
    eval_chosen: Any = None,
    eval_rejected: Any = None,
    eval_margins: Any = None,
    pooling: str = "mean",
    config: HeadTrainConfig | None = None,
    *,
    states_pooling: str | None = None,
    history: list | None = None,
) -> dict[str, torch.Tensor]:
    """Fit score_head on pooled states [N, H] of chosen/rejected episodes; return its state dict.

    Keys are "score_head.weight" [1, H] (and "score_head.bias" [1] with config.bias). With eval
    states, the head with the lowest eval loss (checked every epoch) is returned, else the last.
    states_pooling: the pooling the states were stored with; a different `pooling` is refused.
    history, if given, receives one row per epoch: {"epoch", "loss", "eval_loss", "eval_accuracy"}.
    """
    config = config or HeadTrainConfig()
    pooling = pooling_name(pooling)
    if states_pooling is not None and pooling_name(states_pooling) != pooling:
        raise ValueError(
            f"cannot fit a {pooling!r}-pooled head from {pooling_name(states_pooling)!r}-pooled states: "
            f"a different pooling needs the hidden states; store the states again with pooling {pooling!r}"
        )
    xc, xr = _states(pooled_chosen, "pooled_chosen"), _states(pooled_rejected, "pooled_rejected")
    if xc.shape != xr.shape:
        raise ValueError(f"pooled_chosen {tuple(xc.shape)} and pooled_rejected {tuple(xr.shape)} differ in shape")
    m = _margins(margins, xc.shape[0], "margins")
    held = None
    if eval_chosen is not None or eval_rejected is not None:
        if eval_chosen is None or eval_rejected is None:
            raise ValueError("pass both eval_chosen and eval_rejected (or neither)")
        ec, er = _states(eval_chosen, "eval_chosen"), _states(eval_rejected, "eval_rejected")
        if ec.shape != er.shape or ec.shape[1] != xc.shape[1]:
            raise ValueError(f"eval states {tuple(ec.shape)}/{tuple(er.shape)} do not match training states H = {xc.shape[1]}")
        held = (ec, er, _margins(eval_margins, ec.shape[0], "eval_margins"))

    generator = torch.Generator().manual_seed(config.seed)
    head = torch.nn.Linear(xc.shape[1], 1, bias=config.bias)
    torch.nn.init.zeros_(head.weight)
    if head.bias is not None:
        torch.nn.init.zeros_(head.bias)
    steps_per_epoch = math.ceil(xc.shape[0] / config.batch_size)
    total = steps_per_epoch * config.epochs
    warmup = int(config.warmup_ratio * total)
    decay = [{"params": [head.weight], "weight_decay": config.weight_decay}]
    if head.bias is not None:
        decay.append({"params": [head.bias], "weight_decay": 0.0})
    optimizer = torch.optim.AdamW(decay, lr=config.lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: cosine_schedule(s, total, warmup))
    best, best_loss = None, math.inf
    for epoch in range(1, config.epochs + 1):
        order = torch.randperm(xc.shape[0], generator=generator)
        for start in range(0, len(order), config.batch_size):
            idx = order[start : start + config.batch_size]
            loss = bradley_terry_loss(head(xc[idx])[:, 0], head(xr[idx])[:, 0], m[idx], config.center_lambda)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), config.max_grad_norm)
            optimizer.step()
            schedule.step()
        row = {"epoch": epoch, "loss": float(loss.detach())}
        if held is not None:
            with torch.no_grad():
                rc, rr = head(held[0])[:, 0], head(held[1])[:, 0]
                row["eval_loss"] = float(bradley_terry_loss(rc, rr, held[2], config.center_lambda))
                row["eval_accuracy"] = float(pairwise_correct(rc, rr).float().mean())
            if row["eval_loss"] < best_loss:
                best_loss, best = row["eval_loss"], {k: v.detach().clone() for k, v in head.state_dict().items()}
        if history is not None:
            history.append(row)
    state = best if best is not None else {k: v.detach().clone() for k, v in head.state_dict().items()}
    return {f"score_head.{k}": v for k, v in state.items()}


def save_head_only(
    out_dir: str | os.PathLike,
    base_model_dir: str | os.PathLike,
    kind: str,
    pooling: str,
    head_state: dict[str, torch.Tensor],
    card: dict[str, Any] | None = None,
) -> Path:
    """Write sdscore_head.json + head.safetensors; base_model_dir is stored as given (a relative
    path is read relative to out_dir when loading)."""
    from safetensors.torch import save_file

    weight = head_state.get("score_head.weight")
    if weight is None or weight.ndim != 2 or weight.shape[0] != 1:
        raise ValueError(f"head_state needs score_head.weight [1, H]; got keys {sorted(head_state)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in head_state.items()}
    with atomic_path(out / HEAD_ONLY_WEIGHTS) as temp:
        save_file(state, str(temp), metadata={"format": "pt"})
    write_json(out / HEAD_ONLY_CONFIG, {
        "format": "sdscore-head", "version": FORMAT_VERSION, "base_model": os.fspath(base_model_dir),
        "kind": kind, "pooling": pooling_name(pooling), "hidden_size": int(weight.shape[1]),
        "bias": "score_head.bias" in state, "card": dict(card or {}),
    })
    return out
