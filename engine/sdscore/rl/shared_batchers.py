"""One reward model and batcher per process, loaded on first use and shared by every adapter.

RL frameworks build reward functions in one process and call them in others (TRL pickles them
into its async workers; verl loads `compute_score` in each reward worker). So adapters carry
only a `BatcherConfig` (plain, picklable) and ask `shared_batcher(config)` for the live batcher:
the first call in a process loads the model; later calls, from any adapter or thread, get the
same one. After a fork the child builds its own (a worker thread does not survive a fork).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from sdscore.rl.batcher import RewardBatcher

#: the model folder adapters use when none is given (verl passes no model to compute_score)
MODEL_ENV = "SDSCORE_REWARD_MODEL"


@dataclass(frozen=True)
class BatcherConfig:
    """What a reward model and its batcher are built from; equal configs share one batcher."""

    model_dir: str | None = None
    backend: str = "auto"
    device: str = "auto"
    max_batch: int = 64
    max_tokens: int | None = None
    max_wait_ms: float = 5.0
    max_queue: int = 4096
    scorer_options: tuple[tuple[str, Any], ...] = field(default=())

    def resolved_model_dir(self) -> str:
        folder = self.model_dir or os.environ.get(MODEL_ENV)
        if not folder:
            from sdscore.models.pretrained import default_model_dir

            return os.fspath(default_model_dir())
        return os.fspath(folder)


_lock = threading.Lock()
_batchers: dict[tuple, RewardBatcher] = {}
_pid = os.getpid()


def build_batcher(config: BatcherConfig) -> RewardBatcher:
    """A new scorer + batcher for `config` (not shared)."""
    from sdscore.runtime.reward.episode_scorer import RewardScorer

    scorer = RewardScorer.from_pretrained(config.resolved_model_dir(), backend=config.backend, device=config.device,
                                          **dict(config.scorer_options))
    return RewardBatcher(scorer, max_batch=config.max_batch, max_tokens=config.max_tokens,
                         max_wait_ms=config.max_wait_ms, max_queue=config.max_queue)


def shared_batcher(config: BatcherConfig) -> RewardBatcher:
    """This process's batcher for `config`, built on first use."""
    global _pid
    key = (config.resolved_model_dir(), config)
    with _lock:
        if os.getpid() != _pid:  # forked: the parent's worker threads are not here
            _batchers.clear()
            _pid = os.getpid()
        batcher = _batchers.get(key)
        if batcher is None or batcher.closed:
            batcher = _batchers[key] = build_batcher(config)
        return batcher


def close_shared_batchers() -> None:
    """Drain and close every shared batcher of this process (tests, shutdown hooks)."""
    with _lock:
        batchers = list(_batchers.values())
        _batchers.clear()
    for batcher in batchers:
        batcher.close()
