"""The in-process executor: one Scorer, the next window read on a thread while this one is scored.

It has the whole compute budget (sdscore.runtime.compute_budget.cores()): pools below it size to
it, and torch's threads are capped at it while the run lasts."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from sdscore.runtime.compute_budget import cores, torch_threads_within
from sdscore.runtime.manifest_windows import ManifestWindows
from sdscore.runtime.row_progress import RowsDone, WindowRows, score_rows, takes_progress
from sdscore.runtime.scorer import ScoringJob, check_results


def close_scorer(scorer) -> None:
    """Call the Scorer's optional close()."""
    close = getattr(scorer, "close", None)
    if callable(close):
        close()


class LocalExecutor:
    """Scores every window in this process with one Scorer (loaded once)."""

    def describe(self) -> dict:
        return {"name": "local", "workers": 1}

    def run(self, job: ScoringJob, manifest: ManifestWindows, windows,
            rows_done: RowsDone | None = None) -> Iterator[tuple[int, pl.DataFrame]]:
        if not windows:
            return
        scorer = job.create()
        takes = rows_done is not None and takes_progress(scorer)
        reader = ThreadPoolExecutor(1, thread_name_prefix="sdscore-read")
        try:
            _, start, stop = windows[0]
            pending = reader.submit(manifest.window, start, stop)
            for i, (k, start, _stop) in enumerate(windows):
                rows = pending.result()
                if i + 1 < len(windows):  # polars reads and validates off the GIL while we score
                    pending = reader.submit(manifest.window, *windows[i + 1][1:])
                with torch_threads_within(cores()):  # not across the yield: the caller's code runs there
                    results = score_rows(scorer, rows, takes, WindowRows(k, rows.height, rows_done) if takes else None)
                yield k, check_results(rows, results, job.scorer_name, start)
        finally:
            reader.shutdown(wait=True, cancel_futures=True)
            close_scorer(scorer)
