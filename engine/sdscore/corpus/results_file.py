"""read_results: a results file for `sdscore eval` — ours or another tool's — read and typed.

Parquet, JSONL and CSV/TSV are read by suffix. The caller names the columns it uses with their
types: the required ones must be there, optional ones that are absent are added as nulls, and
every one present is cast to its type (text "0.25" to a float, "[0.1, 0.2]" in a CSV cell to a
list). Whatever is wrong is one ManifestError naming the file and the column.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from sdscore.errors import ManifestError

_KINDS = {".parquet": "Parquet", ".pq": "Parquet", ".jsonl": "JSONL", ".ndjson": "JSONL", ".csv": "CSV", ".tsv": "TSV"}


def _read(path: str, kind: str) -> pl.DataFrame:
    if kind == "Parquet":
        return pl.read_parquet(path)
    if kind == "JSONL":
        return pl.read_ndjson(path, infer_schema_length=None)
    return pl.read_csv(path, separator="\t" if kind == "TSV" else ",", infer_schema=False)


def _typed(frame: pl.DataFrame, name: str, dtype: pl.DataType, source: str) -> pl.Series:
    column = frame[name]
    if column.dtype == dtype:
        return column
    try:
        if column.dtype == pl.String and isinstance(dtype, (pl.List, pl.Array, pl.Struct)):
            return column.str.json_decode(dtype)  # a CSV cell holding a JSON list
        if column.dtype == pl.String and dtype == pl.Boolean:
            lowered = column.str.to_lowercase()
            known = lowered.is_in(["true", "false"]) | lowered.is_null()
            if not known.all():
                raise pl.exceptions.InvalidOperationError(f"{column.filter(~known)[0]!r}")
            return lowered == "true"
        return column.cast(dtype, strict=True)
    except (pl.exceptions.PolarsError, ValueError) as error:
        shown = str(error).strip().splitlines()[0][:120]
        raise ManifestError(
            f"{source}: column '{name}' holds {column.dtype} values that are not {dtype} ({shown})"
        ) from None


def check_results_file(path: str | os.PathLike) -> None:
    """ManifestError unless path is a regular file: a folder, a FIFO (never opened: reading one would wait
    for a writer), a socket or device, or nothing at all is named as such."""
    source = os.fspath(path)
    if os.path.isfile(source):
        return
    if os.path.isdir(source):
        raise ManifestError(f"{source}: a folder, not a results file; give the results file itself")
    if os.path.exists(source):
        raise ManifestError(f"{source}: not a regular file (a FIFO, socket or device is not read); give a results file")
    raise ManifestError(f"{source}: no such results file")


def read_results(
    path: str | os.PathLike, columns: Mapping[str, pl.DataType], required: Sequence[str] = (),
    add_absent: bool = True, unique: Sequence[str] = (),
) -> pl.DataFrame:
    """The results file at `path` with `columns` typed; other columns kept. Absent optional columns
    are added as nulls, or left absent with add_absent=False (for metrics that read absence).
    unique: the key columns (the manifest's unique key) whose values may not repeat, as `score`
    refuses them; a key column the file lacks is left out of the key (none: no check)."""
    source = os.fspath(path)
    check_results_file(source)
    kind = _KINDS.get(Path(source).suffix.lower())
    if kind is None:
        raise ManifestError(f"{source}: cannot read results from {Path(source).suffix or '(no suffix)'!r}; "
                            f"expected one of {', '.join(_KINDS)}")
    try:
        frame = _read(source, kind)
    except (pl.exceptions.PolarsError, OSError, ValueError) as error:
        shown = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
        raise ManifestError(f"{source}: not a readable {kind} results file ({shown})") from None
    missing = [name for name in required if name not in frame.columns]
    if missing:
        raise ManifestError(
            f"{source}: results lack column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
            f"(found: {', '.join(frame.columns) or 'no columns'})"
        )
    refuse_repeated_keys(frame, [name for name in unique if name in frame.columns], source)
    return frame.with_columns(
        _typed(frame, name, dtype, source) if name in frame.columns else pl.lit(None, dtype).alias(name)
        for name, dtype in columns.items() if add_absent or name in frame.columns
    )


def refuse_repeated_keys(frame: pl.DataFrame, key: Sequence[str], source: str, shown: int = 5) -> None:
    """ManifestError naming the first repeated keys and their rows (1-based data rows; a key with a
    null part is not compared)."""
    if not key or frame.height == 0:
        return
    keyed = frame.select([pl.col(name).cast(pl.String) for name in key]).with_row_index("_row", offset=1)
    keyed = keyed.drop_nulls(list(key))
    repeats = (keyed.group_by(list(key), maintain_order=True).agg(pl.col("_row"))
               .filter(pl.col("_row").list.len() > 1))
    if repeats.height == 0:
        return
    described = []
    for row in repeats.head(shown).iter_rows(named=True):
        rows = row["_row"]
        value = ", ".join(f"{name} {row[name]!r}" for name in key)
        described.append(f"{value} (rows {', '.join(map(str, rows[:10]))}{', ...' if len(rows) > 10 else ''})")
    more = f"; {repeats.height - shown} more" if repeats.height > shown else ""
    raise ManifestError(f"{source}: {repeats.height} key{'s' if repeats.height > 1 else ''} repeat: "
                        f"{'; '.join(described)}{more}. Each row must have its own {' + '.join(key)}, "
                        f"as `sdscore score` requires; remove or rename the repeats")
