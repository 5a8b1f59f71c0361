"""The HTML report's document: one section per protocol evaluation, each from its protocol's view.

`protocol_section` reads an evaluation's METRICS.json values (as given), its results files and the
manifest they were scored from, and asks the protocol's view (protocols/<name>/report_view.py) for
its tables, figures and items; `report_files` is `sdscore report`. It sits above the protocols, beside
the CLI and the demo: report/'s building blocks (elements, embedding, items, the HTML shell) import no
protocol.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from sdscore.errors import SdscoreError
from sdscore.metrics._inputs import nonfinite_note
from sdscore.protocols.registry import PROTOCOLS
from sdscore.report.html.document import read_metrics, write_report
from sdscore.report.html.elements import Note, Section
from sdscore.report.html.embedding import AudioEmbedder
from sdscore.report.html.items import ItemFinder, manifest_rows
from sdscore.report.html.view_context import ViewContext



def views() -> dict[str, Any]:
    """protocol name → its report view module (build(context), clip_paths(row), ...), from the registry."""
    return {name: entry.report_view_module() for name, entry in PROTOCOLS.items()}


def metrics_keys() -> dict[str, tuple[str, ...]]:
    """Top-level keys every METRICS.json of a protocol has (as `sdscore eval` writes them), from the
    registry: the report refuses another protocol's metrics up front instead of failing, or
    rendering nonsense, in a view."""
    return {name: entry.metrics_keys for name, entry in PROTOCOLS.items()}


#: Provenance keys shown first, in this order (the rest follow as stored).
_PROVENANCE_ORDER = ("sdscore_version", "protocol", "scorer", "model", "settings", "manifest", "executor", "host",
                     "started", "finished", "rows", "failed_rows")


def _read_results(view, path: Path) -> pl.DataFrame:
    if hasattr(view, "read_results"):  # arena: a battles manifest, or an audio judge's results as battles
        return view.read_results(path)
    from sdscore.corpus.results_file import read_results

    return read_results(path, {"error": pl.String})


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={_compact(v)}" for k, v in value.items() if v is not None) or "—"
    return "—" if value is None else str(value)


def provenance_rows(protocol: str, path: Path) -> list[tuple[str, str]]:
    """(name, value) rows of what produced a results file (its Parquet provenance), or of the file itself."""
    view = views().get(protocol)
    return _provenance_rows(getattr(view, "UNSCORED_KIND", "no sdscore provenance stored"), path)


def _provenance_rows(unscored_kind: str, path: Path) -> list[tuple[str, str]]:
    """(name, value) rows of what produced a results file (its Parquet provenance), or of the file itself."""
    from sdscore.runtime.provenance import read_provenance

    record = read_provenance(path)
    rows = [("file", str(path.resolve()))]
    if not record:
        stat = path.stat()
        modified = datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat(timespec="seconds")
        return rows + [("kind", unscored_kind), ("size bytes", str(stat.st_size)), ("modified", modified)]
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
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    entry = PROTOCOLS[protocol]
    view, spec = entry.report_view_module(), entry.manifest_spec()
    paths = [Path(p) for p in results]
    if not paths:
        raise ValueError(f"report {protocol}: no results file given")
    embedder = embedder or AudioEmbedder()
    frames, finders, provenance = [], [], []
    for path in paths:
        frames.append((path, _read_results(view, path)))
        rows = _provenance_rows(getattr(view, "UNSCORED_KIND", "no sdscore provenance stored"), path)
        provenance.extend(rows if len(paths) == 1 else [(f"{path.name}: {k}", v) for k, v in rows])
        if hasattr(view, "NO_AUDIO"):
            finders.append(ItemFinder(spec, view.clip_paths, view.NO_AUDIO, embedder))
            continue
        named = manifest
        if named is None:
            from sdscore.runtime.provenance import read_provenance

            named = (read_provenance(path).get("manifest") or {}).get("path")
        finders.append(ItemFinder(spec, view.clip_paths, manifest_rows(spec, named), embedder))
    if getattr(view, "MERGE_MANIFESTS", False) and len(finders) > 1:  # one list over every file: merge their manifests
        merged: dict | str = {}
        for finder in finders:
            if isinstance(finder.manifest, dict):
                merged.update(finder.manifest)
        finders = [ItemFinder(spec, view.clip_paths, merged or finders[0].manifest, embedder)]
    _check_metrics_protocol(protocol, metrics, metrics_path)
    context = ViewContext(source or protocol, metrics, frames, finders)
    try:
        headline, blocks = view.build(context)
    except (KeyError, IndexError, TypeError, AttributeError) as error:  # another protocol's or a mangled file
        problem = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise SdscoreError(f"{metrics_path or 'METRICS.json'}: does not hold the metrics of `sdscore eval {protocol}` "
                           f"({problem}); give the METRICS.json that eval {protocol} wrote, or the --protocol of "
                           "the eval that wrote this one") from None
    note = nonfinite_note(metrics)  # rows with NaN/inf scores that eval left out, as the CLI says on stderr
    if note:
        blocks = [Note(note.removeprefix("note: ")), *blocks]
    return Section(protocol, title or protocol, source or protocol, None if metrics_path is None else str(metrics_path),
                   headline, blocks, provenance)


def _check_metrics_protocol(protocol: str, metrics: Mapping[str, Any], metrics_path) -> None:
    known = metrics_keys()
    missing = [key for key in known.get(protocol, ()) if key not in metrics]
    if not missing:
        return
    looks = [name for name, keys in known.items() if name != protocol and keys and all(k in metrics for k in keys)]
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
