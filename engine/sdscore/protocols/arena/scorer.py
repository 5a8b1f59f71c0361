"""`sdscore score arena BATTLES --judge openai`: a speech model judges each battle (S2S-Arena §5.4, Table 6).

Each battle's question (audio, or text) and its two answers (audio_a_path, audio_b_path) go to an
audio LLM at an OpenAI-compatible endpoint, which says which answer is better, first or second.
orders "both" (the default, as the paper) asks A-then-B and B-then-A; "shown" only A-then-B;
"random" one order per battle drawn from (seed, battle_id). Each answer is mapped back to the battle's
terms (model_a / model_b / tie): winner_ab, winner_ba; orders_agree says whether both orders picked
the same model; `winner` is that model when they agree and a tie otherwise (a win must survive the
swap, MT-Bench's conservative rule). The manifest's own verdict stays as reference_winner /
reference_judge, so `sdscore eval arena RESULTS` rates the judge (`judge` = the model name) beside the
humans and measures their agreement and the judge's swap consistency (judge_battles.py).
A reply no parser accepts, after the client's re-asks, is that row's error with the raw reply kept.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import polars as pl

from sdscore.errors import SdscoreError
from sdscore.llm_judges.client import configured_client
from sdscore.llm_judges.pair_preference import FIRST, SECOND, parse_preference
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.llm_judges.scoring_jobs import judge_job
from sdscore.protocols.arena.judge_prompt import load_arena_prompt
from sdscore.protocols.arena.settings import ArenaJudgeSettings
from sdscore.protocols.arena.spec import SPEC
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.settings import build

AB, BA = "ab", "ba"
#: one output row per battle
RESULTS = pl.Schema({
    "battle_id": pl.String, "prompt_id": pl.String, "model_a": pl.String, "model_b": pl.String,
    "domain": pl.String, "length_a": pl.Float64, "length_b": pl.Float64,
    "audio_a_path": pl.String, "audio_b_path": pl.String,
    "reference_judge": pl.String, "reference_winner": pl.String,  # the manifest's judge and verdict
    "judge": pl.String,  # the judge model's name
    "orders": pl.List(pl.String),  # "ab" (model_a shown first) and/or "ba"
    "answers": pl.List(pl.String),  # per order: first / second / tie as parsed (null where it failed)
    "winner_ab": pl.String, "winner_ba": pl.String,  # model_a / model_b / tie, in the battle's terms
    "orders_agree": pl.Boolean,  # null unless both orders were asked
    "winner": pl.String,  # the agreeing verdict; a tie when the orders disagree
    "raw_replies": pl.List(pl.String),
    "cost": pl.Float64,
    "error": pl.String,
})
_BATTLE = ("battle_id", "prompt_id", "model_a", "model_b", "domain", "length_a", "length_b", "audio_a_path",
           "audio_b_path")


def battle_verdict(order: str, answer: str) -> str:
    """An answer given with the answers in `order` as the battle's verdict (model_a / model_b / tie)."""
    if answer not in (FIRST, SECOND):
        return "tie"
    return "model_a" if (answer == FIRST) == (order == AB) else "model_b"


