"""Slice columns: an audio column X may come with X_offset and X_duration (seconds into the file).

Readers of formats that point into long recordings (Kaldi `segments`, Lhotse cuts) fill them; the
runtime cuts those slices out before a Scorer sees the rows (sdscore.runtime.audio_slices). They
have X's shape: a float per path for a path column, a list of floats for a list of paths. A null
offset means 0, a null duration "to the end of the file".
"""

from __future__ import annotations


def offset_column(audio_column: str) -> str:
    """Name of the column holding the slice offsets of audio_column."""
    return f"{audio_column}_offset"


def duration_column(audio_column: str) -> str:
    """Name of the column holding the slice durations of audio_column."""
    return f"{audio_column}_duration"
