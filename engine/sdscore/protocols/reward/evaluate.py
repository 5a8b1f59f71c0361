"""reward evaluation: Table 2 metrics (Micro/Macro over strata) and accuracy per |reward gap| bucket."""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from sdscore.atomic_write import write_json
from sdscore.corpus.results_file import read_results
from sdscore.errors import ManifestError
from sdscore.metrics._inputs import error_mask, nonfinite_mask, nonfinite_report
from sdscore.metrics.preference import correct_column, margin_buckets, reward_summary
from sdscore.protocols.reward.judge_positions import position_summary
from sdscore.protocols.reward.spec import SPEC

#: The results columns evaluation reads, typed (criterion and subset, both optional, are checked by reward_summary).
RESULT_COLUMNS = {"chosen_reward": pl.Float64, "rejected_reward": pl.Float64, "margin": pl.Float64,
                  "correct": pl.Boolean, "error": pl.String, "category": pl.String, "source": pl.String}

#: The scores whose NaN/±inf leave a row out of the metrics (counted under nonfinite_excluded).
NONFINITE_COLUMNS = ("chosen_reward", "rejected_reward")

#: |chosen − rejected| bucket edges for the confidence analysis (rewards are centred near 0).
MARGIN_EDGES = (0.0, 0.25, 0.5, 1.0, 2.0, float("inf"))


def accuracy_by(results: pl.DataFrame, column: str) -> dict | None:
    """{value: {n, n_errors, accuracy}} per value of `column` (null: "(none)"); None without the column."""
    if column not in results.columns or results[column].null_count() == results.height:
        return None
    failed = error_mask(results)
    groups = {}
    values = results[column].cast(pl.String).fill_null("(none)")
    for name in values.unique(maintain_order=True).to_list():
        mask = (values == name).to_numpy()
        scored = results.filter(pl.Series(mask & ~failed))
        groups[name] = {"n": int(mask.sum()), "n_errors": int((mask & failed).sum()),
                        "accuracy": float(correct_column(scored).mean()) if scored.height else None}
    return groups


def evaluate_reward(results: pl.DataFrame) -> dict:
    """Table 2 metrics, accuracy per category and per source (SDiaReward's per-category analysis)
    and per |reward gap| bucket; for a pairwise audio judge's results also its position bias.
    Rows without an error whose chosen or rejected reward is NaN or ±inf are left out of every metric
    and reported under ``nonfinite_excluded`` (how many, the first pair_ids), as error rows are counted."""
    scored_rows = results.filter(pl.Series(~error_mask(results)))
    nonfinite = nonfinite_report(scored_rows, NONFINITE_COLUMNS, SPEC.unique_key)
    if nonfinite is not None:
        results = results.filter(pl.Series(~(nonfinite_mask(results, NONFINITE_COLUMNS) & ~error_mask(results))))
    metrics = reward_summary(results)
    if nonfinite is not None:
        metrics["nonfinite_excluded"] = nonfinite
    metrics["by_category"] = accuracy_by(results, "category")
    metrics["by_source"] = accuracy_by(results, "source")
    positions = position_summary(results)  # an audio-LLM judge's results (score reward --judge openai)
    if positions is not None:
        metrics["judge_positions"] = positions
    scored = results.filter(pl.Series(~error_mask(results)))
    if scored.height and {"chosen_reward", "rejected_reward"} <= set(scored.columns):
        gap = np.abs(scored["chosen_reward"].to_numpy() - scored["rejected_reward"].to_numpy())
        buckets = margin_buckets(gap, correct_column(scored), MARGIN_EDGES)
        metrics["margin_buckets"] = [  # JSON has no infinity: an open upper edge is null
            {**b, "upper": None if np.isinf(b["upper"]) else b["upper"]} for b in buckets.to_dicts()
        ]
    return metrics


def run_eval(
    results_path: str | os.PathLike, out_json: str | os.PathLike, plot_path: str | os.PathLike | None = None
) -> dict:
    """`sdscore eval reward`: metrics of a results Parquet as JSON (atomic), and the violin/box PNG when asked."""
    results = read_results(results_path, RESULT_COLUMNS, required=("chosen_reward", "rejected_reward"),
                           add_absent=False, unique=SPEC.unique_key)
    if results.height == 0:
        raise ManifestError(f"{results_path}: the results hold no rows; there is nothing to evaluate")
    metrics = evaluate_reward(results)
    write_json(out_json, metrics)
    if plot_path is not None:
        from sdscore.report.reward_plots import plot_reward_distributions

        if "subset" not in results.columns:  # results from elsewhere: one group for every pair
            results = results.with_columns(pl.lit("all pairs").alias("subset"))
        plot_reward_distributions(results, plot_path, title=f"rewards per subset: {os.path.basename(results_path)}")
    return metrics


def evaluate_files(results: list, out_json: str | os.PathLike, *, plot=None, seed: int = 0) -> dict:
    """`sdscore eval reward` (the registry's uniform signature; seed is unused: no resampling)."""
    return run_eval(results[0], out_json, plot_path=plot)
