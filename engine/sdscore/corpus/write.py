"""write_manifest: save a manifest frame as Parquet or JSONL, atomically (temp file, then rename)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import polars as pl

from sdscore.errors import ManifestError

_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def write_manifest(frame: pl.DataFrame | pl.LazyFrame, path: str | os.PathLike) -> Path:
    """Write frame to path (format from the suffix); readers never see a half-written file.

    The temp file sits in the destination folder so os.replace is a same-filesystem rename.
    A LazyFrame is streamed to disk. Returns the path written.
    """
    target = Path(path)
    kind = _FORMATS.get(target.suffix.lower())
    if kind is None:
        raise ManifestError(
            f"{target}: cannot write a manifest as {target.suffix or '(no suffix)'!r}; use one of {', '.join(_FORMATS)}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    try:
        _write(frame, temp_name, kind)
        with open(temp_name, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(temp_name, 0o666 & ~_umask())
        os.replace(temp_name, target)
    except BaseException:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
        raise
    return target


def _write(frame: pl.DataFrame | pl.LazyFrame, path: str, kind: str) -> None:
    if isinstance(frame, pl.LazyFrame):
        if kind == "parquet":
            frame.sink_parquet(path)
        else:
            frame.sink_ndjson(path)
    elif kind == "parquet":
        frame.write_parquet(path)
    else:
        frame.write_ndjson(path)


def _umask() -> int:
    """The process umask (read by setting and restoring it: there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
