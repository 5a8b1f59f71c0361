"""The rows a write-back (write_back.py) adds results to: the input read again as the run read it, and
the results checked to hold its rows in the same order. Shared by the writers of each input kind
(hf_write_back, lhotse_write_back, kaldi_write_back), below write_back.py, which picks among them."""

from __future__ import annotations

import os

import polars as pl

from sdscore.corpus.read import load_table, with_ids
from sdscore.corpus.schemas import ManifestSpec, require_spec
from sdscore.errors import SdscoreError

OPTION = "--write-back"
COMMAND = "sdscore score --write-back"


def input_rows(manifest: str | os.PathLike, spec: ManifestSpec, columns: tuple[str, ...] = (),
               lhotse_group_by: str | None = None) -> pl.DataFrame:
    """The id column (and `columns`) of the manifest's rows, read as the run read them."""
    table = load_table(manifest, lhotse_group_by=lhotse_group_by)
    frame = with_ids(table.frame, table.frame.collect_schema().names(), spec)
    return frame.select(pl.col(spec.id_column).cast(pl.String), *columns).collect()


def aligned_results(manifest: str | os.PathLike, results: str | os.PathLike, spec: ManifestSpec,
                    columns: tuple[str, ...] = (),
                    lhotse_group_by: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(results, the input's rows): the results Parquet checked to hold the manifest's rows in order."""
    spec = require_spec(spec, "write_back")
    frame = pl.read_parquet(results)
    rows = input_rows(manifest, spec, columns, lhotse_group_by)
    if spec.id_column not in frame.columns:
        raise SdscoreError(f"{results}: the results have no {spec.id_column!r} column to match {manifest} by")
    if frame.height != rows.height:
        raise SdscoreError(f"{results}: {frame.height} result rows but {manifest} holds {rows.height}; "
                           f"{OPTION} needs the results of this manifest")
    ids = frame[spec.id_column].cast(pl.String)
    differ = (ids != rows[spec.id_column]).fill_null(True) & ~(ids.is_null() & rows[spec.id_column].is_null())
    if differ.any():
        row = int(differ.arg_max())
        raise SdscoreError(f"{results}: row {row + 1} is {ids[row]!r} but {manifest}'s row {row + 1} is "
                           f"{rows[spec.id_column][row]!r}; {OPTION} needs the results of this manifest")
    return frame, rows


def added_columns(results: pl.DataFrame, spec: ManifestSpec) -> list[str]:
    """The result columns a write-back adds: all but the manifest's own columns the results repeat."""
    return [c for c in results.columns if c not in spec.schema.names() and c != spec.id_column]
