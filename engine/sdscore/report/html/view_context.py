"""What a protocol's view gets: its metrics, its results frames, and the means to show items and plots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.report.html.elements import Table, text
from sdscore.report.html.items import ItemFinder

#: The headline table's columns.
HEADLINE_HEADERS = ["metric", "value", "CI 95 % low", "CI 95 % high"]


@dataclass
class ViewContext:
    """source: the name metric cells carry; results: (path, frame) per results file (arena: the battles);
    finders: each file's items, matched by the ManifestSpec the view's protocol handed in."""

    source: str
    metrics: Mapping[str, Any]
    results: list[tuple[Path, pl.DataFrame]]
    finders: list[ItemFinder]

    def headline(self, rows: list[list], note: str = "") -> Table:
        """The headline table; the CI columns only when some row has a CI."""
        if any(cell.path is not None for row in rows for cell in row[2:]):
            return Table("Headline", HEADLINE_HEADERS, rows, note)
        return Table("Headline", HEADLINE_HEADERS[:2], [row[:2] for row in rows], note)


def headline_row(name: str, cell, ci: list | None = None) -> list:
    return [text(name), cell, *(ci or [text("—"), text("—")])]
