"""The self-contained HTML report's shell: sections (report/html/elements.py) rendered with Jinja2.

`render_report` turns sections into one HTML file with inline CSS, script, images and (within a
budget) audio, and autoescapes everything that comes from data; `read_metrics` reads a METRICS.json.
Nothing in it loads from a network, and nothing here knows a protocol: the document that builds each
protocol's section from its view is sdscore/report_document.py, above the protocols.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from sdscore.atomic_write import write_text
from sdscore.report.html.elements import Section
from sdscore.report.html.embedding import AudioEmbedder


@lru_cache(maxsize=1)
def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(loader=PackageLoader("sdscore.report.html", "templates"),
                       autoescape=select_autoescape(default=True, default_for_string=True),
                       undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)


def render_report(sections: Sequence[Section], title: str, notes: Sequence[str] = (),
                  embedder: AudioEmbedder | None = None) -> str:
    """The report's HTML text."""
    from sdscore import __version__

    sources = [s.source for s in sections]
    if len(set(sources)) != len(sources):
        raise ValueError(f"report sections need distinct sources, got {sources}")
    audio = None if embedder is None else {"embedded_mb": embedder.embedded_bytes / 2**20, "linked": embedder.linked,
                                           "clip_mb": embedder.clip_limit / 2**20,
                                           "report_mb": embedder.report_limit / 2**20}
    return _environment().get_template("report.html.j2").render(
        title=title, sections=sections, notes=list(notes), version=__version__, audio=audio,
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def write_report(out: str | os.PathLike, sections: Sequence[Section], title: str, notes: Sequence[str] = (),
                 embedder: AudioEmbedder | None = None) -> Path:
    """Render and write the report atomically; returns its path."""
    return write_text(out, render_report(sections, title, notes, embedder))


#: Deepest nesting of objects and lists a METRICS.json may have (eval writes at most ~6 levels; a
#: deeper file would exhaust the recursion of the views and of the JSON decoder).
MAX_METRICS_DEPTH = 64


def read_metrics(path: str | os.PathLike) -> dict:
    """A METRICS.json file (ValueError naming it when it is not a JSON object, or is nested deeper
    than MAX_METRICS_DEPTH)."""
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as error:  # RecursionError: nested past the decoder's limit
        problem = f"nested too deeply to decode, at most {MAX_METRICS_DEPTH} levels" \
            if isinstance(error, RecursionError) else error
        raise ValueError(f"{path}: cannot read metrics JSON ({problem})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: metrics JSON must be an object, got {type(value).__name__}")
    if _nesting_depth(value) > MAX_METRICS_DEPTH:
        raise ValueError(f"{path}: metrics JSON is nested more than {MAX_METRICS_DEPTH} levels deep; it is not "
                         "a METRICS.json that `sdscore eval` wrote")
    return value


def _nesting_depth(value: Any) -> int:
    """The deepest nesting of dicts and lists in a decoded JSON value (iterative: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
