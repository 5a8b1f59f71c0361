"""Parse a judge's one overall verdict: TRACE's "original label" mode (Tab. 1, prompts of Tab. 9),
where the judge says which response is better, "1" or "2", or "tie", instead of typed labels per
dimension. The original SpeakBench labels are 1 / 2 / untyped tie, so this is the label set the
hackability comparison needs.

The bundled prompt asks for a JSON object {"reasoning", "label"}; models also answer in words, so
the parser reads, in turn:

1. a JSON object (bare or in a Markdown fence): the first of the keys ``label``, ``overall``,
   ``verdict``, ``winner``, ``answer`` (several must agree); the integers 1 and 2 are read as labels;
2. keyed statements anywhere ("Verdict: 2", "the winner is Audio 1", "Final answer: [[tie]]"),
   which must all give one label;
3. a reply that opens with its verdict ("Response 2 - it whispers as asked", "**Tie**",
   "I choose audio 1 because ...", "The second response is better");
4. one kind of statement in the text: "Response N is better / wins" or "equally good", "a tie".

A label is "1" / "2", optionally named ("Response 1", "Audio 2", "the first response"), or a tie:
"tie", "equal(ly ...)", "draw", "neither", "both", "same"; typed ties (both_good, both_bad) count as
"tie". Case, Markdown emphasis, quotes, brackets and trailing explanations are looked through. A
reply that stays ambiguous ("1 or 2", "Verdict: 1 ... Final answer: 2") or names no label is
refused with a ReplyError carrying the raw reply, so the client asks again and a row that still
fails keeps what the model said.
"""

from __future__ import annotations

import json
import re

from sdscore.llm_judges.reply_error import ReplyError

#: the label sets of the two reply modes
LABEL_MODES = ("typed", "original")
ORIGINAL_LABELS = ("1", "2", "tie")
#: JSON keys that carry the overall label, ours first
LABEL_KEYS = ("label", "overall", "verdict", "winner", "answer")
_REASONING_KEYS = ("reasoning", "explanation", "reason")

_SHOWN = 200
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```$", re.DOTALL)
_MARKUP = re.compile(r"[*_`#\"“”‘’«»\[\]]")
_NAMED = r"(?:response|audio|answer|assistant|option|clip|candidate|recording|model)"
# one label: a named or bare 1/2, the first/second one, or a tie word
_TOKEN = (
    rf"(?:(?:the\s+)?(?:first|second)\s+(?:{_NAMED}|one)"
    rf"|{_NAMED}\s*(?:no\.?|number|#)?\s*\(?[12]\)?(?![\w.]*\d)"
    r"|\(?[12]\)?(?![\w.]*\d)"
    r"|a\s+tie|tie[ds]?|draw|neither|same"
    r"|equal(?:ly\s+(?:good|bad|strong|weak|matched))?"
    r"|both(?:\s+(?:good|bad|equally\s+\w+|are\s+(?:good|bad|equal)))?)(?![a-z])"
)
_KEY = r"(?:label|verdict|answer|winner|overall(?:\s+label)?|decision|choice|preference|judge?ment|result|rating)"
_KEYED = re.compile(rf"\b(?:final\s+)?{_KEY}\s*(?:is\s*|:|=|-|–|—)\s*(?:that\s+)?(?:is\s+)?({_TOKEN})")
_LEAD = re.compile(
    rf"^(?:(?:i\s+(?:would\s+)?(?:choose|pick|prefer|select|go\s+with)|my\s+pick\s+is|it'?s)\s+)?({_TOKEN})"
)
_AFTER = r"(?:\s*$|\s*[.,;:!?)\-–—]|\s+(?:is|was|wins|because|since|as|clearly|sounds|follows|better|over)\b)"
_MORE = re.compile(rf"^\s*(?:,|/|&|\+|\band\b|\bor\b|\bvs\.?|\bversus\b|\bthan\b)\s*{_TOKEN}")
_WINS = re.compile(
    rf"({_NAMED}\s*(?:no\.?|number|#)?\s*[12]|(?:the\s+)?(?:first|second)\s+(?:{_NAMED}|one))"
    r"\s+(?:is\s+(?:clearly\s+|slightly\s+|much\s+|somewhat\s+)?(?:better|preferred|superior|the\s+winner)|wins)\b"
)
_TIES = re.compile(r"\b(?:it'?s\s+a\s+tie|a\s+tie|tie[ds]?|equally\s+(?:good|bad|strong|weak)|(?:are|is)\s+equal)\b")


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _clean(text: str) -> str:
    """Lower case without Markdown emphasis, quotes and brackets (``_`` becomes a space)."""
    return re.sub(r"[ \t]+", " ", _MARKUP.sub(" ", text)).strip().lower()


