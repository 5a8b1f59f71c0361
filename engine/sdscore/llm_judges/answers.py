"""Parsers of short judge answers: YES/NO, a list of turns ("Turn 3, Turn 5" / "None"), one option
letter (A/B/C) and a ranking of option letters ("A > B > C").

Models wrap answers in markdown, quotes, "Answer:" prefixes and explanations, and change case; the
parsers look through that. They refuse what stays ambiguous (YES and NO both given, two letters where
one is asked, a ranking that misses or repeats an option) with a ReplyError that carries the raw reply,
so the client can ask again and a row that still fails keeps what the model said.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

from sdscore.llm_judges.reply_error import ReplyError

_SHOWN = 200
_MARKUP = re.compile(r"[*_`#\"“”‘’«»\[\]]")
_PREFIX = re.compile(r"^\s*(?:final\s+)?(?:answer|response|verdict|output|result|ranking|choice)\s*[:\-–]\s*", re.I)
_WORD = re.compile(r"[a-z]+")


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _clean(text: object) -> str:
    """The reply without markdown emphasis, quotes, brackets and an "Answer:" prefix."""
    if not isinstance(text, str):
        raise ReplyError(f"reply content is {type(text).__name__}, expected text")
    cleaned = _MARKUP.sub(" ", text).strip()
    return _PREFIX.sub("", cleaned, count=1).strip()


def parse_yes_no(text: str) -> bool:
    """True for YES, False for NO. The first word decides when it is yes/no; otherwise exactly one of
    the two words must occur in the reply."""
    cleaned = _clean(text)
    words = _WORD.findall(cleaned.lower())
    if words and words[0] in ("yes", "no"):
        return words[0] == "yes"
    found = {w for w in words if w in ("yes", "no")}
    if len(found) == 1:
        return found == {"yes"}
    why = "both YES and NO" if found else "neither YES nor NO"
    raise ReplyError(f"a YES/NO answer was asked, the reply has {why}: {_shown(text)}", raw=text)


_NONE = re.compile(r"\b(?:none|no\s+turns?|all\s+(?:the\s+)?turns\s+are\s+consistent|nothing)\b", re.I)
_TURN_RUN = re.compile(
    r"\bturns?\s*(?:no\.?|number|#)?\s*(\d+(?:\s*(?:,\s*and\b|,|;|/|&|\band\b|\bor\b)\s*(?:turns?\s*)?#?\s*\d+)*)", re.I
)
_NUMBER_LIST = re.compile(r"^\s*\d+(?:\s*(?:,\s*and\b|,|;|/|&|\band\b)\s*\d+)*\s*[.!]?\s*$", re.I)


def parse_turns(text: str, n_turns: int) -> list[int]:
    """The turns a reply names, as sorted 0-based indices ([] for "None"); numbers in the reply are
    1-based. Refused: no turn and no "None", both a turn and "None", a turn outside 1..n_turns."""
    if isinstance(n_turns, bool) or not isinstance(n_turns, int) or n_turns < 1:
        raise ValueError(f"n_turns must be an integer >= 1, got {n_turns!r}")
    cleaned = _clean(text)
    numbers = [int(n) for run in _TURN_RUN.findall(cleaned) for n in re.findall(r"\d+", run)]
    if not numbers and _NUMBER_LIST.match(cleaned):
        numbers = [int(n) for n in re.findall(r"\d+", cleaned)]
    says_none = bool(_NONE.search(cleaned))
    if not numbers:
        if says_none:
            return []
        raise ReplyError(f"a list of turns or 'None' was asked, the reply has neither: {_shown(text)}", raw=text)
    if says_none and not re.match(r"\s*turns?\b", cleaned, re.I):
        raise ReplyError(f"the reply names turns and also says none: {_shown(text)}", raw=text)
    outside = sorted({n for n in numbers if not 1 <= n <= n_turns})
    if outside:
        raise ReplyError(f"the reply names turn {outside[0]}, outside 1..{n_turns}: {_shown(text)}", raw=text)
    return sorted({n - 1 for n in numbers})


def option_letters(n: int) -> tuple[str, ...]:
    """The option labels of n candidates: A, B, C, ... (at most 26)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 26:
        raise ValueError(f"the number of options must be an integer in 1..26, got {n!r}")
    return tuple(string.ascii_uppercase[:n])


def _check_letters(letters: Sequence[str]) -> tuple[str, ...]:
    letters = tuple(letters)
    if not letters or any(not (isinstance(x, str) and len(x) == 1 and x.isupper()) for x in letters) \
            or len(set(letters)) != len(letters):
        raise ValueError(f"letters must be distinct upper-case letters, got {letters!r}")
    return letters


def parse_choice(text: str, letters: Sequence[str] = ("A", "B", "C")) -> str:
    """The one option letter a reply picks. Read in turn: "Option X" (one letter only); a reply that
    opens with a letter and punctuation ("B.", "(c)", "A)"), or is only a letter; the upper-case
    standalone letters of the reply, of one kind only (so "A close call, but C" is refused)."""
    letters = _check_letters(letters)
    cleaned = _clean(text)
    allowed = "".join(letters)
    named = {m.upper() for m in re.findall(rf"\boption\s*\(?([{allowed}])\)?(?![A-Za-z])", cleaned, re.I)}
    if not named and not re.search(r"[>≻]", cleaned):
        head = re.match(rf"\(?([{allowed}])\)?(?:\s*$|\s*[.)!:,\-–](?!\w))", cleaned, re.I)
        if head:
            return head.group(1).upper()
        named = set(re.findall(rf"(?<![A-Za-z'])([{allowed}])(?![A-Za-z'])", cleaned))
    if len(named) == 1:
        return named.pop()
    choices = "/".join(letters)
    why = f"several options ({', '.join(sorted(named))})" if named else "no option letter"
    if re.search(r"[>≻]", cleaned) and not named:
        why = "a ranking"
    raise ReplyError(f"one of {choices} was asked, the reply has {why}: {_shown(text)}", raw=text)


_SEPARATOR = r"\s*(?:>>?|≻|→|->|=>|,|;|\bthen\b|\bfollowed\s+by\b)\s*"


def parse_ranking(text: str, letters: Sequence[str] = ("A", "B", "C")) -> list[str]:
    """The option letters best first, each exactly once: "A > B > C" (also ≻, →, commas) or a numbered
    list ("1. B", "2) A", ...)."""
    letters = _check_letters(letters)
    cleaned = _clean(text)
    allowed = "".join(letters)
    item = rf"(?:option\s*)?\(?([{allowed}])\)?(?![A-Za-z])"
    chain = re.compile(rf"(?<![A-Za-z]){item}(?:{_SEPARATOR}{item})+", re.I)
    found: list[str] = []
    for match in chain.finditer(cleaned):
        found = [x.upper() for x in re.findall(rf"(?<![A-Za-z])(?:option\s*)?\(?([{allowed}])\)?(?![A-Za-z])",
                                               match.group(0), re.I)]
        if len(found) >= 2:
            break
    if len(found) < 2:
        numbered = re.findall(rf"(?m)^\s*\d+\s*[.):]\s*(?:option\s*)?\(?([{allowed}])\)?(?![A-Za-z])", cleaned, re.I)
        found = [x.upper() for x in numbered]
    if sorted(found) != sorted(letters):
        got = " > ".join(found) if found else "no ranking"
        raise ReplyError(
            f"a ranking of {' > '.join(letters)} (each once) was asked, the reply has {got}: {_shown(text)}", raw=text
        )
    return found
