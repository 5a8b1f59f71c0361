"""A manifest file as read, before typing and validation: its frame and how to name its rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

#: Maps 0-based data-row indices to the labels that error messages use ("row 17").
RowLocator = Callable[[Sequence[int]], list[str]]

#: Internal column a format reader fills with "column 'x': problem" for rows it could not convert.
PARSE_ERROR = "_parse_error"


def data_row_labels(indices: Sequence[int]) -> list[str]:
    """Label rows by their 1-based data-row number (the header of a CSV is not a row)."""
    return [f"row {index + 1}" for index in indices]


@dataclass(frozen=True)
class RawTable:
    """One manifest as read: the frame, the file it came from, the folder its paths are relative to.

    protocol_hint is set by readers of formats that belong to one protocol (SDiaReward → reward).
    """

    frame: pl.LazyFrame
    source: str
    base_dir: str
    locate_rows: RowLocator = field(default=data_row_labels)
    protocol_hint: str | None = None
    format_name: str = "sdscore"
    #: the local file or folder the rows were read from (load_table sets it: a URI's cached copy)
    local_path: str | None = None
