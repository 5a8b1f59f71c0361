"""LLMJudge: rates pairs with an LLM over an OpenAI-compatible chat endpoint.

Modes: ``blueprint`` (TRACE — each response's acoustic blueprint in the Fig. 7 layout),
``transcript`` (the ASR transcripts only) and ``audio`` (16 kHz PCM WAV clips as input_audio
parts, for audio-capable endpoints). Labels: ``typed`` (C/VQ/P, fused afterwards) or ``original``
(one overall 1 / 2 / tie, TRACE Tab. 1). drop_groups leaves blueprint feature groups out of the
prompt (TRACE's feature ablation, App. H). Items run on ``client.concurrency`` threads; a reply that
does not validate is asked again by the client, and an item that still fails carries its error (a
ReplyError with the last reply's raw text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from sdscore.errors import JudgeError, SdscoreError
from sdscore.llm_judges.audio_request import wav_bytes
from sdscore.llm_judges.client import ChatClient
from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.judge import blueprint_view as bv
from sdscore.protocols.judge.interface import (
    JudgeItem,
    Progress,
    Verdict,
    check_instruction_source,
    instruction_of,
)
from sdscore.protocols.judge.overall_replies import LABEL_MODES, parse_overall_reply
from sdscore.protocols.judge.prompts import PromptTemplate, load_prompt
from sdscore.protocols.judge.replies import parse_reply


class LLMJudge:
    """An LLM judge in one prompt mode; ``name`` defaults to ``llm-<mode>``."""

    #: results keep the raw text of a reply that never parsed (score_judge's raw_reply column)
    keeps_replies = True

    def __init__(
        self,
        client: ChatClient,
        mode: str = "blueprint",
        prompt: PromptTemplate | None = None,
        instruction_source: str = "text",
        name: str | None = None,
        max_audio_seconds: float | None = None,
        labels: str = "typed",
        drop_groups: str | Sequence[str] | None = None,
    ):
        self.client = client
        self.max_audio_seconds = max_audio_seconds  # audio mode: longer files fail their item
        if labels not in LABEL_MODES:
            raise ValueError(f"unknown label mode {labels!r}; expected one of {list(LABEL_MODES)}")
        self.prompt = prompt or load_prompt(mode, labels=labels)
        if self.prompt.mode != mode:
            raise ValueError(f"the prompt is for {self.prompt.mode} mode but the judge runs in {mode} mode")
        if self.prompt.labels != labels:
            raise ValueError(f"the prompt asks for {self.prompt.labels} labels but the judge reads {labels} labels")
        self.labels = labels
        self.drop_groups = bv.check_groups(drop_groups)
        if self.drop_groups and mode != "blueprint":
            raise ValueError(f"dropping blueprint feature groups needs the blueprint mode, not {mode}")
        self.mode = mode
        self.instruction_source = check_instruction_source(instruction_source)
        self.name = name or f"llm-{mode}"
        self.needs_blueprints = mode in ("blueprint", "transcript")
        self.needs_instruction_blueprint = instruction_source == "asr"

    def __repr__(self) -> str:
        return f"LLMJudge(name={self.name!r}, mode={self.mode!r}, labels={self.labels!r}, client={self.client!r})"

    def _wav(self, path: str) -> bytes:
        return wav_bytes(path, max_seconds=self.max_audio_seconds)

    def messages(self, item: JudgeItem) -> list[dict]:
        """The chat messages for one item; JudgeError when the item lacks what the mode needs."""
        instruction = instruction_of(item, self.instruction_source)
        if self.mode == "audio":
            if instruction is None and not item.instruction_path:
                raise JudgeError(f"item {item.item_id}: no instruction text and no instruction audio")
            fields = {
                "instruction": instruction,
                "instruction_audio": self._wav(item.instruction_path) if item.instruction_path else None,
                "audio_1": self._wav(item.audio1_path),
                "audio_2": self._wav(item.audio2_path),
            }
            return self.prompt.messages(fields)
        if instruction is None:
            hint = " (or use instruction_source='asr')" if self.instruction_source == "text" else ""
            raise JudgeError(f"item {item.item_id}: no instruction to state{hint}")
        if item.blueprint1 is None or item.blueprint2 is None:
            raise JudgeError(f"item {item.item_id}: the {self.mode} mode needs both responses' blueprints")
        if self.mode == "blueprint":
            responses = [json.dumps(bv.trace_view(b, self.drop_groups), ensure_ascii=False)
                         for b in (item.blueprint1, item.blueprint2)]
        else:
            responses = [bv.transcript_of(b) or "(empty transcript)" for b in (item.blueprint1, item.blueprint2)]
        return self.prompt.messages(
            {"instruction": instruction, "response_1": responses[0], "response_2": responses[1]}
        )

    def judge_one(self, item: JudgeItem) -> Verdict:
        """Ask the model about one item; JudgeError names the item and what failed."""
        parse = parse_reply if self.labels == "typed" else parse_overall_reply
        try:
            result = self.client.complete(self.messages(item), parse=parse)
        except JudgeError as error:
            message = str(error)
            message = message if message.startswith(f"item {item.item_id}:") else f"item {item.item_id}: {message}"
            if isinstance(error, ReplyError):  # keep what the model said
                raise ReplyError(message, raw=error.raw)
            raise JudgeError(message)
        except SdscoreError as error:
            raise JudgeError(f"item {item.item_id}: {error}") from error
        reply = result.parsed
        if self.labels == "original":
            return Verdict(None, None, None, reply["reasoning"], result.cost, overall=reply["overall"])
        return Verdict(
            reply["content"], reply["voice_quality"], reply["paralinguistics"], reply["reasoning"], result.cost
        )

    def judge_many(self, items: Sequence[JudgeItem], progress: Progress | None = None) -> list[Verdict | JudgeError]:
        """Judge items on client.concurrency threads, in input order."""
        out: list[Verdict | JudgeError | None] = [None] * len(items)
        stage = f"judge: {self.name}"
        with ThreadPoolExecutor(max_workers=self.client.concurrency, thread_name_prefix="sdscore-judge") as pool:
            futures = {pool.submit(self.judge_one, item): i for i, item in enumerate(items)}
            for done, future in enumerate(as_completed(futures), start=1):
                try:
                    out[futures[future]] = future.result()
                except JudgeError as error:
                    out[futures[future]] = error
                if progress is not None:
                    progress(stage, done, len(items))
        return out  # type: ignore[return-value]