class ArenaAudioJudgeScorer:
    """Settings: ArenaJudgeSettings (model, base_url, orders, allow_ties, prompt_file, seed; the endpoint,
    cache, parallelism, deadline and audio limits of AudioJudgeConfig)."""

    settings_class = ArenaJudgeSettings

    def __init__(self, *args: Any, **settings: Any):
        """Positional settings fill model, base_url; see ArenaJudgeSettings (checked: SettingsError)."""
        s = build(ArenaJudgeSettings, *args, **settings)
        self.prompt = load_arena_prompt(s.prompt_file, s.allow_ties)
        self.model, self.orders, self.allow_ties, self.seed = s.model, s.orders, s.allow_ties, s.seed
        self.audio_rate, self.max_request_bytes = s.audio_rate, s.max_request_bytes
        self.max_audio_seconds = s.max_audio_seconds or None
        self.client = configured_client(s, json_mode=False)

    def _orders_of(self, battle_id: str) -> list[str]:
        if self.orders == "both":
            return [AB, BA]
        if self.orders == "shown":
            return [AB]
        return [random.Random(f"{self.seed}\x1f{battle_id}").choice((AB, BA))]

    def _ask(self, call: tuple[dict, str]) -> tuple[str | None, str | None, float | None, str | None]:
        """(answer, raw reply, cost, error) of one battle in one order."""
        row, order = call
        first, second = (row["audio_a_path"], row["audio_b_path"]) if order == AB else \
            (row["audio_b_path"], row["audio_a_path"])
        try:
            request = self.prompt.request(first, second, row.get("question_path"), row.get("question_text"))
            messages = request.messages(self.audio_rate, self.max_request_bytes, self.max_audio_seconds)
            result = self.client.complete(messages, parse=lambda text: parse_preference(text, self.allow_ties))
        except ReplyError as error:
            return None, error.raw, None, str(error)
        except SdscoreError as error:
            return None, None, None, str(error)
        return result.parsed, result.content, result.cost, None

    @staticmethod
    def _problem(row: dict) -> str | None:
        if row.get("error") is not None:
            return row["error"]
        missing = [c for c in ("audio_a_path", "audio_b_path") if not row.get(c)]
        if missing:
            return f"the audio judge needs both answers' audio; {' and '.join(missing)} missing"
        if not row.get("question_path") and not (row.get("question_text") or "").strip():
            return "the audio judge needs the question: question_path or question_text"
        return None

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        records = rows.to_dicts()
        problems = [self._problem(row) for row in records]
        calls = [(row, order) for row, problem in zip(records, problems) if problem is None
                 for order in self._orders_of(row["battle_id"])]
        with ThreadPoolExecutor(max_workers=self.client.concurrency, thread_name_prefix="sdscore-arena") as pool:
            replies = dict(zip(((id(row), order) for row, order in calls), pool.map(self._ask, calls)))
        out = [self._assemble(row, problem, replies) for row, problem in zip(records, problems)]
        return pl.DataFrame(out, schema=RESULTS)

    def _assemble(self, row: dict, problem: str | None, replies: dict) -> dict[str, Any]:
        out: dict[str, Any] = {name: row.get(name) for name in _BATTLE}
        out.update(reference_judge=row.get("judge"), reference_winner=row.get("winner"), judge=self.model,
                   orders=None, answers=None, winner_ab=None, winner_ba=None, orders_agree=None, winner=None,
                   raw_replies=None, cost=None, error=problem)
        if problem is not None:
            return out
        orders = self._orders_of(row["battle_id"])
        asked = [replies[(id(row), order)] for order in orders]
        costs = [cost for _, _, cost, _ in asked]
        out.update(orders=orders, answers=[answer for answer, _, _, _ in asked],
                   raw_replies=[raw for _, raw, _, _ in asked],
                   cost=None if any(c is None for c in costs) else float(sum(costs)))
        failed = [(k, error) for k, (_, _, _, error) in enumerate(asked) if error is not None]
        if failed:
            k, error = failed[0]
            out["error"] = f"order {orders[k]} ({k + 1} of {len(orders)}): {error}" if len(orders) > 1 else error
            return out
        verdicts = {order: battle_verdict(order, answer) for order, (answer, _, _, _) in zip(orders, asked)}
        out.update(winner_ab=verdicts.get(AB), winner_ba=verdicts.get(BA))
        if len(verdicts) == 2:
            out["orders_agree"] = verdicts[AB] == verdicts[BA]
            out["winner"] = verdicts[AB] if out["orders_agree"] else "tie"
        else:
            out["winner"] = next(iter(verdicts.values()))
        return out

    def close(self) -> None:
        self.client.close()


def scoring_job(**settings: Any) -> ScoringJob:
    """The job for ArenaAudioJudgeScorer's settings (judge="openai"), checked up front: the scorer is
    built once and closed, so a usage error stops the run before any battle is asked."""
    settings = {k: v for k, v in settings.items() if v is not None}
    judge = settings.pop("judge", "openai")
    if judge != "openai":
        raise ValueError(f"unknown arena judge {judge!r}; expected 'openai' (battles need no other scoring)")
    return judge_job(SPEC, ArenaAudioJudgeScorer, settings)
