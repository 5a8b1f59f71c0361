"""The HTML report's document: one section per protocol evaluation, each from its protocol's view.

`protocol_section` reads an evaluation's METRICS.json values (as given), its results files and the
manifest they were scored from, and asks the protocol's view (protocols/<name>/report_view.py) for
its tables, figures and items; `report_files` is `sdscore report`. It sits above the protocols, beside
the CLI and the demo: report/'s building blocks (elements, embedding, items, the HTML shell) import no
protocol.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.errors import SdscoreError
from sdscore.protocols.arena import report_view as arena_view
from sdscore.protocols.consistency import report_view as consistency_view
from sdscore.protocols.judge import report_view as judge_view
from sdscore.protocols.naturalness import report_view as naturalness_view
from sdscore.protocols.reward import report_view as reward_view
from sdscore.report.html.document import read_metrics, write_report
from sdscore.report.html.elements import Section
from sdscore.report.html.embedding import AudioEmbedder
from sdscore.report.html.items import ItemFinder, manifest_rows
from sdscore.report.html.view_context import ViewContext

VIEWS: dict[str, Callable[[ViewContext], tuple]] = {
    "reward": reward_view.build, "judge": judge_view.build, "consistency": consistency_view.build,
    "naturalness": naturalness_view.build, "arena": arena_view.build,
}
#: Provenance keys shown first, in this order (the rest follow as stored).
_PROVENANCE_ORDER = ("sdscore_version", "protocol", "scorer", "model", "settings", "manifest", "executor", "host",
                     "started", "finished", "rows", "failed_rows")


def _read_results(protocol: str, path: Path) -> pl.DataFrame:
    if protocol == "arena":  # a battles manifest, or an audio judge's results read back as battles
        from sdscore.protocols.arena.judge_battles import read_battles

        return read_battles(path)[0]
    from sdscore.corpus.results_file import read_results

    return read_results(path, {"error": pl.String})


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_compact(v)}" for k, v in value.items() if v is not None) or "—"
    return "—" if value is None else str(value)


def provenance_rows(protocol: str, path: Path) -> list[tuple[str, str]]:
    """(name, value) rows of what produced a results file (its Parquet provenance), or of the file itself."""
    from sdscore.runtime.provenance import read_provenance

    record = read_provenance(path)
    rows = [("file", str(path.resolve()))]
    if not record:
        stat = path.stat()
        modified = datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(timespec="seconds")
        note = "battles manifest (no scoring run)" if protocol == "arena" else "no sdscore provenance stored"
        return rows + [("kind", note), ("size bytes", str(stat.st_size)), ("modified", modified)]
    keys = [k for k in _PROVENANCE_ORDER if k in record] + [k for k in record if k not in _PROVENANCE_ORDER]
    return rows + [(key, _compact(record[key])) for key in keys]


def protocol_section(
    protocol: str,
    metrics: Mapping[str, Any],
    results: Sequence[str | os.PathLike],
    *,
    metrics_path: str | os.PathLike | None = None,
    source: str | None = None,
    title: str | None = None,
    manifest: str | os.PathLike | None = None,
    embedder: AudioEmbedder | None = None,
) -> Section:
    """One protocol's section from its METRICS.json values and its results files (arena: the battles
    manifest). manifest: where the items' audio is found (default: the one each results file's
    provenance names). source: the name its metric cells carry (default: the protocol's)."""
    if protocol not in VIEWS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(VIEWS)}")
    paths = [Path(p) for p in results]
    if not paths:
        raise ValueError(f"report {protocol}: no results file given")
    embedder = embedder or AudioEmbedder()
    frames, finders, provenance = [], [], []
    for path in paths:
        frames.append((path, _read_results(protocol, path)))
        rows = provenance_rows(protocol, path)
        provenance.extend(rows if len(paths) == 1 else [(f"{path.name}: {k}", v) for k, v in rows])
        if protocol == "arena":
            finders.append(ItemFinder(protocol, "battles carry no audio", embedder))
            continue
        named = manifest
        if named is None:
            from sdscore.runtime.provenance import read_provenance

            named = (read_provenance(path).get("manifest") or {}).get("path")
        finders.append(ItemFinder(protocol, manifest_rows(protocol, named), embedder))
    if protocol == "naturalness" and len(finders) > 1:  # one list over every file: merge their manifests
        merged: dict | str = {}
        for finder in finders:
            if isinstance(finder.manifest, dict):
                merged.update(finder.manifest)
        finders = [ItemFinder(protocol, merged or finders[0].manifest, embedder)]
    _check_metrics_protocol(protocol, metrics, metrics_path)
    context = ViewContext(protocol, source or protocol, metrics, frames, finders)
    try:
        headline, blocks = VIEWS[protocol](context)
    except (KeyError, IndexError, TypeError, AttributeError) as error:  # another protocol's or a mangled file
        problem = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SdscoreError(f"{metrics_path or 'METRICS.json'}: does not hold the metrics of `sdscore eval {protocol}` "
                           f"({problem}); give the METRICS.json that eval {protocol} wrote, or the --protocol of "
                           "the eval that wrote this one") from None
    return Section(protocol, title or protocol, source or protocol, None if metrics_path is None else str(metrics_path),
                   headline, blocks, provenance)


#: Top-level keys every METRICS.json of a protocol has (as `sdscore eval` writes them): the report
#: refuses another protocol's metrics up front instead of failing, or rendering nonsense, in a view.
METRICS_KEYS = {
    "reward": ("n", "subsets", "overall_micro"),
    "consistency": ("detection", "localization", "discrimination"),
    "judge": ("judges", "n_items"),
    "naturalness": ("systems",),
    "arena": ("n_battles", "bradley_terry"),
}


def _check_metrics_protocol(protocol: str, metrics: Mapping[str, Any], metrics_path) -> None:
    missing = [key for key in METRICS_KEYS.get(protocol, ()) if key not in metrics]
    if not missing:
        return
    looks = [name for name, keys in METRICS_KEYS.items() if name != protocol and all(k in metrics for k in keys)]
    guess = f"; it looks like the metrics of eval {' or '.join(looks)}" if looks else ""
    raise SdscoreError(f"{metrics_path or 'METRICS.json'}: does not hold the metrics of `sdscore eval {protocol}` "
                       f"(no {', '.join(missing)}){guess}; give the METRICS.json that eval {protocol} wrote")


def report_files(protocol: str, results: Sequence[str | os.PathLike], metrics_json: str | os.PathLike,
                 out: str | os.PathLike, *, manifest: str | os.PathLike | None = None,
                 clip_limit: int | None = None, report_limit: int | None = None) -> Path:
    """`sdscore report`: one protocol's evaluation (its METRICS.json and results) as an HTML file."""
    limits = {k: v for k, v in (("clip_limit", clip_limit), ("report_limit", report_limit)) if v is not None}
    embedder = AudioEmbedder(**limits)
    section = protocol_section(protocol, read_metrics(metrics_json), results, metrics_path=metrics_json,
                               manifest=manifest, embedder=embedder)
    return write_report(out, [section], f"sdscore {protocol} report", embedder=embedder)
