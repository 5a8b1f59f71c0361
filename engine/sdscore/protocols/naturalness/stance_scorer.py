"""`sdscore score naturalness --judge openai`: interpersonal stances (SPEARBench §III-C6, StanceBench).

Each row's question clip (audio_path: the context and the question) and answer clip
(answer_audio_path) go to an audio LLM at an OpenAI-compatible endpoint, with our own bundled prompt
(prompts/stances.txt) or the user's; the reply rates the asker and the answerer on the 10 dimensions
of stance_dimensions.py, each -1 / 0 / +1 (stance_replies.py parses it). One STANCE_RESULTS row per
answer: the 20 ratings, the raw reply, its cost; a reply no parser accepts after the client's re-asks
is the row's error with the raw reply kept. `sdscore eval naturalness` reads these files beside the
feature results: same / more negative / more positive per dimension and pooled (stance_eval.py).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Any

import polars as pl

from sdscore.errors import SdscoreError
from sdscore.llm_judges.audio_request import AudioClip, AudioRequest
from sdscore.llm_judges.client import configured_client
from sdscore.llm_judges.prompt_files import check_sections, fill, parse_sections, read_sections
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.naturalness.results import HUMAN_SYSTEM, question_key
from sdscore.protocols.naturalness.settings import StanceJudgeSettings
from sdscore.protocols.naturalness.stance_dimensions import NAMES, ROLES, column, dimension_lines
from sdscore.protocols.naturalness.stance_replies import parse_stances
from sdscore.runtime.settings import build

SECTIONS = {"system": (), "user": ("question", "answer", "dimensions")}
BUNDLED_PROMPT = "stances.txt"
#: the column that marks a results file as the stance judge's (eval tells the two kinds apart by it)
MARKER = "stance_judge"
STANCE_RESULTS = pl.Schema({
    "item_id": pl.String,
    "conversation_id": pl.String,
    "subset": pl.String,
    "split": pl.String,
    "system": pl.String,
    "question_key": pl.String,
    MARKER: pl.String,  # the judge model's name
    **{column(role, name): pl.Int8 for role in ROLES for name in NAMES},
    "raw_reply": pl.String,
    "cost": pl.Float64,
    "error": pl.String,
})


@dataclass(frozen=True)
class StancePrompt:
    """A stance prompt's sections and where they came from."""

    sections: dict[str, str]
    source: str

    def request(self, question: str, answer: str) -> AudioRequest:
        parts = fill(self.sections["user"], {"question": AudioClip(question), "answer": AudioClip(answer),
                                             "dimensions": dimension_lines()})
        return AudioRequest(self.sections["system"], tuple(parts))


def load_stance_prompt(prompt_file: str | os.PathLike | None = None) -> StancePrompt:
    """The bundled prompt or the user's file; ValueError naming what a file lacks."""
    if prompt_file is None:
        text = (resources.files("sdscore.protocols.naturalness") / "prompts" / BUNDLED_PROMPT).read_text("utf-8")
        sections, source = parse_sections(text, f"bundled {BUNDLED_PROMPT}"), f"bundled {BUNDLED_PROMPT}"
    else:
        sections, source = read_sections(prompt_file), str(prompt_file)
    check_sections(sections, SECTIONS, source)
    return StancePrompt(sections, source)


class StanceJudgeScorer:
    """Settings: StanceJudgeSettings (model, base_url, prompt_file, temperature; the endpoint, cache,
    parallelism, deadline and audio limits of AudioJudgeConfig)."""

    settings_class = StanceJudgeSettings

    def __init__(self, *args: Any, **settings: Any):
        """Positional settings fill model, base_url; see StanceJudgeSettings (checked: SettingsError)."""
        s = build(StanceJudgeSettings, *args, **settings)
        self.prompt = load_stance_prompt(s.prompt_file)
        self.model, self.audio_rate, self.max_request_bytes = s.model, s.audio_rate, s.max_request_bytes
        self.max_audio_seconds = s.max_audio_seconds or None
        self.client = configured_client(s, json_mode=False)

    @staticmethod
    def _problem(row: dict) -> str | None:
        if row.get("error") is not None:
            return row["error"]
        missing = [name for name in ("audio_path", "answer_audio_path") if not row.get(name)]
        if missing:
            return f"the stance judge needs the question and the answer clip; {' and '.join(missing)} empty"
        return None

    def _ask(self, row: dict) -> tuple[dict | None, str | None, float | None, str | None]:
        """(ratings, raw reply, cost, error) of one row."""
        try:
            request = self.prompt.request(row["audio_path"], row["answer_audio_path"])
            messages = request.messages(self.audio_rate, self.max_request_bytes, self.max_audio_seconds)
            result = self.client.complete(messages, parse=parse_stances)
        except ReplyError as error:
            return None, error.raw, None, str(error)
        except SdscoreError as error:
            return None, None, None, str(error)
        return result.parsed, result.content, result.cost, None

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        records = rows.to_dicts()
        problems = [self._problem(row) for row in records]
        asked = [row for row, problem in zip(records, problems) if problem is None]
        with ThreadPoolExecutor(max_workers=self.client.concurrency, thread_name_prefix="sdscore-stances") as pool:
            replies = dict(zip(map(id, asked), pool.map(self._ask, asked)))
        out = []
        for row, problem in zip(records, problems):
            result: dict[str, Any] = {
                "item_id": row.get("item_id"), "conversation_id": row.get("conversation_id"),
                "subset": row.get("subset"), "split": row.get("split"), "system": row.get("system") or HUMAN_SYSTEM, "question_key": question_key(row),
                MARKER: self.model, "error": problem,
            }
            if problem is None:
                ratings, raw, cost, error = replies[id(row)]
                result.update(raw_reply=raw, cost=cost, error=error)
                for role, values in (ratings or {}).items():
                    result.update({column(role, name): value for name, value in values.items()})
            out.append(result)
        return pl.DataFrame(out, schema=STANCE_RESULTS)

    def close(self) -> None:
        self.client.close()
