"""sdscore in process as verl's custom reward function: the model runs inside verl's reward workers.

verl 0.9 config: ``reward.custom_reward_function.path=pkg://sdscore.rl.verl_adapter`` and
``reward.custom_reward_function.name=verl_compute_score``. verl 0.9 runs the function in each of
its ``reward.num_workers`` reward-loop Ray actors (8 by default), which get no GPU: the model
loads once per actor, on the CPU. For anything but small runs, serve the model once with
`sdscore serve` and use the HTTP function (rl/verl_http.py) instead.

The call, the episode and the returned dict are verl_samples' (see there). ``reward_kwargs``
(``reward.custom_reward_function.reward_kwargs``) may carry ``model_dir`` (default
$SDSCORE_REWARD_MODEL, else the shipped demo model), ``criterion``, ``error_reward`` (default
0.0), ``backend``, ``device``, ``max_batch`` and ``max_wait_ms``. verl calls a sync function from
a thread pool, so concurrent samples of one worker share batches.

A sample that cannot be scored gets ``error_reward`` with ``sdscore_failed`` 1 and the reason in
``sdscore_error``; it never fails the batch. A model that cannot be loaded raises.
(verl 0.9 has no batch reward manager any more: the batch form this module had is gone.)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sdscore.models.episodes import Episode
from sdscore.rl.batcher import EpisodeScoreError
from sdscore.rl.episode_specs import EpisodeSpecError, episode_from_messages
from sdscore.rl.shared_batchers import BatcherConfig, shared_batcher
from sdscore.rl.verl_samples import (
    VERL_OWN_KWARGS,
    VerlConfigError,
    error_reward_of,
    reward_result,
    sample_name,
    verl_messages,
)

log = logging.getLogger(__name__)

_BATCHER_KEYS = ("backend", "device", "max_batch", "max_wait_ms")
_KEYS = frozenset(("model_dir", "criterion", "error_reward") + _BATCHER_KEYS)


def _config(reward_kwargs: Mapping) -> BatcherConfig:
    unknown = set(reward_kwargs) - _KEYS - VERL_OWN_KWARGS
    if unknown:
        raise VerlConfigError(f"unknown reward_kwargs {', '.join(sorted(unknown))} for sdscore's in-process verl "
                              f"reward (expected {', '.join(sorted(_KEYS))})")
    model_dir = reward_kwargs.get("model_dir")
    settings = {k: reward_kwargs[k] for k in _BATCHER_KEYS if k in reward_kwargs}
    return BatcherConfig(None if model_dir is None else str(model_dir), **settings)


def episode_from_verl(solution_str: str, extra_info: Mapping | None, sample_rate: int, where: str,
                      criterion: str | None = None) -> Episode:
    """The episode of one verl sample (verl_samples' convention), its audio decoded."""
    return episode_from_messages(verl_messages(solution_str, extra_info, where), sample_rate, where,
                                 criterion=criterion)


def verl_compute_score(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                       extra_info: Mapping | None = None, **reward_kwargs: Any) -> dict:
    """verl's per-sample `compute_score`: ``{"score", "sdscore_failed", "sdscore_error"}``."""
    error_reward = error_reward_of(reward_kwargs)
    batcher = shared_batcher(_config(reward_kwargs))
    where = sample_name(data_source, extra_info)
    try:
        episode = episode_from_verl(solution_str, extra_info, batcher.scorer.model.sample_rate, where,
                                    reward_kwargs.get("criterion"))
        return reward_result(float(batcher.score(episode)), None, error_reward)
    except (EpisodeSpecError, EpisodeScoreError) as exc:
        reason = str(exc) if str(exc).startswith(where) else f"{where}: {exc}"
        log.warning("sdscore reward: %s (reward %g)", reason, error_reward)
        return reward_result(None, reason, error_reward)
