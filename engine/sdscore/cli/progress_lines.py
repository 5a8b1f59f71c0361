"""Progress as plain-text lines, for a stderr that is not a terminal (a log file, a batch job's output).

`ProgressLines` is a Progress (``callback(stage, done, total, failed=None)``): it writes one line per
stage every `every` seconds while the stage runs, e.g.

    sdscore score reward: 1,234/72,000 rows (1.7 %), 41.2 rows/s, ETA 29m, 3 failed

and a summary line when the stage is done (or when it is closed before that). The rate and the time
left are measured from the stage's first finished batch (sdscore.progress.RateMeter), so neither the
rows kept from an interrupted run nor the start-up (loading models) count. The lines are due when the
stage moves (a call) or when `tick()` is called; the CLI calls it from a thread every second, so a
stage that stalls still shows up. The clock is a parameter (tests drive it by hand).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from sdscore.errors import SdscoreError
from sdscore.progress import RateMeter, duration_text

#: Seconds between two progress lines when neither --progress-every nor $SDSCORE_PROGRESS_EVERY says.
DEFAULT_EVERY = 30.0
ENV_EVERY = "SDSCORE_PROGRESS_EVERY"


def progress_every(given: float | None = None) -> float:
    """Seconds between two progress lines: `given` (--progress-every), else $SDSCORE_PROGRESS_EVERY, else
    DEFAULT_EVERY; 0 turns them off."""
    if given is not None:
        return check_every(given, "--progress-every")
    text = os.environ.get(ENV_EVERY, "").strip()
    if not text:
        return DEFAULT_EVERY
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    return check_every(value, f"${ENV_EVERY}={text!r}")


def check_every(seconds: float, what: str) -> float:
    if not seconds >= 0 or seconds == float("inf"):  # NaN fails the first test
        raise SdscoreError(f"{what}: expected a number of seconds >= 0 (0: no progress lines)")
    return float(seconds)


@dataclass
class _Stage:
    name: str
    started: float
    total: int = 0
    done: int = 0
    failed: int | None = None
    meter: RateMeter = field(default_factory=RateMeter)
    last_line: float = 0.0
    summarized: bool = False


class ProgressLines:
    """Plain-text progress lines on `stream` every `every` seconds per running stage (see the module doc)."""

    def __init__(self, stream: TextIO, every: float = DEFAULT_EVERY, clock: Callable[[], float] = time.monotonic,
                 prefix: str = "sdscore "):
        self.stream, self.every, self.clock, self.prefix = stream, every, clock, prefix
        self.stages: dict[str, _Stage] = {}
        self.lock = threading.Lock()

    def __call__(self, stage: str, done: int, total: int, failed: int | None = None) -> None:
        with self.lock:
            now = self.clock()
            state = self.stages.get(stage)
            if state is None:
                state = self.stages[stage] = _Stage(stage, started=now, last_line=now)
            state.done, state.total = done, total
            if failed is not None:
                state.failed = failed
            state.meter.update(done, now)
            if total and done >= total:
                self._summary(state, now)
            else:
                self._line_if_due(state, now)

    def tick(self) -> None:
        """Write the lines that are due now (a stage that has not moved since its last line included)."""
        with self.lock:
            now = self.clock()
            for state in self.stages.values():
                self._line_if_due(state, now)

    def close(self) -> None:
        """A summary line for each stage that has not had one (the run stopped before the stage was done)."""
        with self.lock:
            now = self.clock()
            for state in self.stages.values():
                self._summary(state, now)

    def line(self, state: _Stage, now: float) -> str:
        rows = " rows" if state.failed is not None else ""
        text = f"{self.prefix}{state.name}: {state.done:,}/{state.total:,}{rows}"
        if state.total:
            text += f" ({100 * state.done / state.total:.1f} %)"
        rate = state.meter.rate(now)
        text += f", {rate:,.1f}{rows}/s" if rate is not None else ""
        eta = state.meter.eta(state.total, now)
        text += f", ETA {duration_text(eta)}" if eta is not None else ""
        return text + self._failed(state)

    def _line_if_due(self, state: _Stage, now: float) -> None:
        if self.every > 0 and not state.summarized and now - state.last_line >= self.every:
            state.last_line = now
            self._write(self.line(state, now))

    def _summary(self, state: _Stage, now: float) -> None:
        if state.summarized:
            return
        state.summarized = True
        if self.every <= 0:
            return
        rows = " rows" if state.failed is not None else ""
        finished = "done" if state.total and state.done >= state.total else "stopped"
        text = f"{self.prefix}{state.name}: {finished}, {state.done:,}/{state.total:,}{rows} in " \
               f"{duration_text(now - state.started)}"
        rate = state.meter.rate(now)
        text += f", {rate:,.1f}{rows}/s" if rate is not None else ""
        self._write(text + self._failed(state))

    @staticmethod
    def _failed(state: _Stage) -> str:
        return f", {state.failed:,} failed" if state.failed else ""

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()
