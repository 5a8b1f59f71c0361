"""Read manifests with polars' native readers: sdscore Parquet, JSONL and JSON arrays, and CSV/TSV.

Audio embedded in Arrow and Parquet files (HF Audio structs) becomes references to its cells
(sdscore.corpus.embedded_audio): no clip is copied out of the file.

Known columns are read leniently (numbers as text, turn fields as text) so that a bad value is a
row-numbered validation problem rather than a parse failure of the whole file. SDiaReward and HCoT
rows found in these files are handed to their converters.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import Any

import polars as pl

from sdscore.corpus import sdiareward_format
from sdscore.corpus.embedded_audio import arrow_references, parquet_references
from sdscore.corpus.hcot_format import dataset_name, is_hcot_row, read_hcot_rows
from sdscore.corpus.raw_table import PARSE_ERROR, RawTable, data_row_labels
from sdscore.corpus.row_locations import jsonl_row_locator
from sdscore.corpus.schemas import BATTLES, CONSISTENCY_INSTANCES, JUDGE_ITEMS, NATURALNESS_ITEMS, REWARD_PAIRS, TURN
from sdscore.corpus.sdiareward_format import (
    is_sdiareward_arrow_schema,
    is_sdiareward_row,
    read_sdiareward_batches,
    read_sdiareward_jsonl,
    read_sdiareward_parquet,
    read_sdiareward_rows,
)
from sdscore.errors import ManifestError


def _lenient(dtype: pl.DataType) -> pl.DataType:
    """The dtype to read a column as: text for scalars, lists of text, turns with text fields."""
    if dtype == pl.List(TURN):
        return dtype
    if isinstance(dtype, pl.List):
        return pl.List(pl.String)
    return pl.String


#: Every column of the schemas here (their dtypes agree across them) → the dtype to read it as.
LENIENT_DTYPES: dict[str, pl.DataType] = {
    name: _lenient(dtype)
    for schema in (REWARD_PAIRS, JUDGE_ITEMS, CONSISTENCY_INSTANCES, NATURALNESS_ITEMS, BATTLES)
    for name, dtype in schema.items()
}


def read_parquet(path: str, source: str, base_dir: str) -> RawTable:
    """Scan a Parquet file; one whose turns carry SDiaReward "content" is converted batch by batch."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, ValueError) as error:  # pyarrow raises ArrowInvalid (a ValueError) on garbage
        raise ManifestError(f"{source}: not a readable Parquet file ({error})") from error
    if is_sdiareward_arrow_schema(parquet.schema_arrow):
        return read_sdiareward_parquet(path, source, base_dir)
    return RawTable(parquet_references(parquet, path, pl.scan_parquet(path)), source, base_dir)


def read_jsonl(path: str, source: str, base_dir: str) -> RawTable:
    """Scan a JSONL file (one object a line; blank lines skipped); rows are labelled by line."""
    check_utf8(path, source)  # pyarrow's reader passes invalid UTF-8 on into the strings
    first = _first_jsonl_row(path, source)
    if is_sdiareward_row(first):
        return read_sdiareward_jsonl(path, source, base_dir)
    if is_hcot_row(first):
        rows = list(jsonl_objects(path, source))
        return read_hcot_rows(rows, source, base_dir, dataset_name(path), jsonl_row_locator(path))
    if first is _NO_ROWS:
        return RawTable(pl.LazyFrame(), source, base_dir)
    return RawTable(_jsonl_frame(path, source, arrow=isinstance(first, dict)), source, base_dir,
                    jsonl_row_locator(path))


