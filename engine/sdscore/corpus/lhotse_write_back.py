"""Write-back into a Lhotse CutSet or SupervisionSet: the same manifest, line for line, with the
results in each supervision's `custom` (cuts, recordings and every other field as they were).

Each supervision scored as a turn of an instance (lhotse_format: a speaker's turns, the `turn_ids`
column) gets its instance's result columns that have a value (`instance_id`, `inconsistent_pred`,
`method`, `threshold`, `error`, ...) and its own turn's: `turn_score` (its entry of `turn_scores`)
and `flagged` (whether `flagged_turns` lists it). The manifest's own columns the results repeat
(task, scenario, true_turns) are not written. A custom key the supervision already has is refused.
The output is gzipped when its name ends in .gz.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

from sdscore.atomic_write import atomic_path
from sdscore.corpus.lhotse_format import manifest_lines
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.write_back_rows import OPTION, added_columns, aligned_results
from sdscore.errors import SdscoreError

#: per-turn result lists → the custom key each turn's entry is written under
TURN_SCORES, FLAGGED = "turn_scores", "flagged_turns"


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become null (inside lists too)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def supervision_fields(results, rows, spec: ManifestSpec) -> dict[str, dict[str, Any]]:
    """{supervision id: the custom fields it gets} from aligned results and input rows (with turn_ids)."""
    columns = [c for c in added_columns(results, spec) if c not in (TURN_SCORES, FLAGGED)]
    fields: dict[str, dict[str, Any]] = {}
    for result, turn_ids in zip(results.iter_rows(named=True), rows["turn_ids"].to_list()):
        shared = {spec.id_column: result[spec.id_column]}
        shared.update((c, _clean(result[c])) for c in columns if result[c] is not None)
        scores, flagged = result.get(TURN_SCORES), set(result.get(FLAGGED) or ())
        for index, supervision in enumerate(turn_ids or ()):
            if supervision in fields:  # listed twice: the reader made that turn an error; keep the first
                continue
            own = dict(shared)
            if scores is not None and index < len(scores):
                own["turn_score"] = _clean(scores[index])
                own["flagged"] = index in flagged
            fields[supervision] = {k: v for k, v in own.items() if v is not None}
    return fields


def _with_fields(supervision: Any, fields: dict[str, dict[str, Any]], source: str, line: int) -> Any:
    if not isinstance(supervision, dict) or not isinstance(supervision.get("id"), str) or supervision["id"] not in fields:
        return supervision
    custom = dict(supervision.get("custom") or {})
    clash = sorted(custom.keys() & fields[supervision["id"]].keys())
    if clash:
        raise SdscoreError(f"{source}: line {line}: supervision {supervision['id']!r} already has custom "
                           f"{', '.join(clash)} (an earlier write-back?); {OPTION} never replaces a field")
    return {**supervision, "custom": {**custom, **fields[supervision["id"]]}}


def write_lhotse_manifest(manifest: str | os.PathLike, results: str | os.PathLike, spec: ManifestSpec,
                          destination: Path, lhotse_group_by: str | None = None) -> Path:
    """Write the Lhotse manifest at `manifest` again at `destination` with the results in the supervisions."""
    source = os.fspath(manifest)
    frame, rows = aligned_results(manifest, results, spec, ("turn_ids",), lhotse_group_by)
    fields = supervision_fields(frame, rows, spec)
    opener = gzip.open if destination.name.lower().endswith(".gz") else open
    with atomic_path(destination, durable=True) as temp, opener(temp, "wt", encoding="utf-8") as out:
        for line, row in manifest_lines(source, source):
            if isinstance(row, dict) and "supervisions" in row:  # a cut
                row = {**row, "supervisions": [_with_fields(s, fields, source, line) for s in row["supervisions"]]}
            else:  # a SupervisionSet line
                row = _with_fields(row, fields, source, line)
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return destination
