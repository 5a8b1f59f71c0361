"""Pairwise preference accuracy of a reward model (SDiaReward, ESDR-Bench Table 2).

A pair is correct iff r(chosen) > r(rejected); a tie counts as wrong. Results frames are the
reward scorer's output: pair_id, criterion ("modality" | "colloquialness"), subset, category,
chosen_reward, rejected_reward, margin, correct, error. Rows whose ``error`` is set (not null,
not "") are left out of every accuracy and counted in ``n_errors``: an unscored pair has no
ordering, and counting it as wrong would mix model quality with pipeline failures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from sdscore.metrics._inputs import (
    as_1d,
    as_bool_1d,
    as_finite_1d,
    check_columns,
    check_same_length,
    drop_error_rows,
    error_mask,
    mean_or_none,
)

MODALITY = "modality"
COLLOQUIALNESS = "colloquialness"
CRITERIA = (MODALITY, COLLOQUIALNESS)


def pairwise_correct(chosen, rejected) -> np.ndarray:
    """Boolean ``[n]``: chosen reward strictly above rejected reward (ties are wrong)."""
    chosen = as_finite_1d(chosen, "chosen")
    rejected = as_finite_1d(rejected, "rejected")
    check_same_length(chosen=chosen, rejected=rejected)
    return chosen > rejected


def _row_name(frame: pl.DataFrame, position: int) -> str:
    if "pair_id" in frame.columns:
        return f"pair_id {frame['pair_id'][position]!r}"
    return f"row {position}"


def correct_column(frame: pl.DataFrame) -> np.ndarray:
    """Per-row correctness of a results frame (error rows must already be removed).

    Recomputed from chosen_reward/rejected_reward when present (the definition); a ``correct``
    column that disagrees with it raises ValueError, since it means the scorer used another rule.
    Without reward columns the ``correct`` column is used as given.
    """
    if "chosen_reward" in frame.columns and "rejected_reward" in frame.columns:
        chosen = frame["chosen_reward"].cast(pl.Float64).fill_null(float("nan")).to_numpy()
        rejected = frame["rejected_reward"].cast(pl.Float64).fill_null(float("nan")).to_numpy()
        bad = np.flatnonzero(~(np.isfinite(chosen) & np.isfinite(rejected)))
        if bad.size:
            raise ValueError(
                f"{_row_name(frame, int(bad[0]))} has a missing or non-finite reward "
                f"(chosen {chosen[bad[0]]}, rejected {rejected[bad[0]]}) but no error"
            )
        correct = chosen > rejected
        if "correct" in frame.columns:
            given = frame["correct"]
            mismatch = np.flatnonzero(given.is_null().to_numpy() | (given.fill_null(False).to_numpy() != correct))
            if mismatch.size:
                raise ValueError(
                    f"{_row_name(frame, int(mismatch[0]))}: column correct is {given[int(mismatch[0])]} but "
                    f"chosen_reward > rejected_reward is {bool(correct[mismatch[0]])}"
                )
        return correct
    if "correct" not in frame.columns:
        raise ValueError(f"results frame needs chosen_reward and rejected_reward, or correct; it has {frame.columns}")
    nulls = np.flatnonzero(frame["correct"].is_null().to_numpy())
    if nulls.size:
        raise ValueError(f"{_row_name(frame, int(nulls[0]))} has a null correct but no error")
    return as_bool_1d(frame["correct"], "correct")


def preference_accuracy(data, rejected=None, *, by: str | Sequence[str] | None = None):
    """Fraction of pairs ranked correctly.

    ``preference_accuracy(chosen, rejected)`` on two reward arrays gives a float.
    ``preference_accuracy(results)`` on a results frame gives a float over rows without error;
    with ``by`` (column name or names) it gives a frame ``[*by, n, accuracy]`` sorted by ``by``.
    """
    if isinstance(data, pl.DataFrame):
        if rejected is not None:
            raise ValueError("rejected is only for arrays; a results frame carries its own reward columns")
        frame, _ = drop_error_rows(data)
        keys = [by] if isinstance(by, str) else list(by or [])
        check_columns(frame, keys, "results")
        scored = pl.DataFrame({"correct": correct_column(frame)}).hstack(frame.select(keys))
        if not keys:
            if scored.height == 0:
                raise ValueError("results frame has no rows without error; accuracy is undefined")
            return float(scored["correct"].mean())
        grouped = scored.group_by(keys).agg(pl.len().cast(pl.Int64).alias("n"), pl.col("correct").mean().alias("accuracy"))
        return grouped.sort(keys)
    if rejected is None:
        raise ValueError("preference_accuracy(chosen, rejected) needs rejected rewards with an array of chosen rewards")
    if by is not None:
        raise ValueError("by= needs a results frame, not arrays")
    correct = pairwise_correct(data, rejected)
    if correct.size == 0:
        raise ValueError("no pairs given; accuracy is undefined")
    return float(correct.mean())


def reward_summary(results: pl.DataFrame) -> dict:
    """ESDR-Bench Table 2 from a results frame; accuracies are fractions in [0, 1].

    Keys: ``subsets`` {subset: {criterion, n, n_errors, accuracy}} in order of first appearance;
    ``modality_micro`` (all modality pairs); ``modality_macro`` (unweighted mean over modality
    subsets that have scored pairs); ``colloquial`` (all colloquialness pairs); ``overall_micro``
    (all pairs); ``overall_macro`` = mean(modality_macro, colloquial); ``n``; ``n_errors``.
    A value with no pairs behind it is None (JSON null), never NaN.

    ``criterion`` and ``subset`` are optional (results written by other tools): without
    ``subset`` there is no per-subset table; without ``criterion`` (null there is refused) the
    per-criterion values and both macros are None and subsets carry criterion None.
    """
    has_subset, has_criterion = "subset" in results.columns, "criterion" in results.columns
    if has_criterion:
        bad = results.filter(~pl.col("criterion").is_in(list(CRITERIA)) | pl.col("criterion").is_null())
        if bad.height:
            raise ValueError(f"criterion has unknown value {bad['criterion'][0]!r}; expected one of {list(CRITERIA)}")
    else:
        results = results.with_columns(pl.lit(None, dtype=pl.String).alias("criterion"))
    if has_subset and results["subset"].null_count():
        raise ValueError("subset has null values; every pair needs a subset name")
    if has_subset and has_criterion:
        shared = results.group_by("subset").agg(pl.col("criterion").n_unique().alias("k")).filter(pl.col("k") > 1)
        if shared.height:
            raise ValueError(f"subset {shared['subset'][0]!r} appears under both criteria; subsets must be per criterion")
    if not has_subset:
        results = results.with_columns(pl.lit(None, dtype=pl.String).alias("subset"))

    failed = error_mask(results)
    frame = results.filter(pl.Series(~failed))
    correct = correct_column(frame)
    criterion = frame["criterion"].to_numpy()
    subset = frame["subset"].to_numpy()
    all_subsets = results["subset"].to_numpy()

    subsets: dict[str, dict] = {}
    named = results.select("subset", "criterion").unique(maintain_order=True).iter_rows() if has_subset else ()
    for name, crit in named:
        mask = subset == name
        subsets[name] = {
            "criterion": crit,
            "n": int(mask.sum()),
            "n_errors": int((failed & (all_subsets == name)).sum()),
            "accuracy": mean_or_none(correct[mask]),
        }
    modality_accs = [s["accuracy"] for s in subsets.values() if s["criterion"] == MODALITY and s["n"] > 0]
    modality_macro = float(np.mean(modality_accs)) if modality_accs else None
    colloquial = mean_or_none(correct[criterion == COLLOQUIALNESS])
    return {
        "n": int(frame.height),
        "n_errors": int(failed.sum()),
        "subsets": subsets,
        "modality_micro": mean_or_none(correct[criterion == MODALITY]),
        "modality_macro": modality_macro,
        "colloquial": colloquial,
        "overall_micro": mean_or_none(correct),
        "overall_macro": None if modality_macro is None or colloquial is None else (modality_macro + colloquial) / 2,
    }


def margin_buckets(margins, correct, edges) -> pl.DataFrame:
    """Accuracy per margin bucket ``[lower, upper)`` (the last one closed), for confidence analysis.

    ``margins`` is whatever confidence the caller bins (e.g. |r_chosen − r_rejected|); ``edges``
    strictly increasing, ≥ 2 of them; use ±inf to catch everything. Returns a frame with lower,
    upper, n, accuracy (null where a bucket is empty).
    """
    margins = as_1d(margins, "margins", dtype=np.float64)
    correct = as_bool_1d(correct, "correct")
    check_same_length(margins=margins, correct=correct)
    edges = as_1d(edges, "edges", dtype=np.float64)
    if edges.size < 2 or np.isnan(edges).any() or not (np.diff(edges) > 0).all():
        raise ValueError(f"edges must be at least 2 strictly increasing numbers, got {edges.tolist()}")
    outside = np.flatnonzero(np.isnan(margins) | (margins < edges[0]) | (margins > edges[-1]))
    if outside.size:
        raise ValueError(
            f"margins[{outside[0]}] = {margins[outside[0]]} lies outside edges "
            f"[{edges[0]}, {edges[-1]}]; add -inf/inf edges to catch everything"
        )
    bucket = np.clip(np.searchsorted(edges, margins, side="right") - 1, 0, edges.size - 2)
    counts = np.bincount(bucket, minlength=edges.size - 1)
    hits = np.bincount(bucket, weights=correct.astype(np.float64), minlength=edges.size - 1)
    accuracy = [float(h / c) if c else None for h, c in zip(hits, counts)]
    return pl.DataFrame(
        {"lower": edges[:-1], "upper": edges[1:], "n": counts.astype(np.int64), "accuracy": accuracy},
        schema={"lower": pl.Float64, "upper": pl.Float64, "n": pl.Int64, "accuracy": pl.Float64},
    )