def _jsonl_frame(path: str, source: str, arrow: bool = True) -> pl.LazyFrame:
    """pyarrow's JSON reader when every row agrees on types (far faster and leaner than polars' on
    nested turns); otherwise polars, with known columns read as text and typed later row by row;
    when a value does not even have its column's shape (text where turns belong), row by row in
    Python, where that value becomes the row's parse error and the other rows are kept.
    arrow=False skips pyarrow: its reader crashes the process (pyarrow 26) on a file whose first
    line is `null`."""
    import pyarrow as pa
    import pyarrow.json as pa_json

    if arrow:
        try:
            return pl.from_arrow(pa_json.read_json(path)).lazy()
        except pa.ArrowInvalid:
            pass
    try:
        # Infer from every row: a column absent from the first rows must not be dropped.
        present = pl.scan_ndjson(path, infer_schema_length=None).collect_schema()
        schema = pl.Schema({name: LENIENT_DTYPES.get(name, dtype) for name, dtype in present.items()})
        return pl.scan_ndjson(path, schema=schema).collect().lazy()
    except pl.exceptions.PolarsError:
        return _checked_rows_frame(list(jsonl_objects(path, source))).lazy()


def _shape_problem(value: Any, dtype: pl.DataType) -> str | None:
    """Why a JSON value cannot fill a column of dtype (None if it can; text is typed later)."""
    if value is None:
        return None
    if isinstance(dtype, pl.List):
        if not isinstance(value, list):
            return f"is {type(value).__name__}, expected a list"
        inner = dtype.inner
        for i, element in enumerate(value):
            if isinstance(inner, pl.Struct) and not (element is None or isinstance(element, dict)):
                return f"element {i} is {type(element).__name__}, expected an object"
            if not isinstance(inner, pl.Struct) and isinstance(element, (dict, list)):
                return f"element {i} is {type(element).__name__}, expected a value"
        return None
    if isinstance(value, (dict, list)):
        return f"is {type(value).__name__}, expected a value"
    return None


def _lenient_value(value: Any, dtype: pl.DataType) -> Any:
    """Scalars of text columns as text, list elements likewise, turn fields as text."""
    if value is None:
        return None
    if isinstance(dtype, pl.List):
        if isinstance(dtype.inner, pl.Struct):
            return [None if e is None else {k: None if v is None else str(v) for k, v in e.items()} for e in value]
        return [None if e is None else str(e) for e in value]
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)


def _checked_rows_frame(rows: list[Any]) -> pl.DataFrame:
    """Rows of known columns whose values do not fit their column's shape: those values null,
    a `_parse_error` naming them; unknown columns kept as text."""
    names = list(dict.fromkeys(name for row in rows if isinstance(row, dict) for name in row))
    schema = pl.Schema({name: LENIENT_DTYPES.get(name, pl.String) for name in names})
    columns: dict[str, list] = {name: [] for name in names}
    problems: list[str | None] = []
    for n, row in enumerate(rows):
        row = row if isinstance(row, dict) else {}
        found = [] if rows[n] is row else [f"row is {type(rows[n]).__name__}, expected an object"]
        for name in names:
            value, dtype = row.get(name), schema[name]
            problem = _shape_problem(value, dtype)
            if problem is not None:
                found.append(f"column '{name}': {problem}")
                value = None
            columns[name].append(_lenient_value(value, dtype))
        problems.append("; ".join(found) or None)
    # the error column built with the others: rows that are no objects at all leave no other column
    return pl.DataFrame({**columns, PARSE_ERROR: problems}, schema={**schema, PARSE_ERROR: pl.String})


