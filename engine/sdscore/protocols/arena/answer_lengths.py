"""Answer lengths for the arena's length bias, read from the answers' audio when the manifest has none.

S2S-Arena's length bias compares the durations of the winning and losing answers. A battles manifest
may give them (length_a / length_b, seconds) or only the audio (audio_a_path / audio_b_path): then
each missing length is the file's duration from its header (sdscore.audio.checks.header_seconds, no
decoding). A file that is missing or unreadable leaves that length null — the battle drops out of
the length bias only — and gives a warning naming the battle and the file.
"""

from __future__ import annotations

import polars as pl

from sdscore.audio.checks import header_seconds

SIDES = (("length_a", "audio_a_path"), ("length_b", "audio_b_path"))


def with_answer_durations(battles: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """(battles with null lengths filled from their audio headers, warnings about files that failed)."""
    if not any(path in battles.columns for _, path in SIDES):
        return battles, []
    seconds: dict[str, float | None] = {}
    warnings: list[str] = []
    columns = {}
    ids = battles["battle_id"].to_list() if "battle_id" in battles.columns else list(range(battles.height))
    for length, path_column in SIDES:
        if path_column not in battles.columns:
            continue
        lengths = battles[length].to_list() if length in battles.columns else [None] * battles.height
        filled = []
        for battle, value, path in zip(ids, lengths, battles[path_column].to_list()):
            if value is None and path is not None:
                if path not in seconds:
                    seconds[path] = header_seconds(path)
                value = seconds[path]
                if value is None:
                    warnings.append(f"battle {battle}: cannot read the duration of {path} ({path_column}: "
                                    f"missing or unreadable audio); it is left out of the length bias")
            filled.append(value)
        columns[length] = pl.Series(length, filled, dtype=pl.Float64)
    return battles.with_columns(**columns), warnings
