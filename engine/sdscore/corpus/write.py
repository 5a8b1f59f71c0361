"""write_manifest: save a manifest frame as Parquet or JSONL, atomically (temp file, then rename)."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from sdscore.atomic_write import atomic_path
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
    with atomic_path(target, durable=True) as temp:
        _write(frame, str(temp), kind)
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

