"""Audio stored inside a table: HF `datasets` Audio columns (``{"bytes", "path"}`` structs).

RL and evaluation datasets are often saved with their audio embedded: `datasets` stores an Audio
column as a struct of the encoded file's bytes and its original path. Nothing is copied out of the
file: the Arrow and Parquet readers replace each struct with bytes by a reference to its cell,
``embedded://<file>#<row>/<column>[/<list index or field>...]`` (sdscore.audio.embedded_clips),
which every audio reader resolves by reading that clip's bytes from the file (Arrow memory-mapped)
and decoding them from memory exactly as a file with those bytes (WAV by the native core,
everything else by libsndfile); feature caches key it by its bytes, as a file. A struct without
bytes keeps its path (the manifest's folder resolves it, as for text paths); one with neither is
null. Structs may sit in an audio column, in a list column (turn paths) or in a turn struct's
``audio_path`` field. Finding which structs hold bytes reads only the bytes' lengths of an Arrow
file (its offsets), and a Parquet file's audio columns one batch at a time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.embedded_refs import SCHEME, describe, is_embedded, make_reference, parse_reference  # noqa: F401

CACHE_ENV = "SDSCORE_CACHE_DIR"
_BATCH_ROWS = 256  # Parquet rows whose audio columns are read at once to find the embedded clips


def cache_dir(kind: str) -> Path:
    """$SDSCORE_CACHE_DIR/<kind>, else ~/.cache/sdscore/<kind>."""
    base = os.environ.get(CACHE_ENV, "").strip() or os.path.join(os.path.expanduser("~"), ".cache", "sdscore")
    return Path(base) / kind


def is_audio_type(dtype) -> bool:
    """Whether an Arrow type is HF datasets' Audio storage: a struct with a binary `bytes` field."""
    import pyarrow as pa

    if not pa.types.is_struct(dtype):
        return False
    fields = {dtype.field(i).name: dtype.field(i).type for i in range(dtype.num_fields)}
    binary = fields.get("bytes")
    return (binary is not None and (pa.types.is_binary(binary) or pa.types.is_large_binary(binary))
            and set(fields) <= {"bytes", "path", "sampling_rate"})


def _has_audio(dtype) -> bool:
    import pyarrow as pa

    if is_audio_type(dtype):
        return True
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _has_audio(dtype.value_type)
    if pa.types.is_struct(dtype):
        return any(_has_audio(dtype.field(i).type) for i in range(dtype.num_fields))
    return False


def audio_columns(schema) -> list[str]:
    """The columns of an Arrow schema that hold Audio structs at any depth."""
    return [field.name for field in schema if _has_audio(field.type)]


def _path_type(dtype):
    """The Arrow type with every Audio struct replaced by a string (its path or reference)."""
    import pyarrow as pa

    if is_audio_type(dtype):
        return pa.string()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return pa.list_(_path_type(dtype.value_type))
    if pa.types.is_struct(dtype):
        fields = (dtype.field(i) for i in range(dtype.num_fields))
        return pa.struct([pa.field(field.name, _path_type(field.type)) for field in fields])
    return dtype


def _light(array):
    """`array` with every Audio struct's bytes replaced by their length (no byte is read or copied)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    dtype = array.type
    if is_audio_type(dtype):
        fields = dict(zip((dtype.field(i).name for i in range(dtype.num_fields)), array.flatten()))
        path = fields.get("path", pa.nulls(len(array), pa.string()))
        return pa.StructArray.from_arrays([pc.binary_length(fields["bytes"]), path], names=["n", "path"],
                                          mask=array.is_null())
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        if not _has_audio(dtype.value_type):
            return array
        kind = pa.ListArray if pa.types.is_list(dtype) else pa.LargeListArray
        return kind.from_arrays(array.offsets, _light(array.values), mask=array.is_null())
    if pa.types.is_struct(dtype) and _has_audio(dtype):
        names = [dtype.field(i).name for i in range(dtype.num_fields)]
        return pa.StructArray.from_arrays([_light(child) for child in array.flatten()], names=names,
                                          mask=array.is_null())
    return array


def _references(value: Any, dtype, file: str, row: int, steps: tuple[str, ...]) -> Any:
    import pyarrow as pa

    if value is None:
        return None
    if is_audio_type(dtype):
        if value["n"]:
            return make_reference(file, row, steps)
        return value["path"] or None
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [_references(v, dtype.value_type, file, row, (*steps, str(i))) for i, v in enumerate(value)]
    if pa.types.is_struct(dtype):
        return {f.name: _references(value.get(f.name), f.type, file, row, (*steps, f.name)) for f in dtype}
    return value


def _column_references(chunks, name: str, file: str, first_row: int):
    """Arrow arrays of one column's chunks (rows first_row... of `file`) with references for clips."""
    import pyarrow as pa

    out, row = [], first_row
    for chunk in chunks:
        values = _light(chunk).to_pylist()
        out.append(pa.array([_references(v, chunk.type, file, row + k, (name,)) for k, v in enumerate(values)],
                            type=_path_type(chunk.type)))
        row += len(chunk)
    return out


def arrow_references(table, file: str):
    """An Arrow table read from `file` (row k = the file's row k) with every embedded clip replaced
    by its reference and every bytes-less struct by its path."""
    import pyarrow as pa

    for name in audio_columns(table.schema):
        index = table.schema.get_field_index(name)
        chunks = _column_references(table.column(index).chunks, name, file, 0)
        column = pa.chunked_array(chunks, type=_path_type(table.schema.field(index).type))
        table = table.set_column(index, pa.field(name, column.type), column)
    return table


def parquet_references(parquet, file: str, frame: pl.LazyFrame) -> pl.LazyFrame:
    """`frame` (a scan of the Parquet file `file`, opened as `parquet`) with its Audio columns
    replaced by references and paths, found by reading those columns a batch of rows at a time."""
    import pyarrow as pa

    names = audio_columns(parquet.schema_arrow)
    if not names:
        return frame
    chunks: dict[str, list] = {name: [] for name in names}
    row = 0
    for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=names):
        for name in names:
            chunks[name] += _column_references([batch.column(name)], name, file, row)
        row += batch.num_rows
    series = []
    for name in names:
        dtype = _path_type(parquet.schema_arrow.field(name).type)
        series.append(pl.from_arrow(pa.chunked_array(chunks[name], type=dtype)).alias(name))
    return frame.with_columns(series)


def parquet_has_audio(path: str) -> bool:
    """Whether a Parquet file holds Audio structs (a reader turns them into references; a scan of
    the file itself would see the structs)."""
    import pyarrow.parquet as pq

    return bool(audio_columns(pq.read_schema(path)))
