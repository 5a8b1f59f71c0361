"""sdscore as a TRL reward function (`GRPOTrainer(reward_funcs=[...])`, RLOO, online DPO).

TRL calls each reward function once per local batch as
``func(prompts=..., completions=..., completion_ids=..., **columns)``, where ``columns`` are the
dataset's other columns (one value per sample), the fields a custom ``rollout_func`` returned,
and ``trainer_state`` / ``log_extra`` / ``log_metric``; it wants one float (or None) per
completion back. Async functions (``async def __call__``) are gathered on TRL's event loop.

Where the audio comes from (documented convention):

- the prompt: audio items inside conversational prompts (``{"type": "audio", "audio": spec}``
  content parts), else the dataset column ``audio_column`` (default "audio"), attached to the
  prompt's last user turn;
- the completion: the column ``completion_audio_column`` (default "completion_audio": what a
  speech model's ``rollout_func`` returns beside the token ids), else audio items inside
  conversational completions. A completion with no audio is scored on its text.

An audio spec is anything `sdscore.rl.episode_specs.audio_from_spec` takes: a path, HF Audio's
``{"bytes", "path"}`` or ``{"array", "sampling_rate"}``, base64, or a waveform at the model's rate.
A sample that cannot be scored gets None (TRL turns it into NaN) and a logged warning naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from sdscore.models.episodes import Episode
from sdscore.rl.episode_specs import EpisodeSpecError, episode_from_messages
from sdscore.rl.shared_batchers import BatcherConfig, shared_batcher

log = logging.getLogger(__name__)


class TrlReward:
    """A picklable TRL reward function over an sdscore reward model (loaded on first call)."""

    __name__ = "sdscore_reward"

    def __init__(self, config: BatcherConfig, *, audio_column: str = "audio",
                 completion_audio_column: str = "completion_audio", criterion: str | None = None,
                 name: str = "sdscore_reward"):
        self.config = config
        self.audio_column = audio_column
        self.completion_audio_column = completion_audio_column
        self.criterion = criterion
        self.__name__ = name

    def episodes(self, prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Any],
                 sample_rate: int) -> list[Episode | str]:
        """One Episode (or the error text) per completion."""
        out: list[Episode | str] = []
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
            try:
                out.append(self._episode(i, prompt, completion, columns, sample_rate))
            except (EpisodeSpecError, ValueError, TypeError) as exc:
                out.append(f"sample {i}: {exc}")
        return out

    def _episode(self, i: int, prompt: Any, completion: Any, columns: Mapping[str, Any], sr: int) -> Episode:
        messages = [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        reply = [dict(m) for m in completion] if isinstance(completion, list) else [
            {"role": "assistant", "content": completion}]
        if not messages or not reply:
            raise EpisodeSpecError("empty prompt or completion")
        prompt_audio = _column(columns, self.audio_column, i)
        if prompt_audio is not None and not any(_has_audio(m) for m in messages):
            users = [k for k, m in enumerate(messages) if m.get("role") == "user"]
            if not users:
                raise EpisodeSpecError(f"column {self.audio_column!r} has audio but the prompt has no user turn")
            messages[users[-1]]["audio"] = prompt_audio
        completion_audio = _column(columns, self.completion_audio_column, i)
        if completion_audio is not None:
            reply[-1]["audio"] = completion_audio
        return episode_from_messages(messages + reply, sr, f"sample {i}", criterion=self.criterion)

    def _score(self, prompts, completions, columns) -> Future:
        batcher = shared_batcher(self.config)
        return batcher.submit_prepared(self.episodes(prompts, completions, columns, batcher.scorer.model.sample_rate))

    @staticmethod
    def _rewards(results: list) -> list[float | None]:
        for _, error in results:
            if error is not None:
                log.warning("sdscore reward: %s", error)
        return [score for score, _ in results]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                 **columns: Any) -> list[float | None]:
        return self._rewards(self._score(prompts, completions, columns).result())


class AsyncTrlReward(TrlReward):
    """The same reward function with ``async def __call__`` (TRL gathers async functions)."""

    async def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Any = None,
                       **columns: Any) -> list[float | None]:
        import asyncio

        loop = asyncio.get_running_loop()
        # building the batcher may load the model: keep that off the event loop
        future = await loop.run_in_executor(None, self._score, prompts, completions, columns)
        return self._rewards(await asyncio.wrap_future(future))


def _has_audio(message: Mapping) -> bool:
    content = message.get("content")
    parts = content if isinstance(content, list) else []
    return message.get("audio") is not None or any(
        isinstance(p, Mapping) and p.get("type") in ("audio", "input_audio") for p in parts)


def _column(columns: Mapping[str, Any], name: str | None, i: int) -> Any:
    if not name or name not in columns or columns[name] is None:
        return None
    values = columns[name]
    if i >= len(values):
        raise EpisodeSpecError(f"column {name!r} has {len(values)} values, fewer than the completions")
    return values[i]


def trl_reward_func(model_dir: str | None = None, *, asynchronous: bool = False, audio_column: str = "audio",
                    completion_audio_column: str = "completion_audio", criterion: str | None = None,
                    name: str = "sdscore_reward", backend: str = "auto", device: str = "auto", max_batch: int = 64,
                    max_wait_ms: float = 5.0, **scorer_options: Any) -> TrlReward:
    """A TRL `reward_funcs` entry scoring with the reward model in `model_dir` (default:
    $SDSCORE_REWARD_MODEL, else the shipped demo model). `asynchronous=True` gives the async
    variant. The model loads on the first call, once per process; the function pickles without it."""
    config = BatcherConfig(None if model_dir is None else str(model_dir), backend, device, max_batch, None, max_wait_ms,
                           scorer_options=tuple(sorted(scorer_options.items())))
    cls = AsyncTrlReward if asynchronous else TrlReward
    return cls(config, audio_column=audio_column, completion_audio_column=completion_audio_column,
               criterion=criterion, name=name)
