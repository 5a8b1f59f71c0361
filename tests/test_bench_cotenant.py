"""bench/cotenant.py: the busy co-tenant process of the co-tenancy bench is pinned, pauses and spins
on demand, and never outlives the bench (killed when its block ends or raises, when its parent
dies — stopped or spinning — or after its time limit); the quiet/contended rounds and rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
from cotenant import Cotenant, Rounds, contended_rounds, cotenancy_rows, verdict  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")

#: how long a test waits for a process to reach a state before it fails
WAIT_SECONDS = 30.0


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a live process; None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], fields[19]


def _wait_for(condition, what: str):
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"waited {WAIT_SECONDS} s for {what}")


def _gone(pid: int, started: str) -> bool:
    """The process that started at `started` has ended (no such pid, another process on it, or a zombie)."""
    stat = _stat(pid)
    return stat is None or stat[1] != started or stat[0] in ("Z", "X")


def test_the_cotenant_is_pinned_and_spins_or_stops_on_demand():
    core = min(os.sched_getaffinity(0))
    with Cotenant(core=core) as c:
        status = Path(f"/proc/{c.pid}/status").read_text()
        assert f"Cpus_allowed_list:\t{core}\n" in status
        _wait_for(lambda: _stat(c.pid)[0] == "T", "the paused co-tenant to be stopped")
        c.busy()
        _wait_for(lambda: _stat(c.pid)[0] == "R", "the co-tenant to run")
        assert c.spinning
        c.pause()
        _wait_for(lambda: _stat(c.pid)[0] == "T", "the co-tenant to stop again")
        assert not c.spinning


def test_the_cotenant_is_killed_when_its_block_ends():
    with Cotenant() as c:
        c.busy()
        pid = c.pid
    assert c.process.returncode == -signal.SIGKILL and _stat(pid) is None  # killed and reaped


def test_the_cotenant_is_killed_when_its_block_raises():
    with pytest.raises(RuntimeError, match="the bench failed"):
        with Cotenant() as c:
            c.busy()
            raise RuntimeError("the bench failed")
    assert c.process.returncode == -signal.SIGKILL
    with pytest.raises(RuntimeError, match=r"the co-tenant process is not running \(exit code -9\)"):
        c.busy()


def test_a_cotenant_that_cannot_start_says_so():
    with pytest.raises(RuntimeError, match=r"the co-tenant process did not start on core 100000 \(exit code 1\)"):
        with Cotenant(core=100000):  # no such core: pinning fails
            pass


def test_the_cotenant_ends_itself_after_its_time_limit():
    with Cotenant(max_seconds=0.2) as c:
        c.busy()
        assert c.process.wait(timeout=WAIT_SECONDS) == 0
        with pytest.raises(RuntimeError, match=r"the co-tenant process is not running \(exit code 0\)"):
            c.pause()


_PARENT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from cotenant import Cotenant
c = Cotenant(kernel_watch=sys.argv[2] == "1").__enter__()
if sys.argv[3] == "busy":
    c.busy()
print(c.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(("kernel_watch", "state"), [(True, "busy"), (True, "paused"), (False, "busy")])
def test_the_cotenant_never_outlives_its_parent(kernel_watch, state):
    """The bench process killed outright (no finally runs): the kernel's parent-death signal ends
    the co-tenant, stopped or spinning; without it, the co-tenant's own watch of its parent does."""
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(BENCH), "1" if kernel_watch else "0", state],
                              stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        started = _stat(pid)[1]
        _wait_for(lambda: _stat(pid)[0] == ("T" if state == "paused" else "R"), f"the co-tenant to be {state}")
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    _wait_for(lambda: _gone(pid, started), "the orphaned co-tenant to end")


