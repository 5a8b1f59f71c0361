"""OpenRLHF's remote reward format (``POST /get_reward``): what each sample means, and the reply.

OpenRLHF 0.11's remote-RM client (openrlhf/utils/agent.py, `SingleTurnAgentExecutor`) posts one
rollout per request: ``{"query": [decode(prompt_ids + response_ids)], "prompts": [prompt],
"labels": [label]}``. The query is decoded with ``skip_special_tokens=False``, so it carries the
chat template's tokens and the policy's EOS; and when a prompt is longer than ``max_len -
max_new_tokens`` tokens, its tokens are cut from the left before generation, so the query no longer
starts with the prompt. OpenRLHF reads ``rewards``, ``scores`` and ``extra_logs`` and makes a
tensor of every ``extra_logs`` value (openrlhf/trainer/ppo_utils/samples_generator.py), so those
must be numbers.

Per sample:

- the special tokens in `RewardFormat.strip_tokens` are removed from the query and the prompt
  first (`DEFAULT_STRIP_TOKENS` unless the server was given the policy's tokenizer or a list);
- the response is the query after its prompt; whitespace differences between the two (a
  tokenizer that cleans up spaces when decoding) are tolerated. A query that does not start with
  its prompt is not scored: it fails, as "cut from the left" when it starts with the prompt's end
  (OpenRLHF's truncation), else as "does not start with its prompt";
- a label that is an object (or a JSON string of one) may carry ``"audio"`` — the response's
  audio: the policy's generated speech — and ``"context"``: chat messages that replace the prompt
  as the episode's context. Any other label (a reference answer) is not used.

The reply: ``rewards`` (raw), ``scores`` (the rewards through `RewardFormat.score_transform`),
``extra_logs`` (``sdscore_failed`` and ``sdscore_prompt_truncated``, 0/1 per sample) and
``errors`` (each sample's reason, or null; OpenRLHF does not read it).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sdscore.errors import SdscoreError
from sdscore.rl.bounded_json import JSONBodyError, loads_bounded
from sdscore.rl.episode_specs import EpisodeSpecError

#: stripped when the server is given neither the policy's tokenizer nor a list: the end-of-text,
#: padding and chat-template tokens of the common policy families (Llama 2/3, Mistral, Qwen and
#: other ChatML models, Gemma, Phi-3, GPT-2)
DEFAULT_STRIP_TOKENS = (
    "<s>", "</s>", "<unk>", "<pad>", "<bos>", "<eos>",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
    "<start_of_turn>", "<end_of_turn>",
    "<|system|>", "<|user|>", "<|assistant|>", "<|end|>",
)
SCORE_TRANSFORMS = ("none", "sigmoid", "minmax")
EXTRA_LOGS = ("sdscore_failed", "sdscore_prompt_truncated")


class RewardFormatError(SdscoreError):
    """A /get_reward setting that cannot work (an unknown transform, a range that is no range, ...)."""


class PromptMismatch(EpisodeSpecError):
    """A query that does not start with its prompt; `truncated`: it starts with the prompt's end."""

    def __init__(self, message: str, truncated: bool):
        super().__init__(message)
        self.truncated = truncated


@dataclass(frozen=True)
class RewardFormat:
    """How /get_reward reads queries and reports scores. `strip_tokens`: removed from queries and
    prompts; `score_transform`: ``none`` (scores = rewards), ``sigmoid`` (1 / (1 + e^-reward)) or
    ``minmax`` (the reward's place in `score_range`, clipped to 0..1). Rewards stay raw."""

    strip_tokens: tuple[str, ...] = DEFAULT_STRIP_TOKENS
    score_transform: str = "none"
    score_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.strip_tokens, str):
            raise RewardFormatError(f"strip_tokens takes a list of tokens, got the string {self.strip_tokens!r}")
        tokens = tuple(self.strip_tokens)
        bad = [t for t in tokens if not isinstance(t, str) or not t]
        if bad:
            raise RewardFormatError(f"strip_tokens must be non-empty strings, got {bad[0]!r}")
        object.__setattr__(self, "strip_tokens", tuple(dict.fromkeys(tokens)))
        if self.score_transform not in SCORE_TRANSFORMS:
            raise RewardFormatError(f"score_transform must be one of {', '.join(SCORE_TRANSFORMS)}, "
                                    f"got {self.score_transform!r}")
        if self.score_range is not None:
            try:
                low, high = (float(v) for v in self.score_range)
            except (TypeError, ValueError):
                raise RewardFormatError(f"score_range takes two numbers LOW HIGH, got {self.score_range!r}") from None
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise RewardFormatError(f"score_range needs finite LOW < HIGH, got {low:g} {high:g}")
            object.__setattr__(self, "score_range", (low, high))
        if self.score_transform == "minmax" and self.score_range is None:
            raise RewardFormatError("score transform minmax needs the reward range it maps to 0..1 "
                                    "(--score-range LOW HIGH)")
        if self.score_transform != "minmax" and self.score_range is not None:
            raise RewardFormatError(f"a score range is used only by the minmax transform, not {self.score_transform}")

    @cached_property
    def _token_pattern(self) -> re.Pattern | None:
        if not self.strip_tokens:
            return None
        return re.compile("|".join(re.escape(t) for t in sorted(self.strip_tokens, key=len, reverse=True)))

    def strip(self, text: str) -> str:
        """`text` without the special tokens."""
        pattern = self._token_pattern
        return text if pattern is None else pattern.sub("", text)

    def score(self, reward: float) -> float:
        """The score OpenRLHF gets (``scores``: its dynamic filter's input) for a raw reward."""
        if self.score_transform == "sigmoid":
            if reward >= 0:
                return 1.0 / (1.0 + math.exp(-reward))
            z = math.exp(reward)
            return z / (1.0 + z)
        if self.score_transform == "minmax":
            low, high = self.score_range
            return min(1.0, max(0.0, (reward - low) / (high - low)))
        return reward


