"""arena (S2S-Arena): ratings and judging biases from a battles manifest — the evaluate step.

Battles need no scoring pass: the manifest already holds each verdict, so `evaluate_arena`
turns it into online Elo (overall and per domain), Bradley–Terry ratings with bootstrap 95 % CIs,
the pairwise win-rate matrix, position bias and length bias.
"""

from __future__ import annotations

import os

import polars as pl

from sdscore.atomic_write import write_json
from sdscore.corpus import read_manifest
from sdscore.metrics.ratings import (
    bootstrap_bradley_terry,
    length_bias,
    online_elo,
    online_elo_by,
    pairwise_win_rate,
    position_bias,
)


def evaluate_arena(battles: pl.DataFrame, *, n_boot: int = 1000, seed: int = 0, l2: float = 0.0) -> dict:
    """All arena statistics of a battles frame (BATTLES schema) as one JSON-ready dict."""
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
        lengths = battles.filter(pl.col("length_a").is_not_null() & pl.col("length_b").is_not_null())
        result["length_bias"] = length_bias(lengths)
    return result


def run_eval(battles_path: str | os.PathLike, out_json: str | os.PathLike, **options) -> dict:
    """Read a battles manifest, evaluate it and write METRICS.json atomically."""
    metrics = evaluate_arena(read_manifest(battles_path, "arena"), **options)
    write_json(out_json, metrics)
    return metrics


def evaluate_files(results: list, out_json: str | os.PathLike, *, plot=None, seed: int = 0) -> dict:
    """`sdscore eval arena` (the registry's uniform signature; arena draws no plot)."""
    if plot is not None:
        raise ValueError("eval arena draws no plot; leave out --plot")
    return run_eval(results[0], out_json, seed=seed)