def test_contended_rounds_time_each_run_quiet_and_contended_back_to_back():
    seen = []
    with Cotenant() as c:
        runs = {name: (lambda name=name: seen.append((name, c.spinning))) for name in ("ours", "peer")}
        rounds = contended_rounds(runs, 1, c)  # at least 3 rounds
        assert not c.spinning  # left paused
    warm = [("ours", False), ("peer", False)]
    even = [("ours", False), ("ours", True), ("peer", False), ("peer", True)]
    odd = [("ours", True), ("ours", False), ("peer", True), ("peer", False)]
    assert seen == warm + even + odd + even
    assert {phase: {k: len(v) for k, v in runs.items()} for phase, runs in rounds.wall.items()} == {
        "quiet": {"ours": 3, "peer": 3}, "contended": {"ours": 3, "peer": 3}}
    assert all(len(v) == 3 for phase in rounds.cpu.values() for v in phase.values())


def test_contended_rounds_leave_the_cotenant_paused_when_a_run_raises():
    def fails():
        if c.spinning:
            raise ValueError("broke under contention")

    with Cotenant() as c:
        with pytest.raises(ValueError, match="broke under contention"):
            contended_rounds({"ours": fails}, 3, c)
        assert not c.spinning
        _wait_for(lambda: _stat(c.pid)[0] == "T", "the co-tenant to be stopped")


def test_rows_are_rates_and_the_kept_fraction_of_each_round():
    rounds = Rounds(wall={"quiet": {"ours": [1.0, 2.0, 1.0], "peer": [1.0, 1.0, 1.0]},
                          "contended": {"ours": [2.0, 2.0, 4.0], "peer": [1.0, 2.0, 1.0]}},
                    cpu={"quiet": {"ours": [0.5, 0.5, 0.7], "peer": [0.0, 0.0, 0.0]},
                         "contended": {"ours": [1.0, 1.0, 1.0], "peer": [0.0, 0.0, 0.0]}})
    ours, peer = cotenancy_rows(rounds, 10, "items/s", prefix="x: ", other_processes=("peer",))
    assert (ours.name, ours.quiet, ours.contended, ours.round_ratios, ours.kept) == ("x: ours", 10.0, 5.0, [0.5, 1.0, 0.25], 0.5)
    assert (ours.quiet_cpu_ms, ours.contended_cpu_ms) == (50.0, 100.0)
    assert (peer.quiet, peer.contended, peer.kept, peer.quiet_cpu_ms) == (10.0, 10.0, 1.0, None)
    line = verdict([ours, peer], "x: ours", "x: peer")
    assert line.startswith("x: ours keeps 0.50 of its quiet speed, x: peer 1.00: OURS LOSES MORE than the peer")
    assert "contended, ours is 0.50x the peer (quiet 1.00x)" in line
    assert "ours loses no more than the peer" in verdict([ours, peer], "x: peer", "x: ours")


def test_rows_refuse_uneven_rounds():
    rounds = Rounds(wall={"quiet": {"ours": [1.0, 1.0]}, "contended": {"ours": [1.0]}},
                    cpu={"quiet": {"ours": [0.0, 0.0]}, "contended": {"ours": [0.0]}})
    with pytest.raises(ValueError, match="ours: 2 quiet rounds but 1 contended"):
        cotenancy_rows(rounds, 1, "items/s")


def test_the_cotenancy_bench_runs_and_leaves_no_cotenant():
    """bench/cotenancy.py end to end on its smallest comparison; no co-tenant it started (the SPIN
    program with its pid as the parent) is left when it exits."""
    pytest.importorskip("torch")
    bench = subprocess.Popen([sys.executable, str(BENCH / "cotenancy.py"), "--quick", "--only", "attention", "--repeats", "3"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = bench.communicate(timeout=600)
    assert bench.returncode == 0, err[-2000:]
    assert "OMP_WAIT_POLICY=PASSIVE (sdscore's default)" in out or "(set by the user)" in out
    assert "span attention vs masked SDPA, B=16" in out
    assert "span_attention (" in out and " keeps " in out
    assert _cotenants_of(bench.pid) == []


def _cotenants_of(parent: int) -> list[int]:
    """Live processes running the co-tenant's program for `parent`."""
    from cotenant import SPIN

    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(command) > 3 and command[1:4] == [b"-c", SPIN.encode(), str(parent).encode()]:
            stat = _stat(int(proc.name))
            if stat is not None and stat[0] not in ("Z", "X"):
                found.append(int(proc.name))
    return found
