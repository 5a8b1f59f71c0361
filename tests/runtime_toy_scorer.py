"""A tiny Scorer over the `arena` manifest for the runtime's executor tests (importable by Ray workers).

`write_arena_manifest` writes a Parquet arena manifest; `ToyScorer` gives each battle a float
derived from its id and names, and extra result columns whose dtypes a transport must keep (a
list, a fixed-size array, an enum and a string column that is null on every row); rows the
manifest reader marked bad keep their `error` and get null results. `FailingScorer` cannot load.
"""

from __future__ import annotations

import os

import polars as pl

WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")
SIDES = pl.Enum(["a", "b", "none"])


def write_arena_manifest(path: str | os.PathLike, n_rows: int = 50, bad_every: int = 9) -> str:
    """An arena manifest of n_rows battles; every `bad_every`-th row has an invalid winner."""
    frame = pl.DataFrame(
        {
            "battle_id": [f"b{i:04d}" for i in range(n_rows)],
            "model_a": [f"model-{i % 5}" for i in range(n_rows)],
            "model_b": [f"model-{(i + 2) % 7}" for i in range(n_rows)],
            "winner": ["nobody" if i % bad_every == bad_every - 1 else WINNERS[i % 4] for i in range(n_rows)],
        }
    )
    frame.write_parquet(path)
    return os.fspath(path)


class ToyScorer:
    """value = scale * (battle number + len(model_a) / 4); results null on bad rows."""

    def __init__(self, scale: float = 1.0):
        self.scale = float(scale)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        good = pl.col("error").is_null()
        number = pl.col("battle_id").str.slice(1).cast(pl.Int64)
        value = (number.cast(pl.Float64) + pl.col("model_a").str.len_chars() / 4) * self.scale  # exact in binary
        side = pl.col("winner").replace_strict(
            {"model_a": "a", "model_b": "b"}, default="none", return_dtype=pl.String
        )
        return rows.select(
            "battle_id",
            pl.when(good).then(value).alias("value"),
            pl.when(good).then(pl.concat_list(value, value * 2)).alias("pair"),
            pl.when(good).then(pl.concat_list(value, -value).list.to_array(2)).alias("vector"),
            pl.when(good).then(side).cast(SIDES).alias("side"),
            pl.lit(None, pl.String).alias("note"),
            "error",
        )


class FailingScorer:
    """A Scorer whose models cannot load."""

    def __init__(self, scale: float = 1.0):
        raise RuntimeError(f"toy weights are missing (scale={scale})")

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:  # pragma: no cover - never built
        raise AssertionError("unreachable")


class ShortScorer(ToyScorer):
    """Returns one row too few (check_results must refuse it)."""

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        return super().__call__(rows).head(max(0, rows.height - 1))


class GatedScorer(ToyScorer):
    """ToyScorer that, when $SDSCORE_TOY_GATE names a file, scores $SDSCORE_TOY_GATE_WINDOWS windows and
    then waits for that file before the next one: a run that stays midway until the test kills it (no
    race between the run finishing and the kill)."""

    def __init__(self, scale: float = 1.0):
        super().__init__(scale)
        self.windows = 0

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        gate = os.environ.get("SDSCORE_TOY_GATE")
        if gate and self.windows >= int(os.environ["SDSCORE_TOY_GATE_WINDOWS"]):
            import time

            while not os.path.exists(gate):
                time.sleep(0.05)
        self.windows += 1
        return super().__call__(rows)
