"""The `processes` executor: N spawned worker processes on this machine, each with its own Scorer.

On a CPU one process cannot keep the cores busy (preparing a batch is Python on one core, small
tensor ops split poorly across threads); N processes with cores/N threads each can. Workers are
spawned, not forked (the parent's OpenMP pool does not survive a fork), and build their Scorer
once when they start. The parent reads and validates windows and keeps at most two per worker in
flight, so memory is bounded on any manifest; results come back in window order. A Scorer that
fails to load reports its own error; a worker that dies (killed, out of memory) raises an
SdscoreError naming the rows it held instead of hanging.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import polars as pl

from sdscore.errors import SdscoreError
from sdscore.parent_watch import exit_with_parent
from sdscore.runtime.compute_budget import become_worker, limit_threads, share
from sdscore.runtime.manifest_windows import ManifestWindows
from sdscore.runtime.scorer import ScoringJob, check_results

_scorer = None  # this worker's Scorer
_start_error: BaseException | None = None  # why it could not be built (raised on first use)


def _start_worker(job: ScoringJob, threads: int) -> None:
    global _scorer, _start_error
    exit_with_parent()  # a killed `sdscore score` leaves no idle workers holding their Scorers
    become_worker(threads)  # cores() is its share here and in its children; no pool nests in it
    try:
        _scorer = job.create()
        limit_threads(threads)  # the Scorer may have imported torch just now
    except BaseException as error:  # reported with the first window, in the parent
        _start_error = error
        return
    if hasattr(_scorer, "close"):  # what it opened (worker pools, clients) closes before the worker exits
        multiprocessing.util.Finalize(None, _scorer.close, exitpriority=20)


def _score_window(job: ScoringJob, rows: pl.DataFrame, start: int) -> pl.DataFrame:
    if _start_error is not None:
        raise _start_error
    return check_results(rows, _scorer(rows), job.scorer_name, start)


class ProcessExecutor:
    """`workers` spawned processes with `threads` (default: the compute budget's cores() // workers,
    min 1) compute threads each; every pool inside a worker takes its size from that share."""

    def __init__(self, workers: int, threads: int | None = None):
        self.workers = workers
        self.threads = threads or share(workers)

    def describe(self) -> dict:
        return {"name": "processes", "workers": self.workers, "threads_per_worker": self.threads}

    def run(self, job: ScoringJob, manifest: ManifestWindows, windows) -> Iterator[tuple[int, pl.DataFrame]]:
        if not windows:
            return
        pool = ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker, initargs=(job, self.threads),
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
                    pending.append((k, start, stop, pool.submit(_score_window, job, rows, start)))
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
                yield k, results
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
