"""Validate an LLM judge's reply text into {content, voice_quality, paralinguistics, reasoning}.

Tolerant of surrounding whitespace and a Markdown code fence; strict on the labels, which must be
exactly one of "1", "2", "both_good", "both_bad" (JSON integers 1 and 2 are read as "1" and "2").
The authors' key names are accepted too: ``instruction_following_audio`` (their prompts' name for
paralinguistics) and Listing 2's ``prediction_content`` / ``prediction_vq`` / ``prediction_para``.
"""

from __future__ import annotations

import json
import re

from sdscore.llm_judges.reply_error import ReplyError
from sdscore.metrics.fusion import JUDGE_LABELS
from sdscore.protocols.judge.interface import DIMENSIONS

#: dimension → reply keys that carry its label, our name first
LABEL_KEYS = {
    "content": ("content", "prediction_content"),
    "voice_quality": ("voice_quality", "prediction_vq"),
    "paralinguistics": ("paralinguistics", "instruction_following_audio", "prediction_para"),
}
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```$", re.DOTALL)
_SHOWN = 200


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _label(reply: dict, dimension: str) -> str:
    present = [key for key in LABEL_KEYS[dimension] if key in reply]
    if not present:
        raise ReplyError(f"reply has no {dimension!r} label (keys: {sorted(reply)})")
    values = {key: reply[key] for key in present}
    if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
        raise ReplyError(f"reply gives {dimension} conflicting labels {values}")
    value = values[present[0]]
    if isinstance(value, int) and not isinstance(value, bool) and value in (1, 2):
        value = str(value)
    if isinstance(value, str):
        value = value.strip()
    if value not in JUDGE_LABELS:
        raise ReplyError(f"reply's {dimension} label {value!r} is not one of {list(JUDGE_LABELS)}")
    return value


def _reasoning(reply: dict) -> str:
    reasoning = reply.get("reasoning", "")
    if isinstance(reasoning, str):
        return reasoning.strip()
    return json.dumps(reasoning, ensure_ascii=False, sort_keys=True)


def parse_reply(text: str) -> dict[str, str]:
    """The reply's labels and reasoning; raise ReplyError saying what is wrong with it."""
    if not isinstance(text, str):
        raise ReplyError(f"reply content is {type(text).__name__}, expected text")
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        reply = json.loads(body)
    except json.JSONDecodeError as error:
        raise ReplyError(f"reply is not valid JSON ({error.msg} at char {error.pos}): {_shown(text)}") from None
    if not isinstance(reply, dict):
        raise ReplyError(f"reply is a JSON {type(reply).__name__}, expected an object: {_shown(text)}")
    parsed = {dimension: _label(reply, dimension) for dimension in DIMENSIONS}
    parsed["reasoning"] = _reasoning(reply)
    return parsed
