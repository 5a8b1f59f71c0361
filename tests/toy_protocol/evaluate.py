"""`sdscore eval toy`: the rows, the failed rows and the mean score."""

import json

import polars as pl


def evaluate_files(results, out_json, *, plot=None, seed: int = 0) -> dict:
    frame = pl.read_parquet(results[0])
    scored = frame.filter(pl.col("error").is_null())
    metrics = {"n": frame.height, "failed": frame.height - scored.height, "mean_score": scored["score"].mean()}
    with open(out_json, "w", encoding="utf-8") as out:
        json.dump(metrics, out)
    return metrics