def read_json(path: str, source: str, base_dir: str) -> RawTable:
    """Read a JSON array of rows: SDiaReward pairs, HCoT items, or sdscore rows of any protocol."""
    try:
        with open(path, "rb") as handle:
            rows = json.load(handle)
    except json.JSONDecodeError as error:
        raise ManifestError(
            f"{source}: not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from error
    if not isinstance(rows, list):
        raise ManifestError(f"{source}: expected a JSON array of rows, found {type(rows).__name__}")
    first = rows[0] if rows else None
    if is_sdiareward_row(first):
        return read_sdiareward_rows(rows, source, base_dir)
    if is_hcot_row(first):
        return read_hcot_rows(rows, source, base_dir, dataset_name(path))
    if not all(isinstance(row, dict) for row in rows):
        bad = next(i for i, row in enumerate(rows) if not isinstance(row, dict))
        raise ManifestError(f"{source}: row {bad + 1} is {type(rows[bad]).__name__}, expected an object")
    if not rows:
        return RawTable(pl.LazyFrame(), source, base_dir)
    names = {name for row in rows for name in row}
    overrides = {name: LENIENT_DTYPES[name] for name in names if name in LENIENT_DTYPES}
    try:
        frame = pl.read_json(path, schema_overrides=overrides, infer_schema_length=None)
    except pl.exceptions.PolarsError:  # a value without its column's shape: that row's error, not the file's
        frame = _checked_rows_frame(rows)
    return RawTable(frame.lazy(), source, base_dir, data_row_labels)


def read_csv(path: str, source: str, base_dir: str, separator: str = ",") -> RawTable:
    """Scan a CSV/TSV table (SPEARBench metadata, battles, any flat protocol) as text; validation types it."""
    if is_blank_file(path):  # polars would raise NoDataError when the schema is first asked for
        raise ManifestError(f"{source}: the file is empty (no header line and no rows)")
    frame = pl.scan_csv(path, separator=separator, infer_schema=False)
    return RawTable(frame, source, base_dir, data_row_labels)


def is_blank_file(path: str, chunk_bytes: int = 1 << 16) -> bool:
    """True when a text file holds nothing but whitespace and a UTF-8 byte-order mark (reads up to
    its first other byte)."""
    with open(path, "rb") as handle:
        head = handle.read(chunk_bytes)
        if head.startswith(b"\xef\xbb\xbf"):
            head = head[3:]
        while head:
            if head.strip():
                return False
            head = handle.read(chunk_bytes)
    return True


def read_arrow(path: str, source: str, base_dir: str) -> RawTable:
    """Read an Arrow IPC file or stream (HF `save_to_disk` writes streams), SDiaReward or sdscore rows."""
    import pyarrow as pa

    schema, batches = arrow_batches(path, source)
    table = pa.Table.from_batches(list(batches), schema=schema)
    if is_sdiareward_arrow_schema(schema):
        converted = sdiareward_format.columnar_pairs(pl.from_arrow(table).lazy())
        if converted is None:
            return read_sdiareward_batches(table.to_batches(), source, base_dir)
        return RawTable(converted, source, base_dir, data_row_labels, "reward", "SDiaReward")
    return RawTable(pl.from_arrow(arrow_references(table, path)).lazy(), source, base_dir, data_row_labels)


def arrow_batches(path: str, source: str) -> tuple[Any, Iterator[Any]]:
    """The schema and record batches of an Arrow IPC stream (HF's layout) or IPC file."""
    import pyarrow as pa

    try:  # memory-mapped: the batches are views of the file (embedded audio is not read into memory)
        stream = pa.ipc.open_stream(pa.memory_map(path))
        return stream.schema, iter(stream)
    except pa.ArrowInvalid:
        pass
    try:
        file = pa.ipc.open_file(pa.memory_map(path))
    except pa.ArrowInvalid as error:
        raise ManifestError(f"{source}: not a readable Arrow file ({error})") from error
    return file.schema, (file.get_batch(i) for i in range(file.num_record_batches))


def check_utf8(path: str, source: str, chunk_bytes: int = 1 << 20) -> None:
    """ManifestError naming the line of the first byte that is not UTF-8 (one streaming pass)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines_before = 1
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(chunk_bytes)
            pending = len(decoder.getstate()[0])  # the previous chunk's unfinished character
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                line = lines_before + chunk.count(b"\n", 0, max(error.start - pending, 0))
                raise ManifestError(f"{source}: line {line} is not valid UTF-8 text") from None
            if not chunk:
                return
            lines_before += chunk.count(b"\n")


def jsonl_objects(path: str, source: str) -> Iterator[Any]:
    """Parse the non-blank lines of a JSONL file; a bad line is a ManifestError naming it."""
    with open(path, "rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                raise ManifestError(f"{source}: line {line_number} is not valid JSON ({error.msg})") from error


#: what _first_jsonl_row gives for a file with no rows (a first line `null` is a row: a bad one)
_NO_ROWS = object()


def _first_jsonl_row(path: str, source: str) -> Any:
    for row in jsonl_objects(path, source):
        return row
    return _NO_ROWS
