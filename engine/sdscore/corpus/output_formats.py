"""Score output in the formats other tools read: JSONL, VERSA-style JSONL, Kaldi-style scp files.

Written from a finished results Parquet (the runtime always writes that, resumably):
- ``jsonl``: every column of every row, one JSON object a line (lists and structs included).
- ``versa``: one object per utterance key, ``{"key": ..., metric: number, ...}``, as VERSA's
  per-utterance output, numbers only so that VERSA's aggregate_results.py (which sums every key of
  the first line over all lines) reads it: the numeric and boolean columns (booleans 1/0) that have
  a value, every one on every line, a missing value written NaN as VERSA's own writer does (Python's
  json.dumps); rows that failed are left out. The text columns and `error` go to a side file beside
  it, named with ``.text`` before its suffix (versa_text_file: OUT.versa.text.jsonl), one object per
  key (every row), null values left out.
- ``scp``: a folder with one ``<metric>.scp`` per numeric or boolean column, ``<key> <value>``
  lines sorted by key in byte order (Kaldi's `LC_ALL=C sort`); rows whose value is null or NaN
  are left out (a column with no value at all gets no file), booleans are 1/0; a column the
  protocol's report shows in percent (spec.percent_columns: WER, CER) is written x100 as
  ``<metric>_pct.scp``.
The key is the protocol's unique key: its id column, prefixed by `dataset/` where the protocol
keys rows by dataset too and the row has one.

Destinations follow the output-path policy (output_paths.py): an existing file is replaced only
with ``overwrite``; the scp folder is built beside its destination and renamed into place, and an
existing folder is replaced only when it is empty or (with ``overwrite``) an earlier sdscore output
holding nothing sdscore did not write.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import polars as pl

from sdscore.atomic_write import atomic_path
from sdscore.corpus.schemas import ManifestSpec, require_spec
from sdscore.corpus.validate import ERROR_COLUMN
from sdscore.errors import SdscoreError
from sdscore.output_paths import OutputPlan, staged_folder

FORMATS = ("parquet", "jsonl", "versa", "scp")
KEY = "key"
_NUMERIC = (pl.Float32, pl.Float64, pl.Int8, pl.Int16, pl.Int32, pl.Int64, pl.UInt8, pl.UInt16, pl.UInt32,
            pl.UInt64, pl.Boolean)


def versa_text_file(destination: str | os.PathLike) -> Path:
    """The side file of a VERSA output holding its text columns: `.text` before the last suffix
    (X.versa.jsonl → X.versa.text.jsonl, result.1.txt → result.1.text.txt)."""
    destination = Path(destination)
    return destination.with_name(destination.stem + ".text" + destination.suffix)


def default_destination(results: str | os.PathLike, fmt: str) -> Path:
    """Where `fmt` goes beside the results Parquet: OUT.jsonl, OUT.versa.jsonl or the folder OUT_scp/."""
    results = Path(results)
    stem = results.with_suffix("") if results.suffix.lower() in (".parquet", ".pq") else results
    return {"parquet": results, "jsonl": stem.with_name(stem.name + ".jsonl"),
            "versa": stem.with_name(stem.name + ".versa.jsonl"), "scp": stem.with_name(stem.name + "_scp")}[fmt]


def result_keys(frame: pl.DataFrame, spec: ManifestSpec) -> pl.Series:
    """Each row's utterance key: the id column, `dataset/` before it where the protocol keys by dataset."""
    spec = require_spec(spec, "result_keys")
    if spec.id_column not in frame.columns:
        raise SdscoreError(f"results have no {spec.id_column!r} column to key rows by (protocol {spec.name})")
    key = pl.col(spec.id_column).cast(pl.String)
    for column in reversed([c for c in spec.unique_key if c != spec.id_column and c in frame.columns]):
        key = pl.when(pl.col(column).is_null()).then(key).otherwise(pl.col(column).cast(pl.String) + "/" + key)
    return frame.select(key.alias(KEY)).to_series()


def _key_parts(spec: ManifestSpec) -> set[str]:
    return {spec.id_column, *spec.unique_key}


def _checked_keys(keys: pl.Series, source: str, kind: str) -> list[str]:
    values = keys.to_list()
    seen: dict[str, int] = {}
    for row, key in enumerate(values):
        if key is None or key == "":
            raise SdscoreError(f"{source}: row {row + 1} has no key; cannot write {kind}")
        if kind == "scp" and re.search(r"\s", key):
            raise SdscoreError(f"{source}: row {row + 1}: key {key!r} holds whitespace, which a Kaldi scp line cannot")
        if key in seen:
            raise SdscoreError(f"{source}: rows {seen[key] + 1} and {row + 1} share the key {key!r}; cannot write {kind}")
        seen[key] = row
    return values


