"""verl's custom reward function over HTTP: each sample is scored by a running `sdscore serve`.

verl 0.9 runs the reward function in ``reward.num_workers`` reward-loop Ray actors (8 by
default) that get no GPU; with this function they only send requests, and the one server
(started where the GPU is) batches what all of them send. Config:

    reward.custom_reward_function.path=pkg://sdscore.rl.verl_http
    reward.custom_reward_function.name=compute_score        # async (verl awaits it); compute_score_sync: sync
    +reward.custom_reward_function.reward_kwargs.url=http://HOST:8000

The call and the episode are verl_samples' (see there); the result is
``{"score", "sdscore_failed", "sdscore_error"}``: each key becomes a column of verl's
``reward_extra_info``. ``compute_score_sync`` is for reward managers that need a sync function
(verl's "remote" manager); "naive", "dapo" and "rate_limited" await ``compute_score``.

``reward_kwargs`` (all optional; unknown keys raise, to catch typos):

- ``url``: the server's base URL (default $SDSCORE_SERVE_URL, else http://127.0.0.1:8000);
- ``token_env``: the environment variable holding the server's bearer token (default
  SDSCORE_SERVE_TOKEN; the token itself is never put in the config);
- ``error_reward`` (default 0.0): the reward of a sample that cannot be scored;
- ``criterion``: the reward model's criterion for every sample;
- ``audio_sample_rate``: the rate of bare float samples when ``extra_info`` gives none;
- ``send_paths`` (default false): send audio paths instead of the files' bytes, for a server
  started with ``--allow-paths`` over a folder both machines see;
- ``timeout_s`` (150), ``connect_timeout_s`` (10), ``retries`` (3), ``max_connections`` (64 per
  worker process).

A bad sample (audio missing or unreadable, a bad spec, a waveform the server refuses, a scoring
failure) never fails the batch: it gets ``error_reward``, ``sdscore_failed`` 1 and the reason in
``sdscore_error`` (also logged). A server that cannot be used (unreachable, wrong token, not sdscore
serve, overloaded past the retries) raises `RewardServerError` naming the URL: that is a
configuration or capacity problem, and scoring every sample as failed would train on garbage.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Mapping
from typing import Any

from sdscore.rl.episode_json import episode_json
from sdscore.rl.episode_specs import EpisodeSpecError
from sdscore.rl.serve_client import ServeClientConfig, ascore_episode, score_episode
from sdscore.rl.verl_samples import (
    VERL_OWN_KWARGS,
    VerlConfigError,
    error_reward_of,
    reward_result,
    sample_name,
    verl_messages,
)

log = logging.getLogger(__name__)

URL_ENV = "SDSCORE_SERVE_URL"
DEFAULT_URL = "http://127.0.0.1:8000"
TOKEN_ENV = "SDSCORE_SERVE_TOKEN"
_KEYS = frozenset({"url", "token_env", "error_reward", "criterion", "audio_sample_rate", "send_paths", "timeout_s",
                   "connect_timeout_s", "retries", "max_connections"})


def client_config(reward_kwargs: Mapping) -> ServeClientConfig:
    """The server and timeouts `reward_kwargs` (and the environment) name."""
    unknown = set(reward_kwargs) - _KEYS - VERL_OWN_KWARGS
    if unknown:
        raise VerlConfigError(f"unknown reward_kwargs {', '.join(sorted(map(str, unknown)))} for sdscore's HTTP verl "
                              f"reward (expected {', '.join(sorted(_KEYS))})")
    url = reward_kwargs.get("url") or os.environ.get(URL_ENV) or DEFAULT_URL
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise VerlConfigError(f"reward_kwargs url (or ${URL_ENV}) must be an http:// or https:// URL, got {url!r}")
    token_env = reward_kwargs.get("token_env", TOKEN_ENV)
    if not isinstance(token_env, str) or not token_env:
        raise VerlConfigError(f"reward_kwargs token_env must name an environment variable, got {token_env!r}")
    settings = {}
    for name, default in (("timeout_s", 150.0), ("connect_timeout_s", 10.0)):
        value = reward_kwargs.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise VerlConfigError(f"reward_kwargs {name} must be a positive number of seconds, got {value!r}")
        settings[name] = float(value)
    for name, default, least in (("retries", 3, 0), ("max_connections", 64, 1)):
        value = reward_kwargs.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise VerlConfigError(f"reward_kwargs {name} must be an integer >= {least}, got {value!r}")
        settings[name] = value
    return ServeClientConfig(url=url, token=os.environ.get(token_env) or None, **settings)


def _episode_options(reward_kwargs: Mapping) -> dict:
    criterion = reward_kwargs.get("criterion")
    if criterion is not None:
        from sdscore.corpus.schemas import CRITERIA

        if criterion not in CRITERIA:
            raise VerlConfigError(f"reward_kwargs criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    rate = reward_kwargs.get("audio_sample_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0):
        raise VerlConfigError(f"reward_kwargs audio_sample_rate must be a positive integer, got {rate!r}")
    send_paths = reward_kwargs.get("send_paths", False)
    if not isinstance(send_paths, bool):
        raise VerlConfigError(f"reward_kwargs send_paths must be true or false, got {send_paths!r}")
    return {"criterion": criterion, "default_rate": rate, "send_paths": send_paths}


def _sample(solution_str: Any, extra_info: Any, where: str, options: dict) -> dict:
    info_rate = extra_info.get("audio_sample_rate") if isinstance(extra_info, Mapping) else None
    options = dict(options, default_rate=info_rate or options["default_rate"])
    return episode_json(verl_messages(solution_str, extra_info, where), where, **options)


def _failed(where: str, reason: str, error_reward: float) -> dict:
    reason = reason if reason.startswith(where) else f"{where}: {reason}"
    log.warning("sdscore reward: %s (reward %g)", reason, error_reward)
    return reward_result(None, reason, error_reward)


async def compute_score(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                        extra_info: Mapping | None = None, **reward_kwargs: Any) -> dict:
    """verl's async per-sample `compute_score`, scored by `sdscore serve` (see the module docstring)."""
    config, options, error_reward = client_config(reward_kwargs), _episode_options(reward_kwargs), \
        error_reward_of(reward_kwargs)
    where = sample_name(data_source, extra_info)
    try:
        # reading files and encoding waveforms stays off the event loop that all samples share
        episode = await asyncio.get_running_loop().run_in_executor(None, _sample, solution_str, extra_info, where,
                                                                   options)
    except EpisodeSpecError as exc:
        return _failed(where, str(exc), error_reward)
    score, error = await ascore_episode(config, episode)
    return _failed(where, error, error_reward) if error is not None else reward_result(score, None, error_reward)


def compute_score_sync(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                       extra_info: Mapping | None = None, **reward_kwargs: Any) -> dict:
    """The blocking form of `compute_score` (thread-safe; for verl's "remote" reward manager)."""
    config, options, error_reward = client_config(reward_kwargs), _episode_options(reward_kwargs), \
        error_reward_of(reward_kwargs)
    where = sample_name(data_source, extra_info)
    try:
        episode = _sample(solution_str, extra_info, where, options)
    except EpisodeSpecError as exc:
        return _failed(where, str(exc), error_reward)
    score, error = score_episode(config, episode)
    return _failed(where, error, error_reward) if error is not None else reward_result(score, None, error_reward)
