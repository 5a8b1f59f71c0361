"""Audio stored inside a table: HF `datasets` Audio columns (``{"bytes", "path"}`` structs).

RL and evaluation datasets are often saved with their audio embedded: `datasets` stores an Audio
column as a struct of the encoded file's bytes and its original path. Every protocol loads audio by
path and caches features by file content, so each embedded file is written once to a
content-addressed cache, ``$SDSCORE_CACHE_DIR/embedded-audio/<sha256>.<ext>`` (default
``~/.cache/sdscore``), and the struct becomes that path; it is then decoded like any file (WAV by
the native core, everything else by soundfile). A struct without bytes keeps its path (the
manifest's folder resolves it, as for text paths); one with neither is null. Structs may sit in
an audio column, in a list column (turn paths) or in a turn struct's ``audio_path`` field.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.atomic_write import atomic_path
from sdscore.errors import ManifestError

CACHE_ENV = "SDSCORE_CACHE_DIR"

_MAGIC = ((b"RIFF", ".wav"), (b"RF64", ".wav"), (b"fLaC", ".flac"), (b"OggS", ".ogg"), (b"ID3", ".mp3"),
          (b"FORM", ".aiff"))
_KNOWN_SUFFIXES = {".wav", ".flac", ".ogg", ".opus", ".mp3", ".aiff", ".aif", ".sph", ".au"}


def cache_dir(kind: str) -> Path:
    """$SDSCORE_CACHE_DIR/<kind>, else ~/.cache/sdscore/<kind>."""
    base = os.environ.get(CACHE_ENV, "").strip() or os.path.join(os.path.expanduser("~"), ".cache", "sdscore")
    return Path(base) / kind


def is_audio_struct(dtype: pl.DataType) -> bool:
    """Whether `dtype` is HF datasets' Audio storage: a struct with a binary `bytes` field."""
    if not isinstance(dtype, pl.Struct):
        return False
    fields = {f.name: f.dtype for f in dtype.fields}
    return fields.get("bytes") == pl.Binary and set(fields) <= {"bytes", "path", "sampling_rate"}


def _has_audio_struct(dtype: pl.DataType) -> bool:
    if is_audio_struct(dtype):
        return True
    if isinstance(dtype, (pl.List, pl.Array)):
        return _has_audio_struct(dtype.inner)
    if isinstance(dtype, pl.Struct):
        return any(_has_audio_struct(f.dtype) for f in dtype.fields)
    return False


def _path_dtype(dtype: pl.DataType) -> pl.DataType:
    if is_audio_struct(dtype):
        return pl.String
    if isinstance(dtype, (pl.List, pl.Array)):
        return pl.List(_path_dtype(dtype.inner))
    if isinstance(dtype, pl.Struct):
        return pl.Struct([pl.Field(f.name, _path_dtype(f.dtype)) for f in dtype.fields])
    return dtype


def _suffix(data: bytes, path: str | None) -> str:
    suffix = Path(path or "").suffix.lower()
    if suffix in _KNOWN_SUFFIXES:
        return suffix
    for magic, ext in _MAGIC:
        if data.startswith(magic):
            return ext
    return ".audio"  # soundfile sniffs the container from the content


def write_embedded(data: bytes, path: str | None, folder: Path) -> str:
    """The cache file holding `data` (written once, atomically; named by its SHA-256)."""
    target = folder / (hashlib.sha256(data).hexdigest() + _suffix(data, path))
    if not target.is_file() or target.stat().st_size != len(data):
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_path(target) as temp:
            Path(temp).write_bytes(data)
    return str(target)


def _to_paths(value: Any, dtype: pl.DataType, folder: Path) -> Any:
    if value is None:
        return None
    if is_audio_struct(dtype):
        data, path = value.get("bytes"), value.get("path")
        if data:
            return write_embedded(bytes(data), path, folder)
        return path or None
    if isinstance(dtype, (pl.List, pl.Array)):
        return [_to_paths(v, dtype.inner, folder) for v in value]
    if isinstance(dtype, pl.Struct):
        return {f.name: _to_paths(value.get(f.name), f.dtype, folder) for f in dtype.fields}
    return value


def embedded_audio_to_paths(frame: pl.LazyFrame, source: str, folder: Path | None = None) -> pl.LazyFrame:
    """`frame` with every embedded-audio struct (at any depth) replaced by its cache file's path."""
    schema = frame.collect_schema()
    columns = [name for name, dtype in schema.items() if _has_audio_struct(dtype)]
    if not columns:
        return frame
    folder = folder or cache_dir("embedded-audio")

    def convert(series: pl.Series) -> pl.Series:
        out_dtype = _path_dtype(series.dtype)
        try:
            values = [_to_paths(v, series.dtype, folder) for v in series.to_list()]
        except OSError as exc:
            raise ManifestError(f"{source}: cannot write embedded audio of column {series.name!r} to {folder} "
                                f"({exc.strerror or exc}); set ${CACHE_ENV} to a writable folder") from None
        return pl.Series(series.name, values, dtype=out_dtype)

    return frame.with_columns(pl.col(name).map_batches(convert, return_dtype=_path_dtype(schema[name]))
                              for name in columns)
