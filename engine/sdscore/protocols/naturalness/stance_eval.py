"""Interpersonal stances in `sdscore eval naturalness`: Table III's Stances section and Fig. 5, from the
stance judge's results (stance_scorer.STANCE_RESULTS; `score naturalness --judge openai`).

Per system, over its rows without an error (a row's 20 ratings are all there or it has an error):
- same / more negative / more positive % per dimension: the answer's rating equal to, below or
  above the question's on that dimension (SPEARBench: "the same stance as the question"), and pooled
  over every (row, dimension) pair — Table III's Same stance % / More negative % / More positive %;
- positive % per dimension: answers rated +1 (Fig. 5's point plot), beside the questions' own;
- the same comparison against the reference (human) answer to the same question (rows paired by
  question_key; a question the reference answered more than once is left out), which the paper
  describes in words ("maintain the same interpersonal behavior as the original human responses").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from sdscore.protocols.naturalness.stance_dimensions import NAMES, column

NO_STANCES = "no stance results given (sdscore score naturalness --judge openai writes them)"
#: Table III's Stances section: (key, which comparison)
TABLE_KEYS = {"stance_same_pct": "same", "stance_more_negative_pct": "more_negative",
              "stance_more_positive_pct": "more_positive"}


def _shares(answer: np.ndarray, other: np.ndarray) -> dict[str, dict]:
    """same / more_negative / more_positive % of answer vs other (equal-shaped int arrays), pooled."""
    n = int(answer.size)
    return {"same": {"value": 100.0 * float((answer == other).mean()), "n": n},
            "more_negative": {"value": 100.0 * float((answer < other).mean()), "n": n},
            "more_positive": {"value": 100.0 * float((answer > other).mean()), "n": n}}


def _null(reason: str) -> dict[str, dict]:
    return {k: {"value": None, "n": 0, "reason": reason} for k in ("same", "more_negative", "more_positive")}


def _ratings(rows: pl.DataFrame, role: str) -> np.ndarray:
    return rows.select([pl.col(column(role, name)).cast(pl.Int64) for name in NAMES]).to_numpy()


def _scored(rows: pl.DataFrame) -> pl.DataFrame:
    complete = pl.all_horizontal([pl.col(column(r, n)).is_not_null() for r in ("question", "answer") for n in NAMES])
    return rows.filter(pl.col("error").is_null() & complete)


def _per_dimension(answer: np.ndarray, other: np.ndarray) -> dict[str, dict]:
    return {name: {k: v["value"] for k, v in _shares(answer[:, i], other[:, i]).items()}
            for i, name in enumerate(NAMES)}


def system_stances(rows: pl.DataFrame, reference: pl.DataFrame | None, reference_name: str) -> dict:
    """One system's stance values (rows: its STANCE_RESULTS rows; reference: the reference system's, or
    None for the reference itself or when it is absent)."""
    scored = _scored(rows)
    out: dict = {"n_rows": rows.height, "n_scored": scored.height, "n_errors": rows.height - scored.height,
                 "judges": sorted(set(rows["stance_judge"].drop_nulls().to_list()))}
    if scored.height == 0:
        why = (f"all {rows.height} stance rows have an error" if rows.height else NO_STANCES)
        out.update(vs_question=_null(why), per_dimension=None, positive_pct=None, question_positive_pct=None)
        return out
    answer, question = _ratings(scored, "answer"), _ratings(scored, "question")
    out["vs_question"] = _shares(answer, question)
    out["per_dimension"] = _per_dimension(answer, question)
    out["positive_pct"] = {name: 100.0 * float((answer[:, i] == 1).mean()) for i, name in enumerate(NAMES)}
    out["question_positive_pct"] = {name: 100.0 * float((question[:, i] == 1).mean())
                                    for i, name in enumerate(NAMES)}
    if reference is not None:
        ref = _scored(reference).filter(pl.col("question_key").is_not_null())
        once = ref.group_by("question_key").len().filter(pl.col("len") == 1)["question_key"]
        ref = ref.filter(pl.col("question_key").is_in(once.implode()))
        ref = ref.select("question_key", *[pl.col(column("answer", n)).alias(f"ref_{n}") for n in NAMES])
        paired = scored.filter(pl.col("question_key").is_not_null()).join(ref, on="question_key")
        if paired.height:
            mine = _ratings(paired, "answer")
            theirs = paired.select([pl.col(f"ref_{n}").cast(pl.Int64) for n in NAMES]).to_numpy()
            out["vs_reference"] = {**_shares(mine, theirs), "per_dimension": _per_dimension(mine, theirs),
                                   "n_questions": paired.height}
        else:
            out["vs_reference"] = {**_null(f"no question answered by both this system and {reference_name!r}"),
                                   "per_dimension": None, "n_questions": 0}
    return out


def stance_metrics(stances: pl.DataFrame | None, systems: Sequence[str], reference_system: str) -> dict[str, dict]:
    """{system: its stance values} for every system named (a system without stance rows gets nulls
    with the reason)."""
    if stances is None:
        stances = pl.DataFrame(schema={"system": pl.String})
    reference = (stances.filter(pl.col("system") == reference_system)
                 if stances.height and reference_system in set(stances["system"].to_list()) else None)
    out = {}
    for name in systems:
        rows = stances.filter(pl.col("system") == name) if stances.height else None
        if rows is None or rows.height == 0:
            out[name] = {"n_rows": 0, "n_scored": 0, "n_errors": 0, "judges": [], "vs_question": _null(NO_STANCES),
                         "per_dimension": None, "positive_pct": None, "question_positive_pct": None}
            continue
        out[name] = system_stances(rows, None if name == reference_system else reference, reference_system)
    return out


def table_values(stance: dict) -> dict[str, dict]:
    """Table III's three Stances values of one system's stance_metrics entry."""
    return {key: stance["vs_question"][which] for key, which in TABLE_KEYS.items()}


def plot_stances(metrics: dict[str, dict], path: str | os.PathLike) -> Path:
    """Fig. 5: per dimension, the % of each system's answers rated at the positive pole (a point plot,
    one colour per system); NoPlotData when no system has stance ratings."""
    from sdscore.report.naturalness_plots import NoPlotData, _colours, _figure, _save

    drawn = {name: m["positive_pct"] for name, m in metrics.items() if m.get("positive_pct")}
    if not drawn:
        raise NoPlotData(f"no stance ratings: {NO_STANCES}")
    figure, (axis,) = _figure(8.0, 3.6, 1)
    colours = _colours(list(metrics))
    x = np.arange(len(NAMES))
    width = 0.6 / max(len(drawn), 1)
    for k, (name, values) in enumerate(drawn.items()):
        offset = (k - (len(drawn) - 1) / 2) * width
        axis.plot(x + offset, [values[n] for n in NAMES], marker="o", linestyle=":", color=colours[name], label=name)
    axis.set_xticks(x, NAMES, rotation=30, ha="right")
    axis.set_ylabel("answers at the positive pole (%)")
    axis.set_ylim(-2, 102)
    axis.set_title("Interpersonal stances (Fig. 5)")
    axis.legend(fontsize="small", loc="best")
    return _save(figure, path)
