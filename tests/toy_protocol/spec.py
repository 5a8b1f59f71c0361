"""The toy protocol's manifest: one row per clip, its words and (optionally) its audio. Its registry
entry names this module's SPEC; corpus/ reads and validates with it as handed down."""

import polars as pl

from sdscore.corpus.row_checks import RowCheck
from sdscore.corpus.schemas import make_spec

CLIPS = pl.Schema({"clip_id": pl.String, "words": pl.String, "audio_path": pl.String, "mood": pl.String})


def toy_row_checks() -> list[RowCheck]:
    """The spec's own rule: words must not hold a digit."""
    words = pl.col("words")
    return [RowCheck("words", words.str.contains(r"\d"), pl.format("'{}' holds a digit", words))]


SPEC = make_spec("toy", CLIPS, required=("clip_id", "words"), id_column="clip_id", unique_key=("clip_id",),
                 allowed_values={"mood": ("calm", "loud")}, audio_columns=("audio_path",),
                 row_checks=toy_row_checks)
