"""The parser of a pairwise judge's answer: which of two dialogues it prefers, 1 or 2.

Judges answer "2", "Dialogue 1", "**Dialogue 2**", "The first one.", "Answer: second", "I prefer
dialogue 2 because ...", "Dialogue 1 sounds more natural than Dialogue 2", '{"better": 1}'. Read in
turn: a reply that opens with its answer (a number, "Dialogue N", "first"/"second", not followed by
"and"/"or"/"vs"); a labelled line ("Verdict: Dialogue 2") further on; a comparison "X is better / more ... than Y" (X wins); a preference verb or
adjective next to one dialogue ("prefer Dialogue 2", "Dialogue 1 is better"); otherwise the
dialogues the reply names, which must be exactly one. A tie, "equally", "neither", or a reply naming
neither or both without saying which wins is a ReplyError with the raw reply kept.
"""

from __future__ import annotations

import re

from sdscore.llm_judges.reply_error import ReplyError

_SHOWN = 200
_MARKUP = re.compile(r"[*_`#\"“”‘’«»\[\]{}()]")
_PREFIX = re.compile(
    r"^\s*(?:final\s+|my\s+|overall\s+)?(?:answer|response|verdict|output|result|choice|preference|winner|"
    r"better(?:\s+dialogue)?|preferred(?:\s+dialogue)?)\s*[:\-–=]\s*", re.I)
_NOUN = r"(?:dialogue|dialog|conversation|version|episode|option|recording|sample)"
_NUMBER = {"1": 1, "2": 2, "one": 1, "two": 2, "first": 1, "second": 2, "former": 1, "latter": 2}
# one reference to a dialogue: "Dialogue 2", "dialogue no. 1", "the first (dialogue|one)", "second", "1"
_REF = (rf"(?:{_NOUN}\s*(?:no\.?|number|#)?\s*(?P<n{{k}}>1|2|one|two)\b(?!\.\d)"
        rf"|(?:the\s+)?(?P<o{{k}}>first|second|former|latter)(?:\s+(?:{_NOUN}|one))?"
        rf"|(?P<d{{k}}>(?<![\w.])[12](?!\d|\.\d|\s*(?:-|to|/|out\s+of)\s*\d|\s*%|\s*(?:points?|stars?)\b)))")


def _ref(k: int) -> str:
    return _REF.replace("{k}", str(k))


_OPENING = re.compile(rf"^\s*(?:i\s+(?:would\s+)?(?:choose|pick|prefer|select)\s+)?(?:the\s+)?{_ref(0)}"
                      r"(?!\s*(?:,\s*)?(?:and|or|vs\.?|versus|nor|&|=|/|equally|tie)\b)"
                      r"(?:\s*$|[ \t]*\n|\s*[.!:;,\-–)]|\s+(?:is|was|sounds|seems|wins|one|dialogue|because|clearly|"
                      r"by\s+far|overall)\b)", re.I)
_LABELLED = re.compile(rf"(?:^|\n|[.!]\s)\s*(?:final\s+|my\s+|overall\s+)?(?:answer|verdict|choice|preference|winner|"
                       rf"better\s+dialogue|preferred\s+dialogue)\s*[:\-–=]\s*(?:the\s+)?{_ref(0)}", re.I)
_BETTER = r"(?:better|more|preferable|superior|stronger|nicer|the\s+winner|preferred)"
_COMPARISON = re.compile(rf"{_ref(0)}\s+(?:is|was|sounds|seems|feels|comes\s+across\s+as)\s+"
                         rf"(?:(?:much|far|clearly|slightly|a\s+bit|somewhat|noticeably|definitely)\s+)?"
                         rf"{_BETTER}\b[^.;!?]*?\bthan\s+(?:the\s+)?{_ref(1)}", re.I)
_VERB = re.compile(rf"\b(?:prefer|choose|pick|select|favou?r|go\s+with|vote\s+for)\s+(?:the\s+)?{_ref(0)}", re.I)
_IS_BETTER = re.compile(rf"{_ref(0)}\s+(?:is|was|sounds|seems)\s+(?:clearly\s+|definitely\s+)?(?:the\s+)?"
                        rf"(?:better|best|preferable|superior|winner|more\s+natural|more\s+colloquial|preferred)\b",
                        re.I)
_TIE = re.compile(r"\b(?:tie|tied|equally|equal|same\s+(?:quality|level)|no\s+preference|neither|"
                  r"can(?:'|no)?t\s+(?:decide|tell|choose)|cannot\s+(?:decide|tell|choose)|unable)\b", re.I)


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _value(match: re.Match, k: int) -> int:
    for group in (f"n{k}", f"o{k}", f"d{k}"):
        value = match.group(group)
        if value is not None:
            return _NUMBER[value.lower()]
    raise AssertionError("a reference matched with no value")  # the pattern always sets one group


def parse_dialogue_choice(text: str) -> int:
    """1 or 2: the dialogue a reply prefers (see the module docstring); ReplyError when it does not say."""
    if not isinstance(text, str):
        raise ReplyError(f"reply content is {type(text).__name__}, expected text")
    cleaned = _MARKUP.sub(" ", text).strip()
    cleaned = re.sub(r"^\s*(?:ok(?:ay)?|sure|alright)\s*[,.!]\s*", "", cleaned, flags=re.I)
    cleaned = _PREFIX.sub("", cleaned, count=1).strip()
    cleaned = re.sub(r"^\s*[:\-–]\s*", "", cleaned)
    opening = _OPENING.match(cleaned)
    if opening:
        return _value(opening, 0)
    labelled = {_value(m, 0) for m in _LABELLED.finditer(cleaned)}
    if len(labelled) == 1:
        return labelled.pop()
    comparison = _COMPARISON.search(cleaned)
    if comparison and _value(comparison, 0) != _value(comparison, 1):
        return _value(comparison, 0)
    stated = {_value(m, 0) for pattern in (_VERB, _IS_BETTER) for m in pattern.finditer(cleaned)}
    if len(stated) == 1:
        return stated.pop()
    named = {_value(m, 0) for m in re.finditer(_ref(0), cleaned, re.I)}
    if len(named) == 1 and not _TIE.search(cleaned):
        return named.pop()
    if _TIE.search(cleaned):
        why = "a tie or no preference"
    else:
        why = "both dialogues and no winner" if len(named) > 1 else "no dialogue number"
    raise ReplyError(f"a choice of dialogue 1 or 2 was asked, the reply has {why}: {_shown(text)}", raw=text)
