"""What a judge sees and returns: JudgeItem in, Verdict (or a JudgeError) out, one per item."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sdscore.errors import JudgeError
from sdscore.progress import Progress
from sdscore.protocols.judge.blueprint_view import transcript_of

#: The dimensions a judge rates, in TRACE's order (content C, voice quality VQ, paralinguistics P).
DIMENSIONS = ("content", "voice_quality", "paralinguistics")
#: Where the instruction stated in a prompt comes from: the manifest's text or the ASR transcript.
INSTRUCTION_SOURCES = ("text", "asr")

#: progress(stage, done, total), the same shape as the demo's and the CLI's progress callbacks.


@dataclass(frozen=True)
class JudgeItem:
    """One pair to judge: the instruction, the two responses, and their blueprints when built."""

    item_id: str
    audio1_path: str
    audio2_path: str
    instruction_text: str | None = None
    instruction_path: str | None = None
    blueprint1: dict[str, Any] | None = None
    blueprint2: dict[str, Any] | None = None
    instruction_blueprint: dict[str, Any] | None = None


@dataclass(frozen=True)
class Verdict:
    """A judge's labels for one item, its reasoning and what the reply cost (USD): typed labels per
    dimension (fused into the overall label), or, in the original-label mode, no dimension labels and
    one ``overall`` label "1" / "2" / "tie" as the judge gave it."""

    content: str | None
    voice_quality: str | None
    paralinguistics: str | None
    reasoning: str
    cost: float | None = None
    overall: str | None = None


class Judge(Protocol):
    """A judge rates many items; a failed item yields its JudgeError and the others go on. A judge
    with ``keeps_replies = True`` (the LLM judge) gets a raw_reply results column for replies that
    did not parse (a ReplyError's ``raw``)."""

    name: str
    needs_blueprints: bool
    needs_instruction_blueprint: bool

    def judge_many(
        self, items: Sequence[JudgeItem], progress: Progress | None = None
    ) -> list[Verdict | JudgeError]: ...


def check_instruction_source(source: str) -> str:
    """Return source if it is one of INSTRUCTION_SOURCES, else raise ValueError naming them."""
    if source not in INSTRUCTION_SOURCES:
        raise ValueError(f"unknown instruction_source {source!r}; expected one of {list(INSTRUCTION_SOURCES)}")
    return source


def instruction_of(item: JudgeItem, source: str) -> str | None:
    """The instruction to state: manifest text ("text") or the instruction audio's transcript ("asr")."""
    if source == "text":
        text = item.instruction_text
        return text.strip() if text and text.strip() else None
    if item.instruction_blueprint is None:
        raise JudgeError(f"item {item.item_id}: instruction_source='asr' needs the instruction audio's blueprint")
    return transcript_of(item.instruction_blueprint) or None
