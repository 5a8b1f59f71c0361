"""read_manifest: open any supported manifest file or dataset folder as a validated polars frame.

Dispatch is by suffix or layout: a folder with a wav.scp is a Kaldi data directory, any other
folder a Hugging Face dataset; `.tar` is a WebDataset shard; `.jsonl(.gz)` whose first line is a
Lhotse cut, recording or supervision is a Lhotse manifest. The caller hands in the manifest's
ManifestSpec, or candidate specs to choose from by the format or the columns (corpus/ never looks a
protocol up by name: sdscore.read_manifest takes a registered protocol's name). Reading never
decodes audio: paths are only resolved as strings (a WebDataset shard's audio members are copied out
to files, see webdataset_format). A manifest may also be a file:// URI or an object or folder on a
store (s3://, gs://: see remote_manifest).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import polars as pl
import pyarrow as pa

from sdscore import storage
from sdscore.corpus.audio_paths import resolve_audio_paths
from sdscore.corpus.hf_dataset_format import read_dataset_folder, split_files
from sdscore.corpus.kaldi_format import WAV_SCP, is_kaldi_dir, read_kaldi_dir
from sdscore.corpus.lhotse_format import FORMAT_NAME as LHOTSE_FORMAT
from sdscore.corpus.lhotse_format import GROUPINGS
from sdscore.corpus.lhotse_format import first_row, is_lhotse_row, read_lhotse_manifest, recordings_path_for
from sdscore.corpus.native_format import (
    jsonl_objects,
    read_arrow,
    read_csv,
    read_json,
    read_jsonl,
    read_parquet,
)
from sdscore.corpus.raw_table import RawTable
from sdscore.corpus.remote_manifest import fetch_manifest
from sdscore.corpus.schemas import ManifestSpec, require_spec
from sdscore.corpus.validate import DEFAULT_MAX_ERRORS, validate_manifest
from sdscore.corpus.webdataset_format import read_webdataset_shard
from sdscore.errors import ManifestError

_READERS = {
    ".parquet": read_parquet,
    ".pq": read_parquet,
    ".jsonl": read_jsonl,
    ".ndjson": read_jsonl,
    ".json": read_json,
    ".csv": read_csv,
    ".tsv": functools.partial(read_csv, separator="\t"),
    ".arrow": read_arrow,
    ".feather": read_arrow,
    ".ipc": read_arrow,
    ".tar": read_webdataset_shard,
}


def read_manifest(
    path: str | os.PathLike,
    spec: ManifestSpec | Sequence[ManifestSpec],
    *,
    resolve_audio: bool = True,
    lazy: bool = False,
    errors: Literal["raise", "collect"] = "raise",
    max_errors: int = DEFAULT_MAX_ERRORS,
    lhotse_group_by: str | None = None,
) -> pl.DataFrame | pl.LazyFrame:
    """Read, type and validate a manifest; relative audio paths become paths under its folder.

    spec: the manifest's ManifestSpec, or a sequence of candidate specs: the one the file's format
    belongs to (an SDiaReward file holds reward pairs), else the one whose required columns it has.
    lazy=True returns a LazyFrame: Parquet and CSV stay scans, JSON(L) is parsed into Arrow first;
    either way the rows are validated in one pass before it returns.
    errors: "raise" (one ManifestError listing up to max_errors problems) or "collect" (an `error`
    column on bad rows; the others are kept). A missing id column is filled with the 0-based row number.
    lhotse_group_by: a Lhotse manifest's instances, "speaker" (all of a speaker's turns in the file,
    also when None) or "recording" (a speaker's turns in each recording; lhotse_format); given for
    another kind of manifest, it is refused (see load_table).
    """
    source = os.fspath(path)
    try:
        table = load_table(source, lhotse_group_by=lhotse_group_by)
        columns = table.frame.collect_schema()
        spec = choose_spec(table, columns.names(), spec)
        frame = with_ids(table.frame, columns.names(), spec)
        if not lazy:
            frame = frame.collect()
        frame = validate_manifest(
            frame, spec, table.source, errors=errors, max_errors=max_errors, locate_rows=table.locate_rows
        )
    except (pl.exceptions.PolarsError, pa.ArrowException) as error:
        raise ManifestError(_read_failure(source, error)) from error
    if resolve_audio:
        frame = resolve_audio_paths(frame, spec, table.base_dir)
    return frame


def load_table(path: str | os.PathLike, *, lhotse_group_by: str | None = None) -> RawTable:
    """Open a manifest as read, without typing or validating it: pick the reader by suffix.

    path: a local path, a file:// URI, or an object or folder on a store (s3://, gs://: read from a
    cached local copy, see remote_manifest; the table's source stays the URI and its base_dir the
    URI's prefix). Embedded audio (HF datasets' Audio structs) becomes references to the clips'
    cells, read from the file when the audio is loaded (embedded_audio).
    lhotse_group_by: how a Lhotse manifest's turns become instances (lhotse_format; None: by speaker);
    given for a manifest that is not a Lhotse CutSet or SupervisionSet, ManifestError (an option that
    would change nothing)."""
    try:
        source = storage.normalize(path)
    except storage.StorageError as error:
        raise ManifestError(str(error)) from None
    if storage.is_remote(source):
        table = _load_remote_table(source, lhotse_group_by)
    else:
        table = dataclasses.replace(_load_table(source, source, lhotse_group_by), local_path=source)
    if lhotse_group_by is not None and table.format_name != LHOTSE_FORMAT:
        raise ManifestError(f"{table.source}: lhotse_group_by (--lhotse-group-by) groups the turns of a Lhotse CutSet "
                            f"or SupervisionSet, and this manifest is not one; leave it out")
    return table


def collect_table(path: str | os.PathLike, what: str) -> tuple[RawTable, pl.DataFrame]:
    """load_table and the whole table in memory, for a side table (segments, conversations,
    metadata) read as it is; ManifestError "<source>: could not read the <what> (<the reader's
    first line>)" when it cannot be read."""
    table = load_table(path)
    try:
        return table, table.frame.collect()
    except pl.exceptions.PolarsError as error:
        text = str(error).strip()
        first_line = text.splitlines()[0] if text else type(error).__name__
        raise ManifestError(f"{table.source}: could not read the {what} ({first_line})") from None


