"""Row labels for JSONL files: data rows skip blank lines, so messages also give the line number."""

from __future__ import annotations

from collections.abc import Sequence

from sdscore.corpus.raw_table import RowLocator


def jsonl_row_locator(path: str) -> RowLocator:
    """Return a locator labelling data rows of a JSONL file as "row N", or "row N (line M)" when they differ.

    It reads the file only when called, which happens on the error path alone.
    """

    def locate(indices: Sequence[int]) -> list[str]:
        lines = jsonl_line_numbers(path, indices)
        labels = []
        for index in indices:
            row, line = index + 1, lines.get(index)
            labels.append(f"row {row}" if line in (None, row) else f"row {row} (line {line})")
        return labels

    return locate


def jsonl_line_numbers(path: str, indices: Sequence[int]) -> dict[int, int]:
    """Map 0-based data-row indices of a JSONL file to 1-based line numbers (blank lines hold no row)."""
    wanted = set(indices)
    found: dict[int, int] = {}
    if not wanted:
        return found
    last = max(wanted)
    row = -1
    with open(path, "rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row += 1
            if row in wanted:
                found[row] = line_number
            if row >= last:
                break
    return found
