"""SDiaReward's zero-shot audio-LLM baseline: an audio LLM asked which of a pair's two dialogues is better.

`sdscore score reward PAIRS --judge openai --model NAME`. Per pair, one request holds both episodes
(every turn's clip in order, labelled "Dialogue 1, turn 2 (user)", with its transcript) and asks,
under the pair's criterion (modality or colloquialness, audio_judge_prompts), for "1" or "2".
orders="both" (default) asks twice, chosen shown first and then rejected shown first;
orders="shown" asks once, in an order drawn per pair from (seed, pair_id) and recorded.

The results are the reward results (results.RESULT_SCHEMA), so `sdscore eval reward` reads them
unchanged: chosen_reward / rejected_reward are the share of orders whose answer picked that
episode. Both orders agreeing on the chosen episode give 1 / 0 (correct), on the rejected one 0 / 1
(wrong); orders that disagree (a position-inconsistent judge) give 0.5 / 0.5, a tie, which SDiaReward's
rule counts as wrong. The judge columns add per call: shown_first ("chosen" | "rejected"), answers
("1" | "2"), picked ("chosen" | "rejected"), raw_replies; per pair: position_consistent (both orders
only), cost and judge_model. A reply no parser accepts, after the client's re-asks, fails its pair
with the raw reply kept.
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import polars as pl

from sdscore.errors import JudgeError, SdscoreError
from sdscore.llm_judges.audio_request import (
    DEFAULT_AUDIO_RATE,
    DEFAULT_MAX_REQUEST_BYTES,
    AudioRequest,
)
from sdscore.llm_judges.client import ChatClient, configured_client
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.reward.audio_judge_answers import parse_dialogue_choice
from sdscore.protocols.reward.audio_judge_prompts import PairPrompt, load_pair_prompt
from sdscore.protocols.reward.choices import ORDERS
from sdscore.protocols.reward.results import DEFAULT_SUBSET, RESULT_SCHEMA
from sdscore.protocols.reward.settings import RewardJudgeSettings
from sdscore.runtime.settings import build

SIDES = ("chosen", "rejected")
#: the reward results columns plus the judge's own
JUDGE_RESULT_SCHEMA = pl.Schema({
    **RESULT_SCHEMA,
    "judge_model": pl.String,
    "shown_first": pl.List(pl.String),
    "answers": pl.List(pl.String),
    "picked": pl.List(pl.String),
    "raw_replies": pl.List(pl.String),
    "position_consistent": pl.Boolean,
    "cost": pl.Float64,
})


@dataclass(frozen=True)
class _Call:
    first: str  # the side shown as Dialogue 1: "chosen" | "rejected"
    request: AudioRequest


class PairwiseAudioJudge:
    """Asks one audio LLM (a ChatClient at an OpenAI-compatible endpoint) which dialogue of each pair is better."""

    def __init__(self, client: ChatClient, *, orders: str = "both", seed: int = 0, prompt_file: str | None = None,
                 audio_rate: int = DEFAULT_AUDIO_RATE, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 max_audio_seconds: float | None = None):
        if orders not in ORDERS:
            raise ValueError(f"orders must be one of {list(ORDERS)}, got {orders!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        self.client, self.orders, self.seed = client, orders, seed
        self.audio_rate, self.max_request_bytes, self.max_audio_seconds = audio_rate, max_request_bytes, max_audio_seconds
        if prompt_file is None:
            self.prompts: dict[str, PairPrompt] = {c: load_pair_prompt(c) for c in ("modality", "colloquialness")}
        else:
            own = load_pair_prompt(prompt_file=prompt_file)
            self.prompts = {"modality": own, "colloquialness": own}

    def firsts(self, pair_id: str | None) -> list[str]:
        """The side shown as Dialogue 1 in each call of a pair."""
        if self.orders == "both":
            return ["chosen", "rejected"]
        rng = random.Random(f"{self.seed}\x1f{pair_id}")
        return [SIDES[rng.randrange(2)]]

    def plan(self, row: dict) -> list[_Call]:
        """The calls of one pair row; JudgeError says why the pair cannot be asked."""
        prompt = self.prompts.get(row.get("criterion"))
        if prompt is None:
            raise JudgeError(f"criterion {row.get('criterion')!r} has no prompt; expected one of {list(self.prompts)}")
        episodes = {side: row.get(side) or [] for side in SIDES}
        calls = []
        for first in self.firsts(row.get("pair_id")):
            second = SIDES[1 - SIDES.index(first)]
            calls.append(_Call(first, prompt.request(episodes[first], episodes[second], row["criterion"])))
        return calls

    def _ask(self, call: _Call) -> tuple[int | None, str | None, float | None, Exception | None]:
        """(1 or 2, raw reply, cost, error) of one call."""
        try:
            messages = call.request.messages(self.audio_rate, self.max_request_bytes, self.max_audio_seconds)
            result = self.client.complete(messages, parse=parse_dialogue_choice)
        except ReplyError as error:
            return None, error.raw, None, error
        except SdscoreError as error:
            return None, None, None, error
        return result.parsed, result.content, result.cost, None

    def score(self, rows: list[dict]) -> list[dict]:
        """The judge's fields per pair row (see _assemble), in order; a row that fails carries its error."""
        plans: list[list[_Call] | None] = []
        problems: list[str | None] = []
        for row in rows:
            if row.get("error") is not None:
                plans.append(None)
                problems.append(row["error"])
                continue
            try:
                plans.append(self.plan(row))
                problems.append(None)
            except JudgeError as error:
                plans.append(None)
                problems.append(str(error))
        calls = [call for plan in plans if plan for call in plan]
        with ThreadPoolExecutor(max_workers=self.client.concurrency, thread_name_prefix="sdscore-pair-judge") as pool:
            answers = dict(zip(map(id, calls), pool.map(self._ask, calls)))
        return [_assemble(plan, [answers[id(c)] for c in plan] if plan else [], problem)
                for plan, problem in zip(plans, problems)]


