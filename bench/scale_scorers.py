"""A trivial Scorer for bench/scale.py, in its own module so worker processes and Ray actors import it.

`EchoScorer` scores an `arena` manifest (battle_id, model_a, model_b, winner): per battle, its id,
a cheap computed number and the reader's `error` — so a run over it measures the runtime alone
(windows, validation, executor transport, shards, merge), not a model. `write_arena_manifest`
writes such a manifest of n rows as Parquet, streamed in chunks so a large one never sits in memory.
"""

from __future__ import annotations

import os

import polars as pl
import pyarrow.parquet as pq

WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")
MODELS = ("speech-token-e2e", "speech-embed-e2e", "cascade-asr-llm-tts", "duplex-full", "half-duplex")


class EchoScorer:
    """battle_id, `signal` (len(model_a) − len(model_b), +100 when model_a won; null on bad rows), error."""

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        good = pl.col("error").is_null()
        signal = pl.col("model_a").str.len_bytes().cast(pl.Int32) - pl.col("model_b").str.len_bytes().cast(pl.Int32)
        signal = signal + pl.when(pl.col("winner") == "model_a").then(100).otherwise(0)
        return rows.select("battle_id", pl.when(good).then(signal).alias("signal"), "error")


def arena_chunk(start: int, stop: int) -> pl.DataFrame:
    """Battles start..stop-1 (deterministic; every id unique)."""
    i = pl.int_range(start, stop, dtype=pl.Int64, eager=True)
    frame = pl.DataFrame({"i": i})
    n_models, n_winners = len(MODELS), len(WINNERS)
    return frame.select(
        pl.format("battle-{}", pl.col("i").cast(pl.String).str.zfill(8)).alias("battle_id"),
        pl.lit(pl.Series(MODELS)).get(pl.col("i") % n_models).alias("model_a"),
        pl.lit(pl.Series(MODELS)).get((pl.col("i") * 3 + 1) % n_models).alias("model_b"),
        pl.lit(pl.Series(WINNERS)).get((pl.col("i") * 7) % n_winners).alias("winner"),
    )


def write_arena_manifest(path: str | os.PathLike, n_rows: int, chunk: int = 100_000) -> str:
    """An arena manifest of n_rows battles as Parquet (row groups of `chunk` rows)."""
    writer = None
    try:
        for start in range(0, n_rows, chunk):
            table = arena_chunk(start, min(n_rows, start + chunk)).to_arrow()
            if writer is None:
                writer = pq.ParquetWriter(os.fspath(path), table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
    return os.fspath(path)
