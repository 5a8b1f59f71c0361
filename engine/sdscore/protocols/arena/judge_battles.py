"""The battles `sdscore eval arena` rates: a battles manifest, or an audio judge's results expanded.

A results file of `sdscore score arena --judge openai` (scorer.RESULTS: one row per battle)
becomes battle rows in the manifest's own schema: the manifest's verdict (reference_winner, judged by
reference_judge) and one battle per order the judge was asked — "<battle_id>#ab" as shown, and
"<battle_id>#ba" with the two models (their lengths and audio) swapped — judged by the judge model.
Every row shares the battle's prompt_id (its battle_id when it has none), so the arena evaluation
pairs the judge with the humans and its two orders with each other unchanged. Rows the judge failed
keep their reference verdict and are counted in `judge_failures`.
"""

from __future__ import annotations

import os
from collections.abc import Collection

import polars as pl

from sdscore.corpus import read_manifest
from sdscore.corpus.validate import validate_manifest
from sdscore.errors import ManifestError
from sdscore.protocols.arena.scorer import RESULTS
from sdscore.protocols.arena.spec import SPEC

#: the columns that tell an audio judge's results from a battles manifest
RESULT_MARKERS = ("reference_winner", "winner_ab", "winner_ba", "orders")
_SWAPPED = {"model_a": "model_b", "model_b": "model_a"}
_SHOWN_FAILURES = 10


def is_judge_results(columns: Collection[str]) -> bool:
    return all(name in columns for name in RESULT_MARKERS)


def check_results_columns(results: pl.DataFrame, source: str) -> None:
    """ManifestError naming a column of scorer.RESULTS that is missing or of another type."""
    for name, dtype in RESULTS.items():
        if name not in results.columns:
            raise ManifestError(f"{source}: an arena judge results file needs column {name!r}")
        if results.schema[name] != dtype and results.schema[name] != pl.Null:
            raise ManifestError(f"{source}: column {name!r} of an arena judge results file must be {dtype}, "
                                f"got {results.schema[name]}")


def battles_of_judge_results(results: pl.DataFrame, source: str = "<frame>") -> tuple[pl.DataFrame, dict]:
    """(battle rows, {"judge_failures": {"n", "battle_ids" (the first few)}}) of a judge's results."""
    check_results_columns(results, source)
    rows, failed = [], []
    for row in results.iter_rows(named=True):
        prompt = row.get("prompt_id") or row["battle_id"]
        battle = {"battle_id": row["battle_id"], "model_a": row["model_a"], "model_b": row["model_b"],
                  "domain": row.get("domain"), "prompt_id": prompt, "length_a": row.get("length_a"),
                  "length_b": row.get("length_b"), "audio_a_path": row.get("audio_a_path"),
                  "audio_b_path": row.get("audio_b_path")}
        if row.get("reference_winner") is not None:
            rows.append({**battle, "winner": row["reference_winner"], "judge": row.get("reference_judge")})
        if row.get("error") is not None or not row.get("orders"):
            failed.append(row["battle_id"])
            continue
        for order in row["orders"]:
            if order not in ("ab", "ba"):
                raise ManifestError(f"{source}: battle {row['battle_id']}: unknown order {order!r} (ab or ba)")
            verdict = row[f"winner_{order}"]
            if order == "ab":
                rows.append({**battle, "battle_id": f"{row['battle_id']}#ab", "winner": verdict, "judge": row["judge"]})
                continue
            rows.append({**battle, "battle_id": f"{row['battle_id']}#ba", "model_a": row["model_b"],
                         "model_b": row["model_a"], "length_a": row.get("length_b"), "length_b": row.get("length_a"),
                         "audio_a_path": row.get("audio_b_path"), "audio_b_path": row.get("audio_a_path"),
                         "winner": _SWAPPED.get(verdict, verdict), "judge": row["judge"]})
    frame = pl.DataFrame(rows, schema={k: pl.String for k in ("battle_id", "model_a", "model_b", "domain",
                                                              "prompt_id", "audio_a_path", "audio_b_path",
                                                              "winner", "judge")}
                         | {"length_a": pl.Float64, "length_b": pl.Float64})
    battles = validate_manifest(frame, SPEC, source)
    return battles, {"judge_failures": {"n": len(failed), "battle_ids": failed[:_SHOWN_FAILURES]}}


def read_battles(path: str | os.PathLike) -> tuple[pl.DataFrame, dict]:
    """The battles of a manifest, or of an audio judge's results Parquet (expanded; see the module)."""
    source = os.fspath(path)
    if source.lower().endswith(".parquet") and os.path.isfile(source):
        try:
            columns = pl.read_parquet_schema(source).keys()
        except (pl.exceptions.PolarsError, OSError):
            columns = []  # not readable as Parquet: the manifest reader says why
        if is_judge_results(columns):
            try:
                results = pl.read_parquet(source)
            except (pl.exceptions.PolarsError, OSError) as error:
                raise ManifestError(f"{source}: cannot read the arena judge results ({error})") from error
            return battles_of_judge_results(results, source)
    return read_manifest(path, SPEC), {}