def _assemble(plan: list[_Call] | None, replies: list[tuple], problem: str | None) -> dict[str, Any]:
    """chosen/rejected reward (share of orders picking each side), per-call columns and the error."""
    out: dict[str, Any] = {"chosen_reward": None, "rejected_reward": None, "shown_first": None, "answers": None,
                           "picked": None, "raw_replies": None, "position_consistent": None, "cost": None,
                           "error": problem}
    if plan is None:
        return out
    out["shown_first"] = [call.first for call in plan]
    out["raw_replies"] = [raw for _, raw, _, _ in replies]
    costs = [cost for _, _, cost, _ in replies]
    out["cost"] = None if any(c is None for c in costs) else float(sum(costs))
    out["answers"] = [None if choice is None else str(choice) for choice, _, _, _ in replies]
    out["picked"] = [None if choice is None else (call.first if choice == 1 else SIDES[1 - SIDES.index(call.first)])
                     for call, (choice, _, _, _) in zip(plan, replies)]
    failed = [(k, error) for k, (_, _, _, error) in enumerate(replies) if error is not None]
    if failed:
        k, error = failed[0]
        where = f"call {k + 1} of {len(plan)} ({plan[k].first} shown first): " if len(plan) > 1 else ""
        out["error"] = f"{where}{error}"
        return out
    picked = out["picked"]
    out["chosen_reward"] = picked.count("chosen") / len(picked)
    out["rejected_reward"] = picked.count("rejected") / len(picked)
    if len(picked) == 2:
        out["position_consistent"] = picked[0] == picked[1]
    return out


class RewardAudioJudgeScorer:
    """The reward protocol's Scorer for an audio-LLM judge (`sdscore score reward --judge openai`).

    Settings: RewardJudgeSettings (model, base_url, orders, seed, prompt_file; the endpoint, cache,
    parallelism, deadline and audio limits of AudioJudgeConfig)."""

    settings_class = RewardJudgeSettings

    def __init__(self, *args: Any, **settings: Any):
        """Positional settings fill model, base_url; see RewardJudgeSettings (checked: SettingsError)."""
        s = build(RewardJudgeSettings, *args, **settings)
        client = configured_client(s, json_mode=False)
        try:
            self.judge = PairwiseAudioJudge(
                client, orders=s.orders, seed=s.seed,
                prompt_file=None if s.prompt_file is None else os.fspath(s.prompt_file), audio_rate=s.audio_rate,
                max_request_bytes=s.max_request_bytes, max_audio_seconds=s.max_audio_seconds or None,
            )
        except Exception:
            client.close()
            raise
        self.model = s.model

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        records = rows.to_dicts()
        for record in records:
            record.setdefault("error", None)
        judged = self.judge.score(records)
        out = []
        for row, result in zip(records, judged):
            criterion = row.get("criterion")
            chosen, rejected = result["chosen_reward"], result["rejected_reward"]
            scored = result["error"] is None and chosen is not None
            out.append({
                "pair_id": row.get("pair_id"), "criterion": criterion,
                "subset": row.get("subset") if row.get("subset") is not None else DEFAULT_SUBSET.get(criterion, criterion),
                "category": row.get("category"), "source": row.get("source"),
                "margin": chosen - rejected if scored else None, "correct": chosen > rejected if scored else None,
                "warning": None, "judge_model": self.model, **result,
            })
        return pl.DataFrame(out, schema=JUDGE_RESULT_SCHEMA)

    def close(self) -> None:
        self.judge.client.close()
