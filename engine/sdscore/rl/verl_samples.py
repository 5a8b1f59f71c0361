"""What a verl sample means to sdscore, and the dict verl gets back — shared by the in-process
adapter (rl/verl_adapter.py) and the HTTP one (rl/verl_http.py).

verl 0.9's reward managers (verl/experimental/reward_loop/reward_manager/naive.py, dapo.py,
remote.py, limited.py) call ``compute_score(data_source=, solution_str=, ground_truth=,
extra_info=, **reward_kwargs)`` once per sample. A dict result must hold "score" (the reward);
every key, "score" included, becomes a column of ``reward_extra_info``, and the reward loop takes
the column names from the first sample of a batch (RewardLoopManager.compute_rm_score), so every
sample answers the same keys: ``{"score", "sdscore_failed", "sdscore_error"}``.

The episode (documented convention): the context is ``extra_info["messages"]`` (chat messages
with audio items, as `message_parts` reads them), else ``extra_info["prompt"]`` (a string or a
content list: one user turn; a list of messages: those turns); the response is an assistant turn
with ``solution_str`` as its text and, as verl-omni passes generated speech, ``extra_info["audio"]``
(float samples at ``extra_info["audio_sample_rate"]``, or any audio spec).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sdscore.errors import SdscoreError
from sdscore.rl.episode_specs import EpisodeSpecError

#: reward_kwargs verl itself adds when a reward model is enabled (the reward router): not ours
VERL_OWN_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
#: the columns every sample adds to verl's reward_extra_info
EXTRA_INFO_KEYS = ("score", "sdscore_failed", "sdscore_error")


class VerlConfigError(SdscoreError):
    """reward_kwargs that the verl adapters cannot use (an unknown key, a bad value)."""


def error_reward_of(reward_kwargs: Mapping) -> float:
    """reward_kwargs' ``error_reward`` (default 0.0), checked to be a finite number."""
    value = reward_kwargs.get("error_reward", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise VerlConfigError(f"reward_kwargs error_reward must be a finite number, got {value!r}")
    return float(value)


def sample_name(data_source: Any, extra_info: Any) -> str:
    """How errors name a sample: verl's ``extra_info["index"]`` (its datasets carry one) and its data source."""
    index = extra_info.get("index") if isinstance(extra_info, Mapping) else None
    return f"sample {'?' if index is None else index} ({data_source})"


def verl_messages(solution_str: Any, extra_info: Any, where: str) -> list[dict]:
    """The chat messages of one verl sample: its context, then the response (see the module docstring)."""
    info = {} if extra_info is None else extra_info
    if not isinstance(info, Mapping):
        raise EpisodeSpecError(f"{where}: extra_info must be a dict, got {type(info).__name__}")
    if solution_str is not None and not isinstance(solution_str, str):
        raise EpisodeSpecError(f"{where}: solution_str must be a string, got {type(solution_str).__name__}")
    messages = info.get("messages")
    if messages is None:
        prompt = info.get("prompt")
        if prompt is None:
            messages = []
        elif _is_message_list(prompt):
            messages = list(prompt)
        else:
            messages = [{"role": "user", "content": prompt}]
    if isinstance(messages, (str, bytes)) or not hasattr(messages, "__iter__"):
        raise EpisodeSpecError(f"{where}: extra_info['messages'] must be a list of chat messages")
    messages = [dict(m) if isinstance(m, Mapping) else m for m in messages]
    response: dict[str, Any] = {"role": "assistant", "content": solution_str}
    audio = info.get("audio")
    if audio is not None:
        rate = info.get("audio_sample_rate")
        if not isinstance(audio, (Mapping, str)) and rate is not None:
            audio = {"array": audio, "sampling_rate": rate}
        response["audio"] = audio
    return messages + [response]


def _is_message_list(value: Any) -> bool:
    return (not isinstance(value, (str, bytes, Mapping)) and hasattr(value, "__iter__") and len(value) > 0
            and all(isinstance(m, Mapping) and "role" in m for m in value))


def reward_result(score: float | None, error: str | None, error_reward: float) -> dict:
    """The dict verl gets for one sample: its score, or `error_reward` with the reason."""
    if error is not None:
        return {"score": float(error_reward), "sdscore_failed": 1, "sdscore_error": error}
    return {"score": float(score), "sdscore_failed": 0, "sdscore_error": ""}
