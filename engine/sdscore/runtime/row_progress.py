"""Rows finished inside a window, before its results come back: a Scorer's own progress, counted as rows.

A Scorer whose ``__call__`` takes a ``progress`` keyword gets a Progress (``progress(stage, done,
total)``, sdscore.progress) for each window and calls it in its own units as it goes (after each
internal batch: episodes, items, chunks); `WindowRows` counts ``rows * done // total`` rows of the
window as done, never going back and never past the window. A Scorer without the keyword is called
as before and its rows count when its window ends. The executors send the counts to the run
(`RunRows`): in this process directly, from worker processes and Ray actors as (window, rows)
messages, at most one every `REPORT_EVERY` seconds per worker (`Throttled`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sdscore.progress import Progress, accepts_keyword

#: Seconds between two row-count messages of one worker process or actor.
REPORT_EVERY = 0.25

#: send(window, rows done in it)
RowsDone = Callable[[int, int], None]


def takes_progress(scorer) -> bool:
    """Whether the Scorer's __call__ takes the `progress` keyword."""
    return accepts_keyword(scorer, "progress")


def score_rows(scorer, rows, takes: bool, progress: Progress | None):
    """The Scorer's results for rows, with `progress` when it takes one and there is one."""
    return scorer(rows, progress=progress) if takes and progress is not None else scorer(rows)


class WindowRows:
    """The Progress handed to a Scorer for window `k` of `rows` rows: its (done, total) as rows done,
    sent to `send(k, rows_done)` whenever that count grows."""

    def __init__(self, k: int, rows: int, send: RowsDone):
        self.k, self.rows, self.send, self.done = k, rows, send, 0

    def __call__(self, stage: str, done: int, total: int) -> None:
        if total <= 0 or done <= 0:
            return
        rows = min(self.rows, self.rows * min(done, total) // total)
        if rows > self.done:
            self.done = rows
            self.send(self.k, rows)


class Throttled:
    """send(k, rows) at most once every `every` seconds: a count within the interval is dropped (the next
    one carries it; the window's results carry the last). clock: seconds (time.monotonic)."""

    def __init__(self, send: RowsDone, every: float = REPORT_EVERY, clock: Callable[[], float] = time.monotonic):
        self.send, self.every, self.clock = send, every, clock
        self.last: float | None = None
        self.sent = 0

    def __call__(self, k: int, rows: int) -> None:
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return
        self.last = now
        self.sent += 1
        self.send(k, rows)


class RunRows:
    """A run's rows done: its finished windows' rows (and resumed ones) plus the rows reported done in the
    windows in flight. Calls progress(stage, done, total, failed=...) on every change (failed: rows with an
    error in the finished windows; passed only to a progress that takes the keyword), one call at a time:
    row counts may come from a helper thread."""

    def __init__(self, progress: Progress | None, stage: str, total: int, done: int):
        self.progress, self.stage, self.total = progress, stage, total
        self.with_failed = progress is not None and accepts_keyword(progress, "failed")
        self.finished_rows, self.failed = done, 0
        self.partial: dict[int, int] = {}  # window → rows reported done in it
        self.closed: set[int] = set()
        self.lock = threading.Lock()

    @property
    def done(self) -> int:
        return self.finished_rows + sum(self.partial.values())

    def report(self) -> None:
        with self.lock:
            self._report()

    def rows_done(self, k: int, rows: int) -> None:
        """`rows` rows of window k are done (a window already finished is left as it is)."""
        with self.lock:
            if k in self.closed or rows <= self.partial.get(k, 0):
                return
            self.partial[k] = rows
            self._report()

    def window_finished(self, k: int, rows: int, failed: int) -> None:
        with self.lock:
            self.partial.pop(k, None)
            self.closed.add(k)
            self.finished_rows += rows
            self.failed += failed
            self._report()

    def _report(self) -> None:
        if self.progress is None:
            return
        if self.with_failed:
            self.progress(self.stage, self.done, self.total, failed=self.failed)
        else:
            self.progress(self.stage, self.done, self.total)
