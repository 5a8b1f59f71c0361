"""Parser of a pairwise verdict: which of two answers, shown first and second, a judge prefers.

Judges say it many ways: "First one wins", "Second.", "A", "Response 2", "[[B]]", "Output 1 is
better", "Tie", "Both are equally good", in markdown or with an explanation after it. The parser
reads the verdict line ("Verdict: ..." / "Answer: ..." anywhere, else the first sentence) and, when
that names no one verdict, the whole reply; it refuses what stays ambiguous (both positions named,
nothing named, a tie when the prompt allows none) with a ReplyError that keeps the raw reply.
"""

from __future__ import annotations

import re

from sdscore.llm_judges.reply_error import ReplyError

FIRST, SECOND, TIE = "first", "second", "tie"
PREFERENCES = (FIRST, SECOND, TIE)

_SHOWN = 200
_MARKUP = re.compile(r"[*_`#\"“”‘’«»\[\]]")
_LABELLED = re.compile(
    r"(?:^|\n)[^\S\n]*(?:final\s+)?(?:answer|verdict|decision|judg(?:e?ment)|winner|choice|preference|result|output)"
    r"[^\S\n]*[:\-–][^\S\n]*([^\n]+)", re.I)
_SENTENCE = re.compile(r"^.*?(?:[.!?](?=\s|$)|\n|$)", re.S)
_NOUN = r"(?:answer|response|audio|output|option|candidate|clip|recording|model|assistant|reply|speaker|system)"
_ACTS = r"(?:is|wins|won|was|sounds|has|seems|performs|follows|answers|handles|better|clearly)"


def _position(word: str, number: str, letter: str) -> tuple[re.Pattern, re.Pattern]:
    """(case-insensitive words, case-sensitive letter) patterns naming one position."""
    words = re.compile(
        rf"\b{word}\b|\b{_NOUN}\s*(?:no\.?\s*|#\s*)?(?:{number}|{letter})\b(?!['’])|"
        rf"^\(?(?:{number}|{letter})\)?(?:\s*$|\s*[.):,!\-–](?!\w))", re.I)
    # a bare upper-case letter; "A" also opens sentences as an article, so it counts only before a
    # verb of judging or punctuation
    follow = rf"(?=\s*$|\s*[.,:;!)]|\s+{_ACTS}\b)" if letter == "a" else ""
    return words, re.compile(rf"(?<![\w'’]){letter.upper()}(?![\w'’]){follow}")


_FIRST = _position(r"(?:first|1st|former)", "1", "a")
_SECOND = _position(r"(?:second|2nd|latter)", "2", "b")
_TIE = re.compile(
    r"\bties?\b|\btied\b|\bdraw\b|\bequal(?:ly)?\b|\bneither\b|\bno\s+(?:clear\s+)?(?:winner|preference|difference)\b|"
    r"\bboth\s+(?:are\s+|answers\s+are\s+|responses\s+are\s+)?(?:equally\s+)?(?:good|bad|fine|poor|acceptable|"
    r"great|wrong|correct)\b|\bsame\s+(?:quality|level)\b", re.I)


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _kinds(text: str) -> set[str]:
    """The verdicts a piece of text names."""
    found = {kind for kind, (words, letter) in ((FIRST, _FIRST), (SECOND, _SECOND))
             if words.search(text) or letter.search(text)}
    return found | ({TIE} if _TIE.search(text) else set())


def _clean(text: object) -> str:
    if not isinstance(text, str):
        raise ReplyError(f"reply content is {type(text).__name__}, expected text")
    return _MARKUP.sub(" ", text).strip()


def parse_preference(text: str, allow_tie: bool = True) -> str:
    """"first", "second" or "tie" (only when allow_tie) from a judge's reply (see the module)."""
    cleaned = _clean(text)
    labelled = _LABELLED.search(cleaned)
    head = labelled.group(1) if labelled else _SENTENCE.match(cleaned).group(0)
    why = None
    for piece in (head.strip(), cleaned):
        kinds = _kinds(piece)
        if len(kinds) == 1:
            (kind,) = kinds
            if kind == TIE and not allow_tie:
                raise ReplyError(f"the prompt asks for the first or the second answer, the reply is a tie: "
                                 f"{_shown(text)}", raw=text)
            return kind
        if why is None and kinds:
            why = f"several verdicts ({', '.join(k for k in PREFERENCES if k in kinds)})"
    asked = "first, second or tie" if allow_tie else "first or second"
    raise ReplyError(f"a verdict ({asked}) was asked, the reply has {why or 'none'}: {_shown(text)}", raw=text)