def _clean(value):
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def write_versa(frame: pl.DataFrame, spec: ManifestSpec, destination: Path, source: str) -> Path:
    keys = _checked_keys(result_keys(frame, spec), source, "versa")
    skip = _key_parts(spec) | {ERROR_COLUMN}
    numeric = [c for c, t in frame.schema.items() if c not in skip and t in _NUMERIC
               and frame[c].drop_nulls().len() > 0 and not (t in (pl.Float32, pl.Float64) and frame[c].is_nan().all())]
    text = [c for c, t in frame.schema.items()
            if c not in skip - {ERROR_COLUMN} and (t == pl.String or isinstance(t, (pl.Categorical, pl.Enum)))]
    failed = frame[ERROR_COLUMN].is_not_null().to_list() if ERROR_COLUMN in frame.columns else [False] * frame.height
    with atomic_path(destination, durable=True) as temp, open(temp, "w", encoding="utf-8") as out:
        for key, row, bad in zip(keys, frame.select(numeric).iter_rows(named=True), failed):
            if bad:
                continue
            record: dict = {KEY: key}
            for name, value in row.items():
                value = _clean(value)
                record[name] = math.nan if value is None else int(value) if isinstance(value, bool) else value
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    with atomic_path(versa_text_file(destination), durable=True) as temp, open(temp, "w", encoding="utf-8") as out:
        for key, row in zip(keys, frame.select(text).iter_rows(named=True)):
            record = {KEY: key}
            record.update((name, value) for name, value in row.items() if value is not None)
            out.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
    return destination


def _scp_value(value) -> str | None:
    value = _clean(value)
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)


def scp_tables(frame: pl.DataFrame, spec: ManifestSpec, source: str) -> dict[str, str]:
    """{file name: text} of the scp files of a results frame: one `<metric>.scp` per numeric or boolean
    column with a value, in the units the protocol's report shows (spec.percent_columns: x100, named
    `<metric>_pct.scp`)."""
    keys = _checked_keys(result_keys(frame, spec), source, "scp")
    skip = _key_parts(spec)
    metrics = [c for c, t in frame.schema.items() if c not in skip and c != ERROR_COLUMN and t in _NUMERIC]
    if not metrics:
        raise SdscoreError(f"{source}: no numeric columns to write as scp files")
    order = sorted(range(len(keys)), key=lambda i: keys[i].encode("utf-8"))
    tables: dict[str, str] = {}
    for metric in metrics:
        values = frame[metric].to_list()
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", metric)
        if metric in spec.percent_columns and frame.schema[metric] != pl.Boolean:
            name += "_pct"
            values = [None if v is None else round(100.0 * v, 10) for v in values]
        lines = [f"{keys[i]} {text}\n" for i in order if (text := _scp_value(values[i])) is not None]
        if lines:  # a metric no row has (e.g. a model that was not given) gets no file
            tables[f"{name}.scp"] = "".join(lines)
    return tables


def write_scp(frame: pl.DataFrame, spec: ManifestSpec, destination: Path, source: str, *, overwrite: bool = False) -> Path:
    tables = scp_tables(frame, spec, source)
    with staged_folder(destination, overwrite=overwrite, command="sdscore score --format scp") as staging:
        for name, text in tables.items():
            (staging / name).write_text(text, encoding="utf-8")
    return destination


def write_results_as(results: str | os.PathLike, fmt: str, spec: ManifestSpec,
                     destination: str | os.PathLike | None = None, *, overwrite: bool = False) -> Path:
    """Write a finished results Parquet as `fmt` (see the module doc); returns what was written.

    The destination is checked by the output-path policy first: not the results file, not a folder
    above it, and an existing one replaced only with overwrite (a folder: only an earlier sdscore
    output holding nothing else)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    source = os.fspath(results)
    target = Path(destination) if destination is not None else default_destination(results, fmt)
    plan = OutputPlan([results], overwrite=overwrite)
    if fmt == "scp":
        plan.folder(target, "--format-out")
    else:
        plan.file(target, "--format-out")
    if fmt == "versa":
        plan.file(versa_text_file(target), "--format-out's text file")
    if fmt == "parquet":
        with atomic_path(target, durable=True) as temp:
            shutil.copyfile(results, temp)
        return target
    if fmt == "jsonl":
        with atomic_path(target, durable=True) as temp:
            pl.scan_parquet(source).sink_ndjson(str(temp))
        return target
    frame, spec = pl.read_parquet(source), require_spec(spec, "write_results_as")
    if fmt == "versa":
        return write_versa(frame, spec, target, source)
    return write_scp(frame, spec, target, source, overwrite=overwrite)
