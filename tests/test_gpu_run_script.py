"""bench/gpu/run.sh: every stage prints exactly one STAGE line with its status, also when it fails
or runs past its budget, and the outputs are packed into OUTDIR.

The script runs in its dry mode (each stage stops right after its CUDA check) with the project's
own python, one stage forced to fail and one forced to hang under a 2-second budget.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu" / "run.sh"
STAGES = ["env", "wheels", "build", "tests", "bench-kernels", "bench-reward-real", "bench-reward-paths", "bench-asr",
          "bench-serve", "bench-reward"]
LINE = re.compile(r"^STAGE (\S+) (ok|skipped|failed|timeout) (\d+\.\d) (.*)$")


def run(out: Path, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SDSCORE_GPU_RUN_")}
    full.update(PYTHON=sys.executable, SDSCORE_GPU_RUN_DRY="1", **env)
    return subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, env=full,
                          timeout=120)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-run") / "out"
    proc = run(out, SDSCORE_GPU_RUN_FAIL="build", SDSCORE_GPU_RUN_HANG="bench-kernels",
               SDSCORE_GPU_RUN_BUDGET_BENCH_KERNELS="2")
    return out, proc


def test_every_stage_prints_exactly_one_summary_line(dry_run):
    out, proc = dry_run
    assert proc.returncode == 0, proc.stderr
    lines = [LINE.match(line) for line in proc.stdout.splitlines() if line.startswith("STAGE ")]
    assert all(lines), proc.stdout
    assert [m.group(1) for m in lines] == STAGES
    status = {m.group(1): m.group(2) for m in lines}
    assert status == {**{s: "skipped" for s in STAGES}, "build": "failed", "bench-kernels": "timeout"}
    details = {m.group(1): m.group(4) for m in lines}
    # each stage ran its CUDA check before stopping
    assert "dry run after the CUDA check: " in details["env"]
    assert "forced to fail" in details["build"] and details["build"].startswith("exit 3")
    assert "over its 2-s budget" in details["bench-kernels"]
    assert (out / "summary.txt").read_text().splitlines() == [m.group(0) for m in lines]


def test_outputs_are_packed_into_outdir(dry_run):
    out, _ = dry_run
    result = json.loads((out / "results.json").read_text())
    assert [s["name"] for s in result["stages"]] == STAGES
    assert result["stages"][2]["status"] == "failed"
    assert result["cuda"] is not None  # the env stage's CUDA check line
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {f"{s}.log" for s in STAGES} <= names
    assert len(list(out.iterdir())) <= 8  # the device returns at most 8 files


def test_a_selected_stage_list_and_the_total_budget(tmp_path):
    # under 10 s left of the run's total, a stage is not started (unless its budget is set)
    proc = run(tmp_path / "out", SDSCORE_GPU_RUN_STAGES="env,tests,bench-serve", SDSCORE_GPU_RUN_TOTAL="5",
               SDSCORE_GPU_RUN_BUDGET_TESTS="30")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("STAGE ")]
    assert [line.split()[1] for line in lines] == ["env", "tests", "bench-serve"]
    assert lines[0] == "STAGE env skipped 0.0 no time left of the 5-s run"
    assert lines[1].startswith("STAGE tests skipped ") and "dry run after the CUDA check" in lines[1]
    assert lines[2] == "STAGE bench-serve skipped 0.0 no time left of the 5-s run"


@pytest.mark.parametrize("args, message", [
    ([], "usage: bash bench/gpu/run.sh OUTDIR"),
    (["--stage-typo"], "usage: bash bench/gpu/run.sh OUTDIR"),
])
def test_bad_arguments(args, message):
    proc = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_an_outdir_with_earlier_results_is_refused(tmp_path):
    (tmp_path / "summary.txt").write_text("earlier run\n")
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert re.search(r"summary\.txt exists; give an empty or new OUTDIR", proc.stderr)
    assert (tmp_path / "summary.txt").read_text() == "earlier run\n"


BENCH_STAGES = {  # stage: the arguments its bench gets on the CPU (SDSCORE_GPU_RUN_CPU_BENCHES=1)
    "bench-kernels": "bench/kernels.py --quick --json",
    "bench-reward-real": "bench/reward.py --quick --realistic --json",
    "bench-reward-paths": "bench/reward.py --quick --paths --json",
    "bench-asr": "bench/asr.py --quick --json",
    "bench-serve": "bench/serve.py --quick --model omni-tiny --requests 32 --json",
    "bench-reward": "bench/reward.py --quick --json",
}


def test_each_bench_stage_runs_its_script_with_its_cpu_arguments(tmp_path):
    # a stand-in python: no CUDA at the check, and it prints the arguments each bench gets
    fake = tmp_path / "python"
    fake.write_text('#!/bin/bash\nif [ "$1" = "-" ]; then cat >/dev/null; echo "cuda check: no CUDA device (fake)"; '
                    'exit 1; fi\necho "ARGS ${*#$PWD/}"\n')
    fake.chmod(0o755)
    full = {k: v for k, v in os.environ.items() if not k.startswith("SDSCORE_GPU_RUN_")}
    full.update(PYTHON=str(fake), SDSCORE_GPU_RUN_CPU_BENCHES="1", SDSCORE_GPU_RUN_STAGES=",".join(BENCH_STAGES))
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, env=full, timeout=120)
    lines = [LINE.match(line) for line in proc.stdout.splitlines() if line.startswith("STAGE ")]
    assert [m.group(1) for m in lines] == list(BENCH_STAGES), proc.stdout
    for m in lines:
        assert m.group(2) == "ok", m.group(0)
        assert m.group(4) == BENCH_STAGES[m.group(1)].removesuffix(" --json") + " (on the CPU) done"
    with tarfile.open(out / "logs.tar.gz") as tar:
        for stage, args in BENCH_STAGES.items():
            log = tar.extractfile(f"./{stage}.log").read().decode()
            assert f"ARGS {ROOT}/{args}" in log or f"ARGS {args}" in log, log
