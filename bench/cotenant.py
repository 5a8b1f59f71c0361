"""A co-tenant for the benches: a bounded busy process pinned to one core, and the quiet-vs-contended table.

Users run sdscore on shared nodes: other processes keep some of its cores busy. `Cotenant` starts
one such process — a Python spin loop in a subprocess, pinned to one core — that the bench pauses
(SIGSTOP) for its quiet rounds and resumes (SIGCONT) for its contended ones. It never outlives the
bench: it is killed when the `with` block ends, normally or by an exception; the kernel kills it
when the bench process dies (PR_SET_PDEATHSIG); it ends itself when its parent is gone (polled
every few milliseconds) or after `max_seconds`.

`contended_rounds(runs, rounds, cotenant)` times every run in every round both quiet and
contended (interleaved: a round times each run quiet and contended back to back, the order of the
two phases alternating from round to round), and `cotenancy_rows` turns the times into one row per
run: its quiet and contended rates (median over rounds), the median of its per-round
contended/quiet rate ratios ("kept": 1.0 is no slowdown, 0.5 is half the speed under contention)
and the CPU time it burns per unit of work (threads that spin while they wait show up there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

#: the co-tenant's own program: pin, say "spinning", spin until its parent is gone or time is up
SPIN = r"""
import ctypes, os, signal, sys, time
parent, core, limit, kernel_watch = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
if kernel_watch:  # the kernel kills this process when the parent dies (Linux), stopped or not
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
if os.getppid() != parent:  # the parent died before prctl took effect
    sys.exit(0)
if core >= 0 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {core})
sys.stdout.write("spinning\n")
sys.stdout.flush()
end = time.monotonic() + limit
x = 0
while os.getppid() == parent and time.monotonic() < end:
    for _ in range(20000):
        x += 1
"""

#: the co-tenant ends itself after this many seconds even if nobody stops it
MAX_SECONDS = 3600.0


def default_core() -> int:
    """The core the co-tenant is pinned to: the last core this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(os.sched_getaffinity(0))
    return 0