def _load_remote_table(uri: str, lhotse_group_by: str | None = None) -> RawTable:
    """Read an object-store manifest from its local copy, named by its URI in the table and errors."""
    copy = fetch_manifest(uri)
    try:
        table = _load_table(copy.local, uri, lhotse_group_by)
    except ManifestError as error:
        raise ManifestError(copy.rename(str(error))) from None
    return dataclasses.replace(table, source=uri, base_dir=copy.to_uri(table.base_dir), local_path=copy.local)


def _load_table(path: str, source: str, lhotse_group_by: str | None = None) -> RawTable:
    """Read the local file or folder at path with the reader its name or layout calls for; source
    names it in messages."""
    if os.path.isdir(path):
        if is_kaldi_dir(path):
            return read_kaldi_dir(path, source)
        return read_dataset_folder(path, source)
    if not os.path.isfile(path):
        if os.path.exists(path):  # reading a FIFO would wait for a writer
            raise ManifestError(f"{source}: not a regular file or folder (a FIFO, socket or device is not read)")
        raise ManifestError(f"{source}: no such file or folder")
    grouping = GROUPINGS[0] if lhotse_group_by is None else lhotse_group_by
    base_dir = os.path.dirname(os.path.abspath(path))
    name = Path(path).name.lower()
    if name == WAV_SCP:
        return read_kaldi_dir(path, source)
    if name.endswith((".jsonl.gz", ".ndjson.gz")):
        if not is_lhotse_row(first_row(path, source)):
            raise ManifestError(f"{source}: a gzipped JSONL manifest must be a Lhotse CutSet, RecordingSet or "
                                "SupervisionSet; decompress other JSONL files")
        return read_lhotse_manifest(path, source, base_dir, grouping)
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson") and _first_line_is_lhotse(path):
        return read_lhotse_manifest(path, source, base_dir, grouping)
    reader = _READERS.get(suffix)
    if reader is None:
        raise ManifestError(
            f"{source}: unsupported manifest type {suffix or '(no suffix)'!r}; expected "
            f"{', '.join(_READERS)}, .jsonl.gz (Lhotse), wav.scp, a Kaldi data directory or a dataset folder"
        )
    return reader(path, source, base_dir)


#: The files of a Kaldi data directory that read_kaldi_dir reads (the rows' content).
_KALDI_TABLES = (WAV_SCP, "segments", "text", "utt2spk")
#: A dataset folder's metadata files (which splits and files make the dataset).
_DATASET_METADATA = ("dataset_dict.json", "state.json", "dataset_info.json")


