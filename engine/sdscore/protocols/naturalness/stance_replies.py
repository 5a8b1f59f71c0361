"""The parser of a stance judge's reply: the question's and the answer's rating on each of the 10
dimensions (stance_dimensions.py), each -1, 0 or +1.

The bundled prompt asks for JSON ``{"question": {"politeness": 1, ...}, "answer": {...}}``. Models
also fence it in markdown, add keys ("reasoning"), give a list of 10 ratings in the dimensions'
order, turn it around (``{"politeness": {"question": 1, "answer": 0}}`` or a list of such objects),
write a pole or "positive"/"neutral"/"negative" for the number, or answer in prose lines
("Answer - warmth: +1"); the parser reads all of those. It refuses, with a ReplyError carrying the
raw reply (so the client asks again and a row that still fails keeps what the model said), a reply
that misses a rating, holds one outside -1..+1, or rates one dimension twice differently.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from sdscore.llm_judges.reply_error import ReplyError
from sdscore.protocols.naturalness.stance_dimensions import DIMENSIONS, NAMES, ROLES

_SHOWN = 200
_ROLE_ALIASES = {
    "question": ("question", "question_speaker", "questioner", "asker", "speaker_question", "q", "speaker_1",
                 "first_speaker"),
    "answer": ("answer", "answer_speaker", "answerer", "respondent", "responder", "response", "speaker_answer", "a",
               "speaker_2", "second_speaker"),
}
_ROLE_OF = {alias: role for role, aliases in _ROLE_ALIASES.items() for alias in aliases}
_WRAPPERS = ("ratings", "stances", "stance", "scores", "result", "results", "output")
_WORDS = {"positive": 1, "pos": 1, "neutral": 0, "neither": 0, "none": 0, "negative": -1, "neg": -1}
_POLES = {name: {positive: 1, negative: -1} for name, positive, negative in DIMENSIONS}
_NUMBER = re.compile(r"^[+\-−]?\d+(?:\.\d+)?$")
_TOKEN = re.compile(r"[+\-−]?\d+(?:\.\d+)?|[a-z]+")
_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)```", re.S)
_MARKUP = re.compile(r"[*_`#\"“”‘’|>]")
_DIMENSION = re.compile(r"\b(" + "|".join(NAMES) + r")\b")
_ROLE_WORD = re.compile(r"\b(question|questioner|asker|answer|answerer|response|respondent)\b")

Ratings = dict[str, dict[str, int]]


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _key(text: Any) -> str:
    return re.sub(r"[\s\-]+", "_", str(text).strip().lower())


def rating_of(value: Any, dimension: str) -> int:
    """-1, 0 or +1 from a number, "+1", "positive"/"neutral"/"negative" or one of the dimension's poles
    (a string is read from its first number or word: "+1 (warm)"). ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{dimension}: {value!r} is not a rating (-1, 0 or +1)")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value not in (-1, 0, 1):
            raise ValueError(f"{dimension}: {value!r} is outside the ratings -1, 0, +1")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"{dimension}: a {type(value).__name__} is not a rating (-1, 0 or +1)")
    text = _MARKUP.sub(" ", value).strip().lower().replace("−", "-")
    tokens = _TOKEN.findall(text)
    if not tokens:
        raise ValueError(f"{dimension}: {value!r} is not a rating (-1, 0 or +1)")
    first = tokens[0]
    if _NUMBER.match(first):
        return rating_of(float(first), dimension)
    for word in tokens:
        if word in _POLES[dimension]:
            return _POLES[dimension][word]
        if word in _WORDS:
            return _WORDS[word]
    raise ValueError(f"{dimension}: {value!r} is not a rating (-1, 0 or +1, a pole of {dimension}, "
                     "or positive/neutral/negative)")


class _Collected:
    """Ratings gathered from a reply, refusing one dimension rated twice differently."""

    def __init__(self) -> None:
        self.ratings: Ratings = {role: {} for role in ROLES}

    def put(self, role: str, dimension: str, value: Any) -> None:
        rating = rating_of(value, dimension)
        known = self.ratings[role].get(dimension)
        if known is not None and known != rating:
            raise ValueError(f"{role} {dimension} is rated twice ({known:+d} and {rating:+d})")
        self.ratings[role][dimension] = rating

    def role_block(self, role: str, block: Any) -> None:
        """One role's ratings: {dimension: rating} or a list of 10 in the dimensions' order."""
        if isinstance(block, dict):
            for key, value in block.items():
                if _key(key) in NAMES:
                    self.put(role, _key(key), value)
        elif isinstance(block, list):
            if len(block) != len(NAMES):
                raise ValueError(f"the {role}'s list holds {len(block)} ratings; expected {len(NAMES)} "
                                 f"({', '.join(NAMES)})")
            for dimension, value in zip(NAMES, block):
                self.put(role, dimension, value)
        else:
            raise ValueError(f"the {role}'s ratings are a {type(block).__name__}, expected an object or a list")

    def dimension_block(self, dimension: str, block: Any) -> None:
        """One dimension's ratings: {"question": r, "answer": r}."""
        if not isinstance(block, dict):
            raise ValueError(f"{dimension}: {block!r} gives no question and answer ratings")
        for key, value in block.items():
            role = _ROLE_OF.get(_key(key))
            if role is not None:
                self.put(role, dimension, value)


