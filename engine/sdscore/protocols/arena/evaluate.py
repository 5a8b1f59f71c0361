"""arena (S2S-Arena): ratings and judging biases from a battles manifest — the evaluate step.

The manifest already holds each verdict, so `evaluate_arena` turns it into online Elo (overall and
per domain), Bradley–Terry ratings with bootstrap 95 % CIs, the pairwise win-rate matrix, position
bias and length bias — per judge, never pooled silently — and the judges' agreement with human
verdicts and with themselves (S2S-Arena Table 6).
Answer lengths missing from the manifest are read from the answers' audio (answer_lengths.py).

The one scoring pass is a speech-model judge (`sdscore score arena --judge openai`, scorer.py);
`eval arena` reads its results as battles of the judge beside the manifest's (judge_battles.py).
"""

from __future__ import annotations

import os

import polars as pl

from sdscore.atomic_write import write_json
from sdscore.errors import ManifestError
from sdscore.metrics._inputs import nonfinite_report
from sdscore.metrics.battle_agreement import (
    inter_annotator_agreement,
    judge_human_agreement,
    repeat_consistency,
    swap_consistency,
)
from sdscore.metrics.ratings import (
    RatingsDivergeError,
    bootstrap_bradley_terry,
    length_bias,
    online_elo,
    online_elo_by,
    pairwise_win_rate,
    position_bias,
)
from sdscore.protocols.arena.answer_lengths import with_answer_durations
from sdscore.protocols.arena.judge_battles import read_battles

HUMAN = "human"
UNKNOWN_JUDGE = "unknown"


def _ratings(battles: pl.DataFrame, *, n_boot: int, seed: int, l2: float) -> dict:
    """Ratings and biases of one set of battles (one judge's, or pooled when asked)."""
    bt = bootstrap_bradley_terry(battles, n_boot=n_boot, seed=seed, l2=l2)
    has = lambda column: column in battles.columns and battles[column].null_count() < battles.height  # noqa: E731
    result = {
        "n_battles": battles.height,
        "elo": online_elo(battles),
        "bradley_terry": {
            row["model"]: {"rating": row["rating"], "ci95": [row["lower"], row["upper"]]}
            for row in bt.iter_rows(named=True)
        },
        "win_rate": {
            row.pop("model"): {k: v for k, v in row.items() if v is not None}
            for row in pairwise_win_rate(battles).iter_rows(named=True)
        },
        "position_bias": position_bias(battles, "prompt_id" if has("prompt_id") else None),
        "length_bias": None,
        "elo_by_domain": online_elo_by(battles.filter(pl.col("domain").is_not_null()), "domain")
        if has("domain")
        else None,
    }
    if has("length_a") and has("length_b"):
        lengths = battles.filter(pl.col("length_a").is_not_null() & pl.col("length_b").is_not_null()
                                 & pl.col("length_a").cast(pl.Float64).is_finite()
                                 & pl.col("length_b").cast(pl.Float64).is_finite())  # NaN/inf: nonfinite_excluded
        result["length_bias"] = length_bias(lengths)
    return result


def evaluate_arena(battles: pl.DataFrame, *, n_boot: int = 1000, seed: int = 0, l2: float = 0.0,
                   judge: str | None = None, pool_judges: bool = False) -> dict:
    """All arena statistics of a battles frame (BATTLES schema) as one JSON-ready dict.

    Battles judged by different judges (the `judge` column: "human" or a model's name; null counts
    as "unknown") are never pooled silently. The top-level ratings are those of `judge` (default:
    the only judge, else "human"); `by_judge` holds every judge's own ratings, `judge_agreement`
    each judge against the human verdicts (accuracy and Cohen's κ, with and without ties) and its
    self-consistency (repeated battles, swapped positions), `inter_annotator` the agreement among
    several human verdicts on one battle. `pool_judges=True` rates all battles together instead.
    Lengths the battles lack are read from audio_a_path / audio_b_path; files that fail are `warnings`.
    """
    battles, warnings = with_answer_durations(battles)
    judged = battles.with_columns(pl.col("judge").fill_null(UNKNOWN_JUDGE)) if "judge" in battles.columns \
        else battles.with_columns(pl.lit(UNKNOWN_JUDGE).alias("judge"))
    judges = sorted(judged["judge"].unique().to_list())
    if pool_judges:
        chosen = None
    elif judge is not None:
        if judge not in judges:
            raise ValueError(f"no battles judged by {judge!r}; the battles' judges are {', '.join(judges)}")
        chosen = judge
    elif len(judges) == 1:
        chosen = judges[0]
    elif HUMAN in judges:
        chosen = HUMAN
    else:
        raise ValueError(f"the battles come from {len(judges)} judges ({', '.join(judges)}); ratings are per "
                         f"judge: name one (--judge NAME) or pool them on purpose (--pool-judges)")
    rate = lambda name: _ratings(judged.filter(pl.col("judge") == name), n_boot=n_boot, seed=seed, l2=l2)  # noqa: E731
    by_judge, unavailable = {}, {}
    for name in judges if len(judges) > 1 or chosen is not None else []:
        try:
            by_judge[name] = rate(name)
        except RatingsDivergeError as error:  # one judge's verdicts admit no ratings: the others still do
            if name == chosen:
                raise RatingsDivergeError(f"judge {name!r} (the headline ratings): {error}") from None
            unavailable[name] = str(error)
            by_judge[name] = {"n_battles": int((judged["judge"] == name).sum()), "ratings_unavailable": str(error)}
    top = _ratings(judged, n_boot=n_boot, seed=seed, l2=l2) if chosen is None else by_judge[chosen]
    result = {"judge": "pooled" if chosen is None else chosen, "judges": judges, **top}
    if unavailable:
        result["ratings_unavailable"] = unavailable
    if warnings:
        result["warnings"] = warnings
    nonfinite = nonfinite_report(battles, ("length_a", "length_b"), ("battle_id",))
    if nonfinite is not None:  # left out of length_bias only
        result["nonfinite_excluded"] = {**nonfinite, "metrics": ["length_bias"]}
    if len(judges) > 1:
        result["by_judge"] = by_judge
    if "prompt_id" in judged.columns:
        result["judge_agreement"] = {
            name: {"vs_human": judge_human_agreement(judged, name) if HUMAN in judges and name != HUMAN else None,
                   "repeated": repeat_consistency(judged, name), "swapped": swap_consistency(judged, name)}
            for name in judges}
        result["inter_annotator"] = inter_annotator_agreement(judged) if HUMAN in judges else None
    return result


def run_eval(battles_path: str | os.PathLike, out_json: str | os.PathLike, **options) -> dict:
    """Read a battles manifest (or an audio judge's results), evaluate it and write METRICS.json atomically."""
    battles, notes = read_battles(battles_path)
    if battles.height == 0:
        raise ManifestError(f"{battles_path}: holds no battles (no rows); there is nothing to rate")
    metrics = {**evaluate_arena(battles, **options), **notes}
    write_json(out_json, metrics)
    return metrics


def evaluate_files(results: list, out_json: str | os.PathLike, *, plot=None, seed: int = 0,
                   judge: str | None = None, pool_judges: bool = False, l2: float = 0.0) -> dict:
    """`sdscore eval arena` (the registry's uniform signature plus the judge choice and the ridge; no plot)."""
    if plot is not None:
        raise ValueError("eval arena draws no plot; leave out --plot")
    return run_eval(results[0], out_json, seed=seed, judge=judge, pool_judges=pool_judges, l2=l2)

