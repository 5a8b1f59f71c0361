"""StanceBench's 10 interpersonal-stance dimensions and their poles, as SPEARBench §III-C6 rates them.

The dimensions are the paper's list. It names three pole pairs (warm vs cold, polite vs rude,
focused vs withdrawn); the other poles are our reading of the dimension names (StanceBench's own
wording is not in the SPEARBench paper). A rating is -1 (the negative pole), 0 (neither) or +1 (the
positive pole); "more positive" / "more negative" compare an answer's rating with the question's.
"""

from __future__ import annotations

#: (dimension, positive pole, negative pole), in the paper's order
DIMENSIONS: tuple[tuple[str, str, str], ...] = (
    ("politeness", "polite", "rude"),
    ("empathy", "empathetic", "indifferent"),
    ("warmth", "warm", "cold"),
    ("calmness", "calm", "agitated"),
    ("deference", "deferential", "domineering"),
    ("sociability", "sociable", "unsociable"),
    ("organization", "organized", "disorganized"),
    ("focus", "focused", "withdrawn"),
    ("honesty", "honest", "deceptive"),
    ("disinhibition", "restrained", "disinhibited"),
)
NAMES: tuple[str, ...] = tuple(name for name, _, _ in DIMENSIONS)
#: the two rated speakers of a request
ROLES = ("question", "answer")
RATINGS = (-1, 0, 1)


def column(role: str, dimension: str) -> str:
    """The results column of one role's rating on one dimension: stance_question_warmth."""
    return f"stance_{role}_{dimension}"


def dimension_lines() -> str:
    """The dimensions as the bundled prompt lists them: "- warmth: +1 warm, -1 cold"."""
    return "\n".join(f"- {name}: +1 = {positive}, -1 = {negative}, 0 = neither" for name, positive, negative in DIMENSIONS)
