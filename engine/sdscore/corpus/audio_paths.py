"""Resolve relative audio paths against the manifest's folder (or its object-store prefix); absolute
paths and URIs (file:// too: the loaders read it as its path) stay as given.

Only strings change: no audio file is opened or even checked for existence here.
"""

from __future__ import annotations

import os
from typing import TypeVar

import polars as pl

from sdscore import storage
from sdscore.corpus.schemas import TURN, ManifestSpec, require_spec

Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)

#: "s3://", "gs://", "https://", "file://" …: a scheme, then "://".
_URI = r"^[A-Za-z][A-Za-z0-9+.\-]*://"
_WINDOWS_DRIVE = r"^[A-Za-z]:[\\/]"


def resolve_path(path: pl.Expr, base_dir: str) -> pl.Expr:
    """Join a String path expression onto base_dir unless it is absolute, a URI, "~/…", empty or null.

    base_dir may be an object-store URI (a manifest read from s3:// or gs://): relative paths then
    become URIs under it."""
    base_dir = os.fspath(base_dir)
    if storage.is_remote(base_dir):
        base = base_dir.rstrip("/") + "/"
    else:
        base = os.path.abspath(base_dir).rstrip(os.sep) + os.sep
    home = os.path.expanduser("~").rstrip(os.sep) + os.sep
    untouched = (
        path.is_null()
        | (path == "")
        | path.str.starts_with("/")
        | path.str.contains(_URI)
        | path.str.contains(_WINDOWS_DRIVE)
    )
    return (
        pl.when(untouched)
        .then(path)
        .when(path.str.starts_with("~/"))
        .then(pl.lit(home) + path.str.slice(2))
        .otherwise(pl.lit(base) + path.str.strip_prefix("./"))
    )


def resolve_audio_paths(frame: Frame, spec: ManifestSpec, base_dir: str) -> Frame:
    """Resolve the spec's audio columns, paths inside list columns and inside turn structs."""
    schema = frame.collect_schema() if isinstance(frame, pl.LazyFrame) else frame.schema
    audio_columns = require_spec(spec, "sdscore.corpus.resolve_audio_paths").audio_columns
    expressions = []
    for name, dtype in schema.items():
        if dtype == pl.List(TURN):
            audio = resolve_path(pl.field("audio_path"), base_dir).alias("audio_path")
            expressions.append(pl.col(name).list.eval(pl.element().struct.with_fields(audio)))
        elif name in audio_columns and dtype == pl.List(pl.String):
            expressions.append(pl.col(name).list.eval(resolve_path(pl.element(), base_dir)))
        elif name in audio_columns and dtype == pl.String:
            expressions.append(resolve_path(pl.col(name), base_dir))
    return frame.with_columns(expressions) if expressions else frame
