"""The human-check sample of SDiaReward's Table 3: scored pairs in four buckets for annotators.

From a reward results file (one row per pair, margin = chosen − rejected):

- ``model-wrong``: pairs the model mis-ranks (margin < 0), drawn at random — the hard negatives;
- ``high-confidence``: the correctly ranked pairs with the widest margins;
- ``low-confidence``: the correctly ranked pairs with the narrowest margins;
- ``random``: a random draw from the scored pairs left.

Buckets are disjoint (taken in that order) and draws are seeded, so the same results and seed give
the same sample. Pairs with an error are never sampled. The output keeps the results' columns,
adds ``bucket`` and an empty ``human_agrees`` column for the annotators, and is written
atomically; `summary` gives each bucket's count and mean margin (Table 3's columns).
"""

from __future__ import annotations

import os

import numpy as np
import polars as pl

from sdscore.corpus.results_file import read_results
from sdscore.corpus.write import write_manifest
from sdscore.metrics._inputs import error_mask

BUCKETS = ("model-wrong", "high-confidence", "low-confidence", "random")


def sample_check(results: pl.DataFrame, *, per_bucket: int = 20, wrong: int = 15, seed: int = 0) -> pl.DataFrame:
    """The sample (see the module docstring); ValueError when results lack what it needs."""
    if per_bucket < 0 or wrong < 0:
        raise ValueError(f"bucket sizes must be >= 0, got per_bucket={per_bucket}, wrong={wrong}")
    missing = [c for c in ("pair_id", "chosen_reward", "rejected_reward") if c not in results.columns]
    if missing:
        raise ValueError(f"results lack column(s) {missing}")
    scored = results.filter(pl.Series(~error_mask(results))).with_columns(
        (pl.col("chosen_reward") - pl.col("rejected_reward")).alias("margin"))
    scored = scored.filter(pl.col("margin").is_not_null() & pl.col("margin").is_finite())
    rng = np.random.default_rng(seed)
    taken: set[str] = set()
    parts = []

    def take(frame: pl.DataFrame, n: int, bucket: str, order: str) -> None:
        frame = frame.filter(~pl.col("pair_id").is_in(list(taken)))
        if order == "random":
            rows = rng.permutation(frame.height)[:n]
            picked = frame[sorted(rows.tolist())] if len(rows) else frame.head(0)
        else:
            picked = frame.sort(["margin", "pair_id"], descending=[order == "widest", False]).head(n)
        taken.update(picked["pair_id"].to_list())
        parts.append(picked.with_columns(pl.lit(bucket).alias("bucket")))

    correct = scored.filter(pl.col("margin") > 0)
    take(scored.filter(pl.col("margin") < 0), wrong, "model-wrong", "random")
    take(correct, per_bucket, "high-confidence", "widest")
    take(correct, per_bucket, "low-confidence", "narrowest")
    take(scored, per_bucket, "random", "random")
    sample = pl.concat(parts, how="diagonal_relaxed")
    return sample.with_columns(pl.lit(None, dtype=pl.Boolean).alias("human_agrees")).select(
        "bucket", *(c for c in sample.columns if c != "bucket"), "human_agrees")


def summary(sample: pl.DataFrame) -> list[dict]:
    """Per bucket, in Table 3's order: count and mean model margin."""
    rows = []
    for bucket in BUCKETS:
        part = sample.filter(pl.col("bucket") == bucket)
        rows.append({"bucket": bucket, "count": part.height,
                     "mean_margin": float(part["margin"].mean()) if part.height else None})
    return rows


def run_sample_check(results_path: str | os.PathLike, out: str | os.PathLike, *, per_bucket: int = 20,
                     wrong: int = 15, seed: int = 0) -> list[dict]:
    """`sdscore corpus sample-check`: read results, write the sample, return the bucket summary."""
    results = read_results(results_path, {"chosen_reward": pl.Float64, "rejected_reward": pl.Float64,
                                          "error": pl.String, "pair_id": pl.String},
                           required=("pair_id", "chosen_reward", "rejected_reward"))
    sample = sample_check(results, per_bucket=per_bucket, wrong=wrong, seed=seed)
    write_manifest(sample, out)
    return summary(sample)
