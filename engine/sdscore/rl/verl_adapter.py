"""sdscore as verl's custom reward function (`custom_reward_function.path/name` in verl's config).

verl's per-sample reward managers call
``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)``
once per sample and want a float (or a dict with "score"); its batch manager calls
``compute_score(data_sources=..., solution_strs=..., ground_truths=..., extra_infos=..., **reward_kwargs)``
once per batch and wants a list. ``reward_kwargs`` come from ``custom_reward_function.reward_kwargs``:
``model_dir`` (default $SDSCORE_REWARD_MODEL, else the shipped demo model), ``criterion``,
``error_reward`` and the batcher settings are read from there.

The episode (documented convention): the context is ``extra_info["messages"]`` (chat messages with
audio items, as `episode_from_messages` takes) or else ``extra_info["prompt"]`` as one user text
turn; the response is an assistant turn with ``solution_str`` as its text and, as verl-omni
passes generated speech, ``extra_info["audio"]`` (float samples) at ``extra_info["audio_sample_rate"]``
(any other audio spec in ``extra_info["audio"]`` works too).

Per-sample calls from several threads at once are batched together by the shared batcher; one
caller calling one sample at a time gets no batching — use the batch form, or `sdscore serve`.
A sample that cannot be scored raises (its error names it), unless ``error_reward`` gives the
value to return instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sdscore.models.episodes import Episode
from sdscore.rl.batcher import EpisodeScoreError
from sdscore.rl.episode_specs import EpisodeSpecError, episode_from_messages
from sdscore.rl.shared_batchers import BatcherConfig, shared_batcher

_BATCHER_KEYS = ("backend", "device", "max_batch", "max_wait_ms")


def _config(reward_kwargs: dict) -> BatcherConfig:
    model_dir = reward_kwargs.pop("model_dir", None)
    settings = {k: reward_kwargs.pop(k) for k in _BATCHER_KEYS if k in reward_kwargs}
    return BatcherConfig(None if model_dir is None else str(model_dir), **settings)


def episode_from_verl(solution_str: str, extra_info: Mapping | None, sample_rate: int, where: str,
                      criterion: str | None = None) -> Episode:
    """The episode of one verl sample (see the module docstring)."""
    info = extra_info or {}
    if not isinstance(info, Mapping):
        raise EpisodeSpecError(f"{where}: extra_info must be a dict, got {type(info).__name__}")
    messages = info.get("messages")
    if messages is None:
        prompt = info.get("prompt")
        messages = [] if prompt is None else [{"role": "user", "content": prompt}]
    messages = [dict(m) if isinstance(m, Mapping) else m for m in messages]
    response: dict[str, Any] = {"role": "assistant", "content": solution_str}
    audio = info.get("audio")
    if audio is not None:
        rate = info.get("audio_sample_rate")
        if not isinstance(audio, (Mapping, str)) and rate is not None:
            audio = {"array": audio, "sampling_rate": rate}
        response["audio"] = audio
    return episode_from_messages(messages + [response], sample_rate, where, criterion=criterion)


def verl_compute_score(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                       extra_info: Mapping | None = None, **reward_kwargs: Any) -> float:
    """verl's per-sample `compute_score` (see the module docstring)."""
    criterion = reward_kwargs.pop("criterion", None)
    error_reward = reward_kwargs.pop("error_reward", None)
    batcher = shared_batcher(_config(reward_kwargs))
    try:
        episode = episode_from_verl(solution_str, extra_info, batcher.scorer.model.sample_rate,
                                    f"sample ({data_source})", criterion)
        return float(batcher.score(episode))
    except (EpisodeSpecError, EpisodeScoreError):
        if error_reward is None:
            raise
        return float(error_reward)


def verl_compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str],
                             ground_truths: Sequence[Any], extra_infos: Sequence[Mapping | None] | None = None,
                             **reward_kwargs: Any) -> list[float]:
    """verl's batch `compute_score` (BatchRewardManager): one list of rewards per call."""
    criterion = reward_kwargs.pop("criterion", None)
    error_reward = reward_kwargs.pop("error_reward", None)
    batcher = shared_batcher(_config(reward_kwargs))
    extra_infos = [None] * len(solution_strs) if extra_infos is None else list(extra_infos)
    if not len(data_sources) == len(solution_strs) == len(extra_infos):
        raise ValueError(f"verl batch of {len(solution_strs)} solutions has {len(data_sources)} data sources and "
                         f"{len(extra_infos)} extra_infos")
    items: list[Episode | str] = []
    for i, (solution, info) in enumerate(zip(solution_strs, extra_infos)):
        try:
            items.append(episode_from_verl(solution, info, batcher.scorer.model.sample_rate, f"sample {i}", criterion))
        except EpisodeSpecError as exc:
            items.append(str(exc))
    results = batcher.submit_prepared(items).result()
    errors = [error for _, error in results if error is not None]
    rewards = [float(error_reward) if score is None and error_reward is not None else score for score, _ in results]
    if errors and error_reward is None:
        raise EpisodeScoreError(f"{len(errors)} of {len(items)} samples could not be scored: " + "; ".join(errors[:5]))
    return rewards
