"""A manifest read in row windows: at most one window of rows in memory, plus the frame of keys.

The manifest is opened once (any format sdscore.corpus reads; one on an object store through its
cached local copy), with the reader options the caller passes (load_table's keywords, e.g. how a
Lhotse manifest's turns are grouped; this module does not look into them). A plain Parquet file is
scanned in place; any other format is first streamed into a Parquet staging file, so every window is
a cheap row-group slice. The unique-key columns of all rows are read once: they give the row count, the
duplicate-key check across windows and the manifest's fingerprint for resume. Each window is typed,
validated in "collect" mode (a bad row keeps its place and gets its error, numbered as in the
file) and its audio paths resolved, exactly as read_manifest would do for the whole file; audio
slices it points at (X_offset / X_duration columns) are cut into the staging folder (audio_slices).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.corpus.audio_paths import resolve_audio_paths
from sdscore.corpus.embedded_audio import parquet_has_audio
from sdscore.corpus.read import choose_spec, load_table, with_ids
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.validate import manifest_first_rows, validate_manifest
from sdscore.errors import ManifestError
from sdscore.runtime.audio_slices import cut_slices

_PARQUET = (".parquet", ".pq")


class ManifestWindows:
    """Windows [k * rows, (k + 1) * rows) of a validated manifest; `staging_dir` holds a Parquet copy
    of a manifest that is not plain Parquet (the caller removes it); read_options: keywords of
    corpus.read.load_table."""

    def __init__(self, path: str | os.PathLike, spec: ManifestSpec | Sequence[ManifestSpec],
                 staging_dir: str | os.PathLike, read_options: Mapping[str, Any] | None = None):
        self.path = os.fspath(path)
        self.slice_dir = os.path.join(os.fspath(staging_dir), "slices")
        table = load_table(self.path, **(read_options or {}))
        columns = table.frame.collect_schema().names()
        self.spec = choose_spec(table, columns, spec)
        self.protocol = self.spec.name
        self.source, self.base_dir = table.source, table.base_dir
        self.local_path = table.local_path or self.path  # a URI's cached copy (fingerprinted for resume)
        frame = with_ids(table.frame, columns, self.spec)
        local = self.local_path
        if (Path(local).suffix.lower() in _PARQUET and table.format_name == "sdscore" and os.path.isfile(local)
                and not parquet_has_audio(local)):  # embedded audio: staged as references to its cells
            self.scan_path = local
        else:
            self.scan_path = os.path.join(os.fspath(staging_dir), "manifest.parquet")
            try:
                frame.sink_parquet(self.scan_path)
            except (pl.exceptions.PolarsError, OSError) as error:
                raise ManifestError(f"{self.source}: could not read the manifest ({error})") from error
        scan = pl.scan_parquet(self.scan_path)
        # file-level problems (a missing required column, a column of the wrong kind) stop the run
        # here, before any model loads; row problems become the rows' errors, window by window
        validate_manifest(scan.head(0).collect(), self.spec, self.source, errors="collect")
        try:
            keys = self._keys(scan)
        except pl.exceptions.PolarsError as error:  # e.g. a corrupt data page under good metadata
            raise ManifestError(f"{self.source}: could not read the manifest's key columns ({error})") from error
        self.n_rows = keys.height
        self.first_rows = manifest_first_rows(keys, self.spec)
        self.keys_digest = _frame_digest(keys)

    def _keys(self, scan: pl.LazyFrame) -> pl.DataFrame:
        names = scan.collect_schema().names()
        spec = self.spec
        return scan.select(
            (pl.col(c).cast(pl.String) if c in names else pl.lit(None, pl.String)).alias(c) for c in spec.unique_key
        ).collect()

    def window(self, start: int, stop: int) -> pl.DataFrame:
        """Rows [start, stop) typed and validated (bad rows carry `error`), audio paths resolved."""
        return self.reader().window(start, stop, self.first_rows[start:stop])

    def reader(self) -> WindowReader:
        """A small picklable reader of this manifest's windows (for worker processes and Ray tasks)."""
        return WindowReader(self.scan_path, self.spec, self.source, self.base_dir, self.slice_dir)


class WindowReader:
    """Reads windows of the (staged) manifest, given each window's slice of `first_rows`; `scan_path` may
    also be the staged file's bytes (a Ray actor's copy; then give `slice_dir`)."""

    def __init__(self, scan_path: str | bytes, spec: ManifestSpec, source: str, base_dir: str, slice_dir: str | None = None):
        self.scan_path, self.spec, self.source, self.base_dir = scan_path, spec, source, base_dir
        self.slice_dir = slice_dir  # where audio slices are cut (None: beside the staged manifest)

    def window(self, start: int, stop: int, first_rows: pl.Series) -> pl.DataFrame:
        """Rows [start, stop) typed and validated in collect mode, numbered as in the file, paths resolved."""
        try:
            raw = pl.scan_parquet(self.scan_path).slice(start, stop - start).collect()
        except pl.exceptions.PolarsError as error:  # a corrupt data page: its rows cannot be told apart
            raise ManifestError(f"{self.source}: could not read rows {start + 1}-{stop} of the manifest "
                                f"({error})") from error
        frame = validate_manifest(raw, self.spec, self.source, errors="collect", row_offset=start,
                                  first_rows=first_rows)
        frame = resolve_audio_paths(frame, self.spec, self.base_dir)
        slice_dir = self.slice_dir or os.path.join(os.path.dirname(self.scan_path), "slices")
        return cut_slices(frame, self.spec, slice_dir)


def _frame_digest(frame: pl.DataFrame, chunk: int = 65536) -> str:
    """A digest of a frame's text values in order (stable across polars versions, unlike hash_rows),
    fed a slice at a time so a million keys never become one string."""
    digest = hashlib.blake2b(f"{frame.height}|".encode(), digest_size=16)
    for start in range(0, frame.height if frame.width else 0, chunk):
        rows = frame.slice(start, chunk).select(pl.concat_str(pl.all().fill_null("\x00"), separator="\x1f"))
        digest.update("\x1e".join(rows.to_series().to_list()).encode("utf-8", "surrogatepass") + b"\x1e")
    return digest.hexdigest()