class Cotenant:
    """A busy process pinned to `core` (default: this process's last core) for the length of a
    `with` block; `busy()` / `pause()` switch it between spinning and stopped. It starts paused.
    Start it from the main thread: the kernel's parent-death signal follows the starting thread.
    kernel_watch=False leaves only its own watch (the parent's pid, polled while it spins) and
    `max_seconds` — for tests of that watch."""

    def __init__(self, core: int | None = None, max_seconds: float = MAX_SECONDS, kernel_watch: bool = True):
        self.core = default_core() if core is None else int(core)
        self.max_seconds = float(max_seconds)
        self.kernel_watch = kernel_watch
        self.process: subprocess.Popen | None = None
        self.spinning = False

    def __enter__(self) -> Cotenant:
        self.process = subprocess.Popen(
            [sys.executable, "-c", SPIN, str(os.getpid()), str(self.core), str(self.max_seconds),
             "1" if self.kernel_watch else "0"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
        )
        try:
            line = self.process.stdout.readline()
            if line.strip() != b"spinning":
                raise RuntimeError(f"the co-tenant process did not start on core {self.core} "
                                   f"(exit code {self.process.wait()})")
            self.pause()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def _signal(self, sig: int) -> None:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"the co-tenant process is not running (exit code "
                               f"{None if self.process is None else self.process.returncode})")
        self.process.send_signal(sig)

    def busy(self) -> None:
        """The co-tenant spins on its core from now on."""
        self._signal(signal.SIGCONT)
        self.spinning = True

    def pause(self) -> None:
        """The co-tenant is stopped (uses no CPU) from now on."""
        self._signal(signal.SIGSTOP)
        self.spinning = False

    def stop(self) -> None:
        """Kill the co-tenant and reap it (SIGKILL ends a stopped process too)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.spinning = False


@dataclass
class Rounds:
    """Per phase ("quiet", "contended"), per run: the wall seconds and this process's CPU seconds
    (every thread of it; not its child processes) of each round."""

    wall: dict[str, dict[str, list[float]]]
    cpu: dict[str, dict[str, list[float]]]


PHASES = ("quiet", "contended")


def contended_rounds(runs: dict[str, Callable[[], object]], rounds: int, cotenant: Cotenant,
                     warm_up: bool = True) -> Rounds:
    """Every run once per round with the co-tenant paused and once with it spinning, back to back
    (so drift in the machine's load between the two is small); even rounds go quiet first, odd
    rounds contended first. warm_up: one untimed quiet call of each run first. At least 3 rounds.
    The co-tenant is paused again when this returns or raises."""
    rounds = max(int(rounds), 3)
    wall: dict[str, dict[str, list[float]]] = {phase: {k: [] for k in runs} for phase in PHASES}
    cpu: dict[str, dict[str, list[float]]] = {phase: {k: [] for k in runs} for phase in PHASES}
    try:
        if warm_up:
            cotenant.pause()
            for fn in runs.values():
                fn()
        for r in range(rounds):
            for name, fn in runs.items():
                for phase in (PHASES if r % 2 == 0 else PHASES[::-1]):
                    cotenant.busy() if phase == "contended" else cotenant.pause()
                    start, start_cpu = time.perf_counter(), time.process_time()
                    fn()
                    wall[phase][name].append(time.perf_counter() - start)
                    cpu[phase][name].append(time.process_time() - start_cpu)
    finally:
        if cotenant.process is not None and cotenant.process.poll() is None:
            cotenant.pause()
    return Rounds(wall, cpu)


@dataclass
class CotenancyRow:
    """One run's throughput quiet and contended, in `unit` (higher is better)."""

    name: str
    unit: str
    quiet: float
    contended: float
    #: contended/quiet rate of each round; `kept` is their median
    round_ratios: list[float] = field(default_factory=list)
    #: this process's CPU milliseconds per unit of work, quiet and contended (None: the run works
    #: in other processes, whose CPU time this process does not see)
    quiet_cpu_ms: float | None = None
    contended_cpu_ms: float | None = None

    @property
    def kept(self) -> float:
        """The median contended/quiet rate ratio: the fraction of its quiet speed the run keeps."""
        return float(np.median(self.round_ratios))


def cotenancy_rows(rounds: Rounds, work: float, unit: str, prefix: str = "",
                   other_processes: tuple[str, ...] = ()) -> list[CotenancyRow]:
    """A row per run of `contended_rounds`: rates are work / median seconds, CPU per unit of work
    the median over rounds (not for the runs named in other_processes)."""
    rows = []
    for name in rounds.wall["quiet"]:
        quiet, contended = rounds.wall["quiet"][name], rounds.wall["contended"][name]
        if len(quiet) != len(contended) or not quiet:
            raise ValueError(f"{name}: {len(quiet)} quiet rounds but {len(contended)} contended")
        cpu = [None if name in other_processes else 1e3 * float(np.median(rounds.cpu[phase][name])) / work
               for phase in PHASES]
        rows.append(CotenancyRow(f"{prefix}{name}", unit, work / float(np.median(quiet)),
                                 work / float(np.median(contended)), [q / c for q, c in zip(quiet, contended)], *cpu))
    return rows


def verdict(rows: list[CotenancyRow], ours: str, peer: str) -> str:
    """One line: the fraction of its quiet speed each keeps under contention, and whether ours
    loses no more than the peer."""
    by_name = {r.name: r for r in rows}
    a, b = by_name[ours], by_name[peer]
    return (f"{ours} keeps {a.kept:.2f} of its quiet speed, {peer} {b.kept:.2f}: "
            f"{'ours loses no more than the peer' if a.kept >= b.kept else 'OURS LOSES MORE than the peer'}; "
            f"contended, ours is {a.contended / b.contended:.2f}x the peer (quiet {a.quiet / b.quiet:.2f}x)")


def load_note() -> str:
    """The machine's load while the bench ran: /proc/loadavg and /proc/pressure/cpu where present."""
    parts = []
    try:
        with open("/proc/loadavg") as f:
            parts.append("loadavg " + " ".join(f.read().split()[:3]))
    except OSError:
        pass
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
        parts.append("cpu pressure " + " ".join(some[1:3]))
    except (OSError, IndexError):
        pass
    return "; ".join(parts) or "load unknown"


def report_cotenancy(title: str, rows: list[CotenancyRow], as_json: bool) -> None:
    """Print the table: each run's quiet and contended rate, the fraction it keeps, its CPU per unit."""
    width = max(len(r.name) for r in rows)
    ms = lambda v: f"{'n/a':>9}" if v is None else f"{v:>9.2f}"  # noqa: E731
    print(f"\n{title}")
    print(f"{'name':<{width}} | {'quiet':>10} | {'contended':>10} | {'kept':>5} | {'cpu quiet':>9} | {'contended':>9} | "
          f"unit (cpu: ms of this process's CPU per unit of work) | kept, each round")
    print(f"{'-' * width}-+-{'-' * 10}-+-{'-' * 10}-+-{'-' * 5}-+-{'-' * 9}-+-{'-' * 9}-+-----")
    for r in rows:
        rounds = " ".join(f"{x:.2f}" for x in r.round_ratios)
        print(f"{r.name:<{width}} | {r.quiet:>10.2f} | {r.contended:>10.2f} | {r.kept:>5.2f} | {ms(r.quiet_cpu_ms)} | "
              f"{ms(r.contended_cpu_ms)} | {r.unit} | {rounds}")
    if as_json:
        print(json.dumps({"rows": [{"name": r.name, "unit": r.unit, "quiet": r.quiet, "contended": r.contended,
                                    "kept": round(r.kept, 4), "round_ratios": r.round_ratios,
                                    "quiet_cpu_ms": r.quiet_cpu_ms, "contended_cpu_ms": r.contended_cpu_ms}
                                   for r in rows]}))
