"""The reward protocol's results: one row per pair, the same columns whichever judge scored it.

pair_id, criterion, subset, category, source, chosen_reward, rejected_reward, margin (= chosen −
rejected), correct, error, warning (e.g. a clip the model cut to its window; the pair is scored),
and optionally the pooled states chosen_pooled / rejected_pooled (so a new head can be fitted
without re-running the backbone). Any scorer that writes these columns can be evaluated.
"""

from __future__ import annotations

import polars as pl

#: Columns of a results file, in order (pooled columns only when asked for).
RESULT_SCHEMA = pl.Schema(
    {
        "pair_id": pl.String,
        "criterion": pl.String,
        "subset": pl.String,
        "category": pl.String,
        "source": pl.String,
        "chosen_reward": pl.Float64,
        "rejected_reward": pl.Float64,
        "margin": pl.Float64,
        "correct": pl.Boolean,
        "error": pl.String,
        "warning": pl.String,
    }
)
POOLED_COLUMNS = ("chosen_pooled", "rejected_pooled")
#: subset name of a pair whose manifest row has none, per criterion
DEFAULT_SUBSET = {"modality": "modality", "colloquialness": "colloquial"}
