"""Stratified benchmark selection (ESDR-Bench): at most K rows per bucket of key columns.

SDiaReward builds ESDR-Bench by bucketing the held-out pairs by source × secondary category and
keeping at most 50 per bucket (smaller buckets whole); the selected pairs are removed from the
training corpus. ``stratify`` does that split; ``run_stratify`` is `sdscore corpus stratify`.

Which rows a bucket keeps depends only on the seed, the bucket's key and the bucket's own rows
(in input order), not on the other buckets; both outputs keep the input's row order.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import numpy as np
import polars as pl

from sdscore.corpus.read import read_manifest
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.write import write_manifest
from sdscore.errors import ManifestError

#: ESDR-Bench's cap per bucket and its bucket keys.
DEFAULT_PER_BUCKET = 50
DEFAULT_BY = ("source", "category")
#: How a null key value is named in summaries (nulls form one bucket of their own).
NONE_LABEL = "<none>"

_ROW = "__sdscore_row"


def stratify(
    pairs: pl.DataFrame,
    per_bucket: int = DEFAULT_PER_BUCKET,
    by: str | Sequence[str] = DEFAULT_BY,
    seed: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split ``pairs`` into (selected, remaining): at most ``per_bucket`` rows per bucket of ``by``.

    Within a bucket the kept rows are the first ``per_bucket`` of a permutation seeded by
    (``seed``, bucket key); a bucket no larger than the cap is kept whole. ``by`` is a column name,
    a comma-separated list of names, or a sequence of names. Null values form their own bucket.
    Both frames keep the input's columns and row order; together they hold every input row once.
    """
    keep = _selection_mask(pairs, per_bucket, _key_columns(pairs, by), seed)
    mask = pl.Series(keep)
    return pairs.filter(mask), pairs.filter(~mask)


def stratify_buckets(
    pairs: pl.DataFrame, per_bucket: int = DEFAULT_PER_BUCKET, by: str | Sequence[str] = DEFAULT_BY
) -> pl.DataFrame:
    """One row per bucket, in order of first appearance: the ``by`` values as text (null shown as
    ``"<none>"``), ``available`` (rows in the bucket) and ``selected`` (rows ``stratify`` keeps)."""
    keys = _key_columns(pairs, by)
    _check_per_bucket(per_bucket)
    groups = _groups(pairs, keys)
    return pl.DataFrame(
        {
            **{key: [_label(value) for value in groups[key].to_list()] for key in keys},
            "available": [len(rows) for rows in groups[_ROW].to_list()],
            "selected": [min(len(rows), per_bucket) for rows in groups[_ROW].to_list()],
        },
        schema={**{key: pl.String for key in keys}, "available": pl.Int64, "selected": pl.Int64},
    )


def run_stratify(
    manifest_path: str | os.PathLike,
    out_path: str | os.PathLike,
    per_bucket: int = DEFAULT_PER_BUCKET,
    by: str | Sequence[str] = DEFAULT_BY,
    seed: int = 0,
    remaining_out: str | os.PathLike | None = None,
    *,
    spec: ManifestSpec,
) -> dict:
    """`sdscore corpus stratify`: read a manifest, write the selected rows (and the rest).

    The manifest is read and validated with spec, the reward protocol's for ESDR-Bench's pairs
    (relative audio paths become paths under its folder, so the outputs can live anywhere); outputs
    are written atomically, Parquet or JSONL by suffix. Returns a JSON-ready summary: ``buckets`` (one dict per bucket: its key
    values, available, selected) and ``counts`` (input, selected, remaining, buckets).
    """
    keys = _key_columns(None, by)
    _check_per_bucket(per_bucket)
    _check_seed(seed)
    _check_outputs(manifest_path, out_path, remaining_out)
    pairs = read_manifest(manifest_path, spec)
    try:
        _key_columns(pairs, keys)
    except ValueError as error:
        raise ManifestError(f"{os.fspath(manifest_path)}: {error}") from error
    selected, remaining = stratify(pairs, per_bucket, keys, seed)
    buckets = stratify_buckets(pairs, per_bucket, keys)
    write_manifest(selected, out_path)
    if remaining_out is not None:
        write_manifest(remaining, remaining_out)
    return {
        "manifest": os.fspath(manifest_path),
        "out": os.fspath(out_path),
        "remaining_out": None if remaining_out is None else os.fspath(remaining_out),
        "per_bucket": per_bucket,
        "by": list(keys),
        "seed": seed,
        "buckets": buckets.to_dicts(),
        "counts": {
            "input": pairs.height,
            "selected": selected.height,
            "remaining": remaining.height,
            "buckets": buckets.height,
        },
    }


