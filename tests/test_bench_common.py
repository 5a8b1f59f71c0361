"""bench/common.py: every table says when, where and on what it was measured (UTC time, CPU model,
usable CPUs, load, commit, this process's thread pools) and how its peers ran."""

from __future__ import annotations

import re
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
from common import Row, cpu_model, report  # noqa: E402


def test_report_prints_when_where_and_the_peers_pools(capsys):
    import torch

    report("a table", [Row("ours vs peer", "x/s", 2.0, 1.0, [2.0, 1.5, 2.5])], False, peers="peer in 3 processes")
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "a table"
    measured = out[2]
    assert re.match(r"measured \d{4}-\d\d-\d\d \d\d:\d\d UTC on ", measured), measured
    assert cpu_model() in measured
    assert f"torch intra-op {torch.get_num_threads()}" in measured
    assert re.search(r"load average \d+\.\d\d \d+\.\d\d \d+\.\d\d", measured), measured
    assert re.search(r"sdscore ([0-9a-f]{7,}|unknown)", measured), measured
    assert out[3] == "peers: peer in 3 processes"
    assert out[-1].startswith("ours vs peer") and "|   2.00 |" in out[-1]


def test_report_without_peers_has_no_peer_line(capsys):
    report("t", [Row("r", "x/s", 1.0, 1.0)], False)
    assert not any(line.startswith("peers:") for line in capsys.readouterr().out.splitlines())
