"""reward (SDiaReward / ESDR-Bench): the evaluate step over a scorer's results file.

Results hold one row per pair: pair_id, criterion, subset, category, chosen_reward,
rejected_reward, margin, correct, error (any scorer that writes these columns can be evaluated).
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from sdscore.atomic_write import write_json
from sdscore.metrics._inputs import error_mask
from sdscore.metrics.preference import correct_column, margin_buckets, reward_summary

#: |chosen − rejected| bucket edges for the confidence analysis (rewards are centred near 0).
MARGIN_EDGES = (0.0, 0.25, 0.5, 1.0, 2.0, float("inf"))


def evaluate_reward(results: pl.DataFrame) -> dict:
    """Table 2 metrics plus accuracy per |reward gap| bucket."""
    metrics = reward_summary(results)
    scored = results.filter(pl.Series(~error_mask(results)))
    if scored.height and {"chosen_reward", "rejected_reward"} <= set(scored.columns):
        gap = np.abs(scored["chosen_reward"].to_numpy() - scored["rejected_reward"].to_numpy())
        buckets = margin_buckets(gap, correct_column(scored), MARGIN_EDGES)
        metrics["margin_buckets"] = [  # JSON has no infinity: an open upper edge is null
            {**b, "upper": None if np.isinf(b["upper"]) else b["upper"]} for b in buckets.to_dicts()
        ]
    return metrics


def run_eval(results_path: str | os.PathLike, out_json: str | os.PathLike) -> dict:
    """`sdscore eval reward`: read a results Parquet, evaluate, write METRICS.json atomically."""
    metrics = evaluate_reward(pl.read_parquet(results_path))
    write_json(out_json, metrics)
    return metrics
