"""The report's building blocks: metric cells, tables, figures and item lists, rendered by the templates.

A metric cell keeps the path of its value inside the section's METRICS.json and the full-precision
value beside the rounded text, so a reader (or the browser test) can check every number shown
against the file it came from. Everything here is plain data; the templates autoescape all text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Digits shown for fractions (accuracies, rates) unless a view asks for others.
DEFAULT_DIGITS = 3
_MISSING = object()


@dataclass(frozen=True)
class Cell:
    """A table cell: text, optionally a metric (source: the section's metrics name, path: keys into its
    METRICS.json, value: the value there) and a shade in [0, 1] for heat-map tables."""

    text: str
    source: str | None = None
    path: tuple[str | int, ...] | None = None
    value: Any = None
    shade: float | None = None
    sort_key: str | None = None  # what the sortable table sorts by (defaults to the text)
    hint: str | None = None  # shown on hover (e.g. why a value is undefined)

    @property
    def is_number(self) -> bool:
        return self.path is not None and isinstance(self.value, (int, float)) and not isinstance(self.value, bool)

    @property
    def metric_name(self) -> str:
        return f"{self.source}:" + ".".join(str(p) for p in self.path or ())

    @property
    def value_json(self) -> str:
        return json.dumps(self.value)

    @property
    def path_json(self) -> str:
        return json.dumps(list(self.path or ()))

    @property
    def sort_value(self) -> str:
        if self.sort_key is not None:
            return self.sort_key
        if isinstance(self.value, (int, float)) and not isinstance(self.value, bool):
            return repr(float(self.value))
        return self.text


def lookup(metrics: Mapping, path: Sequence[str | int]) -> Any:
    """The value at `path` in a metrics dict; KeyError naming the path when it is not there."""
    value: Any = metrics
    for key in path:
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            raise KeyError(f"METRICS.json has no {'.'.join(map(str, path))}") from None
    return value


def format_value(value: Any, digits: int = DEFAULT_DIGITS) -> str:
    """A value as the report shows it: floats rounded to `digits` decimals, None as '—'."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.{digits}f}"
    return str(value)


def metric(source: str, metrics: Mapping, path: Sequence[str | int], digits: int = DEFAULT_DIGITS,
           shade: float | None = None) -> Cell:
    """A cell showing the value at `path` of `metrics` (rounded to `digits`), tagged with where it came from."""
    value = lookup(metrics, path)
    return Cell(format_value(value, digits), source, tuple(path), value, shade)


def optional_metric(source: str, metrics: Mapping, path: Sequence[str | int], digits: int = DEFAULT_DIGITS) -> Cell:
    """metric(), or a plain '—' cell when the path is absent from the metrics."""
    try:
        return metric(source, metrics, path, digits)
    except KeyError:
        return text("—")


def text(value: Any, sort_key: str | None = None) -> Cell:
    """A plain cell (not a metric)."""
    return Cell(format_value(value), sort_key=sort_key)


@dataclass
class Table:
    """A sortable table: headers, rows of cells, an optional note under it."""

    title: str
    headers: list[str]
    rows: list[list[Cell]]
    note: str = ""
    sortable: bool = True
    kind: str = "table"

    @property
    def numeric(self) -> list[bool]:
        """Per column: does it hold metric values (right-aligned, header too)."""
        return [any(len(row) > i and row[i].is_number for row in self.rows) for i in range(len(self.headers))]


@dataclass
class Figure:
    """An image (a data: URI) with its caption."""

    title: str
    data_uri: str
    caption: str = ""
    kind: str = "figure"


@dataclass
class Note:
    """A paragraph of plain text (why a view is absent, what a number means)."""

    text: str
    kind: str = "note"


@dataclass
class Clip:
    """One audio clip of an item: its role ('chosen', 'answer', 'turn 2'), a src (data: or file: URI) or
    the reason it has none."""

    label: str
    src: str | None
    path: str
    embedded: bool = False
    missing: str = ""


@dataclass
class Item:
    """One results row shown in full: its id, a few facts, its error and its audio clips."""

    item_id: str
    facts: list[tuple[str, str]]
    error: str | None = None
    clips: list[Clip] = field(default_factory=list)


@dataclass
class ItemList:
    """Items of one kind (failed, most/least confident), with what ranks them."""

    title: str
    items: list[Item]
    note: str = ""
    kind: str = "items"
    role: str = "items"  # 'failed' | 'extreme' (the browser test looks for players by role)


@dataclass
class Section:
    """One protocol's part of a report."""

    protocol: str
    title: str
    source: str  # the name the cells' source attribute uses (unique within a report)
    metrics_path: str | None
    headline: Table
    blocks: list = field(default_factory=list)
    provenance: list[tuple[str, str]] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return "section-" + "".join(c if c.isalnum() else "-" for c in self.source)


def leaf_rows(source: str, metrics: Mapping, path: Sequence[str | int], digits: int = DEFAULT_DIGITS) -> list[list[Cell]]:
    """[name, value] rows for every scalar under `path` (nested keys joined by ' / '), for small
    dicts of statistics whose keys differ between runs (probes, biases)."""
    rows: list[list[Cell]] = []

    def walk(node: Any, at: tuple) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                walk(value, (*at, key))
        elif isinstance(node, list) and all(not isinstance(v, (Mapping, list)) for v in node) and len(node) <= 4:
            for i, value in enumerate(node):
                walk(value, (*at, i))
        elif isinstance(node, (int, float, str, bool)) or node is None:
            name = " / ".join(str(p) for p in at[len(path):])
            rows.append([text(name), metric(source, metrics, at, digits)])

    walk(lookup(metrics, path), tuple(path))
    return rows


def ci_cells(source: str, metrics: Mapping, path: Sequence[str | int], digits: int = DEFAULT_DIGITS) -> list[Cell]:
    """[lower, upper] cells of a two-element CI list at `path`, or two '—' cells when absent."""
    try:
        bounds = lookup(metrics, path)
    except KeyError:
        bounds = None
    if not isinstance(bounds, list) or len(bounds) != 2:
        return [text("—"), text("—")]
    return [metric(source, metrics, (*path, 0), digits), metric(source, metrics, (*path, 1), digits)]
