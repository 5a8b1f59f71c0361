"""The toy Scorer: each clip's word count, times a weight."""

import polars as pl

from sdscore.runtime.scorer import ScoringJob
from toy_protocol.spec import SPEC


class ToyScorer:
    def __init__(self, weight: float = 1.0):
        self.weight = weight

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        ok = pl.col("error").is_null()
        return rows.select(
            "clip_id",
            pl.when(ok).then(pl.col("words").str.split(" ").list.len() * self.weight).alias("score"),
            "error",
        )


def scoring_job(weight: float = 1.0) -> ScoringJob:
    return ScoringJob(SPEC, ToyScorer, {"weight": weight})
