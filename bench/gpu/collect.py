"""Gather the GPU run's stage table and bench tables into one JSON file (stdlib only).

Usage: python bench/gpu/collect.py LOGS_DIR OUT.json — LOGS_DIR is run.sh's log folder: its
stages.tsv (name, status, start and end epoch seconds, detail) and one NAME.log per stage; a bench
log's JSON lines ({"rows": [...]}, printed by --json) make that stage's table.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def stages(logs: Path) -> list[dict]:
    out = []
    for line in (logs / "stages.tsv").read_text().splitlines():
        name, status, start, end, detail = (line.split("\t") + [""] * 5)[:5]
        out.append({"name": name, "status": status, "start": float(start), "end": float(end),
                    "seconds": round(float(end) - float(start), 1), "detail": detail})
    return out


def tables(logs: Path, names: list[str]) -> dict[str, list[dict]]:
    """The rows of every {"rows": ...} JSON line of each stage's log (a bench may print several tables)."""
    found: dict[str, list[dict]] = {}
    for name in names:
        log = logs / f"{name}.log"
        if not log.is_file():
            continue
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith('{"rows"'):
                try:
                    found.setdefault(name, []).extend(json.loads(line)["rows"])
                except (ValueError, KeyError):
                    continue
    return found


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit("usage: python bench/gpu/collect.py LOGS_DIR OUT.json")
    logs, out = Path(sys.argv[1]), Path(sys.argv[2])
    rows = stages(logs)
    env_log = logs / "env.log"
    cuda = [ln for ln in env_log.read_text(errors="replace").splitlines() if ln.startswith("cuda check:")] \
        if env_log.is_file() else []
    result = {"cuda": cuda[-1][len("cuda check: "):] if cuda else None, "stages": rows,
              "benches": tables(logs, [r["name"] for r in rows])}
    tmp = out.with_name(out.name + ".part")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