def policy_special_tokens(folder: str | os.PathLike) -> tuple[str, ...]:
    """The special tokens of the policy's Hugging Face tokenizer in `folder` (read locally, nothing
    downloaded): its named ones (EOS, pad, ...) and every added token marked special."""
    if not os.path.isdir(folder):
        raise RewardFormatError(f"--policy-tokenizer {os.fspath(folder)}: not an existing folder (give the "
                                f"policy's local model or tokenizer folder)")
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(os.fspath(folder), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise RewardFormatError(f"--policy-tokenizer {os.fspath(folder)}: cannot load a tokenizer there "
                                f"({first_line})") from None
    tokens = set(tokenizer.all_special_tokens)
    tokens.update(t.content for t in tokenizer.added_tokens_decoder.values() if t.special)
    return tuple(sorted(t for t in tokens if isinstance(t, str) and t))


def read_label(label: Any, where: str, max_depth: int) -> Mapping | None:
    """A label object (or JSON string of one); None for any other label (e.g. a reference answer)."""
    if isinstance(label, str) and label.lstrip().startswith("{"):
        try:
            label = loads_bounded(label, max_depth, f"{where} JSON")
        except JSONBodyError as exc:
            raise EpisodeSpecError(f"{where}: {exc}") from None
    return label if isinstance(label, Mapping) else None


def sample_messages(query: str, prompt: str | None, label: Mapping | None, where: str,
                    fmt: RewardFormat) -> list[dict]:
    """The chat messages of one sample (see the module docstring); PromptMismatch when the query
    does not start with its prompt."""
    query = fmt.strip(query)
    prompt = fmt.strip(prompt) if prompt else None
    response = query
    if prompt:
        end = prefix_end(query, prompt)
        if end is None:
            raise _mismatch(query, prompt, where)
        response = query[end:]
    context = (label or {}).get("context")
    if context is None:
        context = [] if not prompt else [{"role": "user", "content": prompt}]
    if not isinstance(context, list):
        raise EpisodeSpecError(f"{where}: the label's context must be a list of messages")
    reply: dict[str, Any] = {"role": "assistant", "content": response}
    if (label or {}).get("audio") is not None:
        reply["audio"] = label["audio"]
    return list(context) + [reply]


def prefix_end(query: str, prompt: str) -> int | None:
    """Where the prompt ends in `query`, when `query` starts with `prompt` — exactly, or up to
    whitespace (a decoder that cleans up spaces: "you ?" → "you?"); None otherwise."""
    if query.startswith(prompt):
        return len(prompt)
    i = j = 0
    while True:
        while j < len(prompt) and prompt[j].isspace():
            j += 1
        if j == len(prompt):
            break
        while i < len(query) and query[i].isspace():
            i += 1
        if i == len(query) or query[i] != prompt[j]:
            return None
        i, j = i + 1, j + 1
    trailing = len(prompt) - len(prompt.rstrip())  # the prompt's own trailing whitespace is not the response's
    while trailing and i < len(query) and query[i].isspace():
        i, trailing = i + 1, trailing - 1
    return i


def _mismatch(query: str, prompt: str, where: str) -> PromptMismatch:
    squeezed_query = "".join(query.split()).lstrip("\ufffd")  # a cut inside a character decodes to U+FFFD
    squeezed_prompt = "".join(prompt.split())
    # cut from the left, the query is the prompt's end + the response: look for the query's first
    # characters in the prompt (a few dozen places at most, enough for text) and check the rest
    anchor = squeezed_query[:8]
    at, tries = (squeezed_prompt.find(anchor, 1) if anchor else -1), 0
    while at != -1 and tries < 64:
        if squeezed_query.startswith(squeezed_prompt[at:]):
            return PromptMismatch(
                f"{where}: the query starts {at} non-blank characters into its prompt: OpenRLHF cut the prompt from the "
                f"left (it is longer than max_len minus max_new_tokens tokens); not scored", truncated=True)
        at, tries = squeezed_prompt.find(anchor, at + 1), tries + 1
    return PromptMismatch(f"{where}: the query does not start with its prompt (is the prompt the one the query "
                          f"was generated from?); not scored", truncated=False)


def reward_reply(results: list[tuple[float | None, str | None]], truncated: list[bool], error_reward: float,
                 fmt: RewardFormat) -> dict:
    """The /get_reward reply for per-sample `results` ((reward, None) or (None, reason))."""
    rewards = [error_reward if reward is None else float(reward) for reward, _ in results]
    return {"rewards": rewards, "scores": [fmt.score(r) for r in rewards],
            "extra_logs": {"sdscore_failed": [float(error is not None) for _, error in results],
                           "sdscore_prompt_truncated": [float(t) for t in truncated]},
            "errors": [error for _, error in results]}