def _label_of(token: str) -> str:
    """The label a matched token names."""
    if re.search(r"\b1\b|first", token):
        return "1"
    if re.search(r"\b2\b|second", token):
        return "2"
    return "tie"


def label_from_value(value: object) -> str | None:
    """The label of a JSON value (1, 2, "1", "Response 2", "tie", "both_bad", ...); None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if value in (1, 2) else None
    if not isinstance(value, str):
        return None
    match = re.fullmatch(rf"\s*({_TOKEN})\s*[.!]?\s*", _clean(value))
    return _label_of(match.group(1)) if match else None


def _from_json(body: str, text: str) -> dict[str, str]:
    try:
        reply = json.loads(body)
    except json.JSONDecodeError as error:
        raise ReplyError(f"reply is not valid JSON ({error.msg} at char {error.pos}): {_shown(text)}", raw=text) from None
    if not isinstance(reply, dict):
        raise ReplyError(f"reply is a JSON {type(reply).__name__}, expected an object: {_shown(text)}", raw=text)
    present = [key for key in LABEL_KEYS if key in reply]
    if not present:
        raise ReplyError(f"reply has no overall label (keys: {sorted(reply)}; expected 'label'): {_shown(text)}",
                         raw=text)
    labels = {key: label_from_value(reply[key]) for key in present}
    bad = {key: reply[key] for key, label in labels.items() if label is None}
    if bad:
        raise ReplyError(f"reply's overall label {bad} is not one of {list(ORIGINAL_LABELS)}: {_shown(text)}",
                         raw=text)
    if len(set(labels.values())) > 1:
        raise ReplyError(f"reply gives conflicting overall labels {labels}: {_shown(text)}", raw=text)
    reasoning = next((reply[key] for key in _REASONING_KEYS if key in reply), "")
    if not isinstance(reasoning, str):
        reasoning = json.dumps(reasoning, ensure_ascii=False, sort_keys=True)
    return {"overall": labels[present[0]], "reasoning": reasoning.strip()}


def _from_words(body: str, text: str) -> str:
    """The label of a reply in words (steps 2-4 of the module doc); ReplyError (raw: text) when none or
    ambiguous."""
    cleaned = _clean(body)
    keyed = {_label_of(m.group(1)) for m in _KEYED.finditer(cleaned)}
    if len(keyed) > 1:
        raise ReplyError(f"reply states conflicting overall labels {sorted(keyed)}: {_shown(text)}", raw=text)
    if keyed:
        return keyed.pop()
    lead = _LEAD.match(cleaned)
    if lead and re.match(_AFTER, cleaned[lead.end():]):
        if _MORE.match(cleaned[lead.end():]):
            raise ReplyError(f"reply names more than one label: {_shown(text)}", raw=text)
        return _label_of(lead.group(1))
    found = {_label_of(m.group(1)) for m in _WINS.finditer(cleaned)}
    if _TIES.search(cleaned):
        found.add("tie")
    if len(found) == 1:
        return found.pop()
    why = f"both {' and '.join(sorted(found))}" if found else "no label"
    raise ReplyError(f"one overall label (1, 2 or tie) was asked, the reply has {why}: {_shown(text)}", raw=text)


def parse_overall_reply(text: str) -> dict[str, str]:
    """{"overall": "1" | "2" | "tie", "reasoning": ...} from a reply; ReplyError (with the raw reply)
    saying what is wrong otherwise. The reasoning of a reply in words is the whole reply."""
    if not isinstance(text, str):
        raise ReplyError(f"reply content is {type(text).__name__}, expected text")
    body = text.strip()
    if not body:
        raise ReplyError("reply is empty", raw=text)
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if body.startswith("{"):
        return _from_json(body, text)
    return {"overall": _from_words(body, text), "reasoning": text.strip()}