def _selection_mask(pairs: pl.DataFrame, per_bucket: int, keys: list[str], seed: int) -> np.ndarray:
    """Boolean ``[rows]``: the row is among its bucket's selected rows."""
    _check_per_bucket(per_bucket)
    _check_seed(seed)
    keep = np.zeros(pairs.height, dtype=bool)
    groups = _groups(pairs, keys)
    key_rows = groups.select(keys).rows()
    for key, rows in zip(key_rows, groups[_ROW].to_list(), strict=True):
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size <= per_bucket:
            keep[rows] = True
        else:
            order = np.random.default_rng(_bucket_seed(seed, key)).permutation(rows.size)
            keep[rows[order[:per_bucket]]] = True
    return keep


def _groups(pairs: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The buckets in order of first appearance: key columns plus the list of their row numbers."""
    return pairs.select(keys).with_row_index(_ROW).group_by(keys, maintain_order=True).agg(pl.col(_ROW).cast(pl.Int64))


def _bucket_seed(seed: int, key: tuple) -> list[int]:
    """Seed words for one bucket's permutation: the user's seed and a stable digest of the key."""
    text = "\x1f".join("\x00" if value is None else f"{type(value).__name__}:{value}" for value in key)
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [seed, *(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))]


def _label(value) -> str:
    return NONE_LABEL if value is None else str(value)


def _key_columns(pairs: pl.DataFrame | None, by: str | Sequence[str]) -> list[str]:
    """``by`` as a list of column names, checked against ``pairs`` (when given)."""
    if isinstance(by, str):
        keys = [part.strip() for part in by.split(",")]
    else:
        keys = list(by)
    if not keys or any(not isinstance(key, str) or not key for key in keys):
        raise ValueError(f"by must name at least one column (no empty names), got {by!r}")
    reserved = [key for key in keys if key in ("available", "selected")]
    if reserved:
        raise ValueError(f"cannot stratify by column {reserved[0]!r}: the bucket table uses that name")
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"by names column {repeated[0]!r} more than once")
    if pairs is not None:
        for key in keys:
            if key not in pairs.columns:
                raise ValueError(
                    f"cannot stratify by column {key!r}: the frame has no such column; it has {pairs.columns}"
                )
            if pairs.schema[key].is_nested():
                raise ValueError(f"cannot stratify by column {key!r} of type {pairs.schema[key]}; use a scalar column")
    return keys


def _check_per_bucket(per_bucket) -> None:
    if isinstance(per_bucket, bool) or not isinstance(per_bucket, (int, np.integer)) or per_bucket < 1:
        raise ValueError(f"per_bucket must be an integer ≥ 1, got {per_bucket!r}")


def _check_seed(seed) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer ≥ 0, got {seed!r}")


def _check_outputs(manifest_path, out_path, remaining_out) -> None:
    """Refuse to write over the input manifest, or both outputs to one file."""
    source = os.path.realpath(manifest_path)
    targets = {"out": out_path, "remaining_out": remaining_out}
    for name, target in targets.items():
        if target is not None and os.path.realpath(target) == source:
            raise ValueError(f"{name} {os.fspath(target)!r} is the input manifest; write the split to another file")
    if remaining_out is not None and os.path.realpath(out_path) == os.path.realpath(remaining_out):
        raise ValueError(f"out and remaining_out are the same file {os.fspath(out_path)!r}")
