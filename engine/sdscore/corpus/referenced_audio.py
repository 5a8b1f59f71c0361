"""The audio files a manifest refers to, listed without touching them."""

from __future__ import annotations

import polars as pl

from sdscore.corpus.schemas import TURN, ManifestSpec, require_spec


def audio_paths(frame: pl.DataFrame, spec: ManifestSpec) -> list[str]:
    """Distinct audio paths referenced by a manifest frame (columns and turn structs), first-seen order."""
    audio_columns = require_spec(spec, "sdscore.corpus.audio_paths").audio_columns
    series: list[pl.Series] = []
    for name, dtype in frame.schema.items():
        if dtype == pl.List(TURN):
            series.append(frame.get_column(name).explode().struct.field("audio_path"))
        elif name in audio_columns:
            column = frame.get_column(name)
            series.append(column.explode() if dtype == pl.List(pl.String) else column)
    if not series:
        return []
    paths = pl.concat([s.cast(pl.String).alias("path") for s in series]).drop_nulls()
    return paths.filter(paths != "").unique(maintain_order=True).to_list()