def row_source_files(path: str | os.PathLike) -> list[Path]:
    """The files whose bytes define a manifest's rows, in a fixed order: the file itself (a
    WebDataset tar with its audio members), a Lhotse SupervisionSet's RecordingSet beside it, a
    Kaldi directory's tables (also for a wav.scp given alone), a dataset folder's metadata and split
    files. Resume hashes them (runtime/provenance.py): other files in those folders do not count."""
    source = Path(path)
    if source.is_dir():
        if is_kaldi_dir(source):
            return [source / name for name in _KALDI_TABLES if (source / name).is_file()]
        files = [source / name for name in _DATASET_METADATA if (source / name).is_file()]
        return files + [file for split in split_files(source).values() for file in split]
    if source.name.lower() == WAV_SCP:
        return [source.parent / name for name in _KALDI_TABLES if (source.parent / name).is_file()]
    recordings = recordings_path_for(str(source)) if "supervisions" in source.name else None
    return [source] + ([Path(recordings)] if recordings else [])


def _first_line_is_lhotse(path: str) -> bool:
    """Whether a JSONL file's first non-blank line is a Lhotse manifest row (reads that line only)."""
    import json

    with open(path, "rb") as handle:
        for line in handle:
            if line.strip():
                try:
                    return is_lhotse_row(json.loads(line))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    return False  # the JSONL reader names the bad line
    return False


def infer_spec(columns: list[str], specs: Sequence[ManifestSpec], source: str = "<frame>") -> ManifestSpec:
    """The one spec among specs whose required columns (its id aside, which can be filled) are all present."""
    specs = _candidates(specs)
    fits = [spec for spec in specs if all(column in columns for column in spec.required if column != spec.id_column)]
    if len(fits) == 1:
        return fits[0]
    if fits:
        raise ManifestError(
            f"{source}: the columns fit several protocols ({', '.join(spec.name for spec in fits)}); "
            "pass protocol= one of them"
        )
    needs = "; ".join(f"{spec.name}: {', '.join(spec.required)}" for spec in specs)
    raise ManifestError(
        f"{source}: cannot tell the protocol from the columns ({', '.join(columns) or 'none'}); "
        f"pass protocol= one of {', '.join(spec.name for spec in specs)} (required columns — {needs})"
    )


def choose_spec(table: RawTable, columns: list[str], spec: ManifestSpec | Sequence[ManifestSpec]) -> ManifestSpec:
    """The caller's spec — it must agree with the format's protocol — or, of candidate specs, the one
    the format belongs to, else the one the columns fit."""
    if isinstance(spec, ManifestSpec):
        if table.protocol_hint not in (None, spec.name):
            raise ManifestError(
                f"{table.source}: holds {table.format_name} rows for protocol '{table.protocol_hint}', not '{spec.name}'"
            )
        return spec
    specs = _candidates(spec)
    if table.protocol_hint is not None:
        for candidate in specs:
            if candidate.name == table.protocol_hint:
                return candidate
        raise ManifestError(
            f"{table.source}: holds {table.format_name} rows for protocol '{table.protocol_hint}', not one of "
            f"{', '.join(candidate.name for candidate in specs)}"
        )
    if not columns:
        raise ManifestError(f"{table.source}: the file holds no rows; pass protocol= to read it as empty")
    return infer_spec(columns, specs, table.source)


def _candidates(specs: Sequence[ManifestSpec]) -> tuple[ManifestSpec, ...]:
    """Candidate specs, checked: a name (or a list of names) is not a spec; none at all is refused."""
    if isinstance(specs, str):
        require_spec(specs, "sdscore.corpus.read_manifest")
    candidates = tuple(require_spec(spec, "sdscore.corpus.read_manifest") for spec in specs)
    if not candidates:
        raise ValueError("no candidate ManifestSpec given to choose from")
    return candidates


def with_ids(frame: pl.LazyFrame, columns: list[str], spec: ManifestSpec) -> pl.LazyFrame:
    """Give a frame its id column: an "id" column renamed, else the 0-based row number as text."""
    if not columns:
        return pl.LazyFrame(schema=spec.schema)
    id_column = spec.id_column
    if id_column in columns:
        return frame
    if "id" in columns:
        return frame.rename({"id": id_column})
    return frame.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).cast(pl.String).alias(id_column))


def _read_failure(source: str, error: Exception) -> str:
    """Say why the file could not be read; for JSONL, find the first line that is not JSON."""
    if Path(source).suffix.lower() in (".jsonl", ".ndjson") and os.path.isfile(source):
        try:
            for _row in jsonl_objects(source, source):
                pass
        except ManifestError as bad_line:
            return str(bad_line)
    text = str(error).strip()
    first_line = text.splitlines()[0] if text else type(error).__name__
    return f"{source}: could not read the manifest ({first_line})"