def _from_json(value: Any, found: _Collected) -> None:
    """Ratings from a decoded JSON reply in any of the layouts the module docstring lists."""
    if isinstance(value, list):
        for item in value:
            if not isinstance(item, dict):
                raise ValueError("a list reply must hold one object per dimension")
            keys = {_key(k): v for k, v in item.items()}
            dimension = next((_key(keys[k]) for k in ("dimension", "name", "stance") if k in keys), None)
            if dimension not in NAMES:
                raise ValueError(f"a list item names no known dimension: {item!r}")
            found.dimension_block(dimension, item)
        return
    if not isinstance(value, dict):
        raise ValueError(f"the JSON reply is a {type(value).__name__}, expected an object")
    keys = {_key(k): v for k, v in value.items()}
    wrapped = [keys[k] for k in _WRAPPERS if k in keys and isinstance(keys[k], (dict, list))]
    roles = {_ROLE_OF[k]: v for k, v in keys.items() if k in _ROLE_OF}
    if not roles and not any(k in NAMES for k in keys) and len(wrapped) == 1:
        _from_json(wrapped[0], found)
        return
    for role, block in roles.items():
        found.role_block(role, block)
    for key, block in keys.items():
        if key in NAMES:
            found.dimension_block(key, block)
            continue
        for role in ROLES:  # flat keys: question_warmth / warmth_answer
            for dimension in NAMES:
                if key in (f"{role}_{dimension}", f"{dimension}_{role}"):
                    found.put(role, dimension, block)


def _json_candidates(text: str) -> list[str]:
    """The reply's fenced blocks, then its outermost {...} or [...] span."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    for opening, closing in (("{", "}"), ("[", "]")):
        start, end = text.find(opening), text.rfind(closing)
        if 0 <= start < end:
            candidates.append(text[start:end + 1])
    return candidates


def _role_in(text: str) -> str | None:
    match = _ROLE_WORD.search(text)
    if match is None:
        return None
    return "question" if match.group(1) in ("question", "questioner", "asker") else "answer"


def _from_prose(text: str, found: _Collected) -> None:
    """Ratings from lines: a role heading ("Question speaker:") then "warmth: +1" lines, or the role and
    the dimension on one line ("Answer warmth: cold"), or both roles on one ("warmth: question 1, answer 0")."""
    role = None
    for line in text.splitlines():
        line = _MARKUP.sub(" ", line).strip().lower().replace("−", "-")
        if not line:
            continue
        dimensions = _DIMENSION.findall(line)
        if not dimensions:
            role = _role_in(line) or role
            continue
        if len(set(dimensions)) > 1:
            continue  # a sentence about several dimensions is no rating
        dimension = dimensions[0]
        before, after = line.split(dimension, 1)
        pairs = re.findall(r"\b(question|answer)\b\s*[:=]?\s*([+\-]?\d+|[a-z]+)", after)
        if len(pairs) == 2:
            for word, value in pairs:
                found.put(word, dimension, value)
            continue
        line_role = _role_in(before) or role
        value = re.sub(r"^\s*(?:\(.*?\))?\s*[:=\-–]*\s*", "", after)
        if line_role is None or not value.strip():
            continue
        found.put(line_role, dimension, value)


def parse_stances(text: Any) -> Ratings:
    """{"question": {dimension: rating}, "answer": {...}} of a stance judge's reply; ReplyError (raw kept)
    unless all 20 ratings are there, each -1, 0 or +1."""
    if not isinstance(text, str):
        raise ReplyError(f"reply content is {type(text).__name__}, expected text")
    problems: list[str] = []
    for candidate in _json_candidates(text):
        try:
            decoded = json.loads(candidate)
        except ValueError:
            continue
        found = _Collected()
        try:
            _from_json(decoded, found)
        except ValueError as error:
            problems.append(str(error))
            continue
        if any(found.ratings.values()):
            return _complete(found.ratings, text)
    found = _Collected()
    try:
        _from_prose(text, found)
    except ValueError as error:
        problems.append(str(error))
    if problems and not all(found.ratings.values()):
        raise ReplyError(f"the stance reply does not read: {problems[0]}: {_shown(text)}", raw=text)
    return _complete(found.ratings, text)


def _complete(ratings: Ratings, text: str) -> Ratings:
    missing = [f"{role} {name}" for role in ROLES for name in NAMES if name not in ratings[role]]
    if len(missing) == len(ROLES) * len(NAMES):
        raise ReplyError(f"the stance reply holds no rating: {_shown(text)}", raw=text)
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise ReplyError(f"the stance reply misses {shown}: {_shown(text)}", raw=text)
    return {role: {name: ratings[role][name] for name in NAMES} for role in ROLES}
