"""Reward inside RL loops: a micro-batcher over a RewardScorer, framework adapters, an HTTP server.

- `RewardBatcher` — callers submit one episode (or a few) from any thread or task; batches go to
  the scorer (rl/batcher.py).
- `trl_reward_func(model_dir)` — a TRL `reward_funcs` entry, sync or async (rl/trl_adapter.py).
- verl's custom reward function: over HTTP to `sdscore serve` — ``pkg://sdscore.rl.verl_http``,
  `compute_score` (async) / `compute_score_sync` — or in process, `verl_compute_score`
  (rl/verl_adapter.py; the model loads in every verl reward worker).
- `create_app` / `serve` — `sdscore serve`: `/score`, OpenRLHF's `/get_reward`, `/healthz`,
  `/metrics` (rl/server.py).
- OpenRLHF: ``--reward.remote_url http://HOST:8000/get_reward`` (what a sample means there:
  rl/openrlhf_format.py), or an agent that scores the policy's generated speech through the server
  (``--train.agent_func_path`` = rl/openrlhf_agent.py, or a file subclassing its `SpeechRewardAgent`).
"""

from __future__ import annotations

_LAZY = {
    "RewardBatcher": "sdscore.rl.batcher",
    "QueueFullError": "sdscore.rl.batcher",
    "BatcherClosedError": "sdscore.rl.batcher",
    "EpisodeScoreError": "sdscore.rl.batcher",
    "trl_reward_func": "sdscore.rl.trl_adapter",
    "verl_compute_score": "sdscore.rl.verl_adapter",
    "create_app": "sdscore.rl.server",
    "serve": "sdscore.rl.server",
    "episode_from_spec": "sdscore.rl.episode_specs",
    "episode_from_messages": "sdscore.rl.episode_specs",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'sdscore.rl' has no attribute {name!r}")


__all__ = sorted(_LAZY)
