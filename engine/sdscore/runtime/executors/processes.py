"""The `processes` executor: N spawned worker processes on this machine, each with its own Scorer.

On a CPU one process cannot keep the cores busy (preparing a batch is Python on one core, small
tensor ops split poorly across threads); N processes with cores/N threads each can. Workers are
spawned, not forked (the parent's OpenMP pool does not survive a fork), and build their Scorer
once when they start. The parent reads and validates windows and keeps at most two per worker in
flight, so memory is bounded on any manifest; results come back in window order. A Scorer that
fails to load reports its own error; a worker that dies (killed, out of memory) raises an
SdscoreError naming the rows it held instead of hanging. A worker whose Scorer reports rows done
inside a window (runtime/row_progress.py) sends (window, rows) on a queue, at most one message every
`report_every` seconds; a thread here hands them to the run.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import queue
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import polars as pl

from sdscore.errors import SdscoreError
from sdscore.parent_watch import exit_with_parent
from sdscore.runtime.compute_budget import become_worker, limit_threads, share
from sdscore.runtime.manifest_windows import ManifestWindows
from sdscore.runtime.row_progress import REPORT_EVERY, RowsDone, Throttled, WindowRows, score_rows, takes_progress
from sdscore.runtime.scorer import ScoringJob, check_results

_scorer = None  # this worker's Scorer
_start_error: BaseException | None = None  # why it could not be built (raised on first use)
_report: Throttled | None = None  # sends (window, rows done in it) to the parent, when it asked and the Scorer can


def _start_worker(job: ScoringJob, threads: int, reports=None, report_every: float = REPORT_EVERY) -> None:
    global _scorer, _start_error, _report
    exit_with_parent()  # a killed `sdscore score` leaves no idle workers holding their Scorers
    become_worker(threads)  # cores() is its share here and in its children; no pool nests in it
    try:
        _scorer = job.create()
        limit_threads(threads)  # the Scorer may have imported torch just now
    except BaseException as error:  # reported with the first window, in the parent
        _start_error = error
        return
    if reports is not None and takes_progress(_scorer):
        _report = Throttled(lambda k, rows: reports.put((k, rows)), report_every)
    if hasattr(_scorer, "close"):  # what it opened (worker pools, clients) closes before the worker exits
        multiprocessing.util.Finalize(None, _scorer.close, exitpriority=20)


def _score_window(job: ScoringJob, rows: pl.DataFrame, start: int, k: int) -> pl.DataFrame:
    if _start_error is not None:
        raise _start_error
    progress = None if _report is None else WindowRows(k, rows.height, _report)
    return check_results(rows, score_rows(_scorer, rows, progress is not None, progress), job.scorer_name, start)


class _Forwarder(threading.Thread):
    """The parent's side: (window, rows) messages to rows_done until `stop`, then the ones left (the workers
    have exited by then: what they sent is in the pipe). The parent never writes to the queue, so a worker
    killed while holding its write lock cannot block this; an error of rows_done is kept in `error` (for the
    run to raise) and the queue is still read, so no worker waits on a full pipe."""

    def __init__(self, reports, rows_done: RowsDone):
        super().__init__(name="sdscore-rows", daemon=True)
        self.reports, self.rows_done = reports, rows_done
        self.stop, self.error = threading.Event(), None

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._take(self.reports.get(timeout=0.1))
            except queue.Empty:
                continue
        while True:
            try:
                self._take(self.reports.get_nowait())
            except queue.Empty:
                return

    def _take(self, message: tuple[int, int]) -> None:
        if self.error is None:
            try:
                self.rows_done(*message)
            except Exception as error:  # noqa: BLE001 - raised by the run, in its own thread
                self.error = error


class ProcessExecutor:
    """`workers` spawned processes with `threads` (default: the compute budget's cores() // workers,
    min 1) compute threads each; every pool inside a worker takes its size from that share."""

    def __init__(self, workers: int, threads: int | None = None, report_every: float = REPORT_EVERY):
        self.workers = workers
        self.threads = threads or share(workers)
        self.report_every = report_every  # seconds between two row-count messages of a worker

    def describe(self) -> dict:
        return {"name": "processes", "workers": self.workers, "threads_per_worker": self.threads}

    def run(self, job: ScoringJob, manifest: ManifestWindows, windows,
            rows_done: RowsDone | None = None) -> Iterator[tuple[int, pl.DataFrame]]:
        if not windows:
            return
        context = multiprocessing.get_context("spawn")
        reports = None if rows_done is None else context.Queue()
        forwarder = None if reports is None else _Forwarder(reports, rows_done)
        if forwarder is not None:  # the workers' row counts reach rows_done on a thread while we wait on results
            forwarder.start()
        pool = ProcessPoolExecutor(
            self.workers, mp_context=context,
            initializer=_start_worker, initargs=(job, self.threads, reports, self.report_every),
        )
        pending: deque[tuple[int, int, int, Future]] = deque()
        todo = iter(windows)
        try:
            while True:
                while len(pending) < 2 * self.workers:
                    window = next(todo, None)
                    if window is None:
                        break
                    k, start, stop = window
                    rows = manifest.window(start, stop)
                    pending.append((k, start, stop, pool.submit(_score_window, job, rows, start, k)))
                if not pending:
                    return
                k, start, stop, future = pending.popleft()
                try:
                    results = future.result()
                except BrokenProcessPool as error:
                    raise SdscoreError(
                        f"a scoring worker died while scoring rows {start + 1}..{stop} (killed or out of "
                        f"memory?); rerun with --workers 1 to see the failure in-process"
                    ) from error
                if forwarder is not None and forwarder.error is not None:
                    raise forwarder.error
                yield k, results
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            if forwarder is not None:  # the workers have exited: what they sent is read before we return
                forwarder.stop.set()
                forwarder.join()
                reports.close()
