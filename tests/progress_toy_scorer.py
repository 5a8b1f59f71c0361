"""Toy Scorers that report rows done inside a window (the `progress` keyword of runtime/row_progress.py),
importable by spawned workers.

`ReportingScorer` is runtime_toy_scorer.ToyScorer that calls progress once per row, in its own unit (two
steps a row: the runtime turns steps into rows). `GatedReportingScorer` reports half of the window that
starts at the manifest's first row, then waits for the file $SDSCORE_PROGRESS_GATE, which the test's
progress callback creates once it sees rows done: so the run only finishes if the parent saw rows of a
window still being scored (the wait gives up after GATE_LIMIT seconds with an error, so a broken path
fails instead of hanging)."""

from __future__ import annotations

import os
import time

import polars as pl
from runtime_toy_scorer import ToyScorer

GATE_LIMIT = 120.0


class ReportingScorer(ToyScorer):
    def __call__(self, rows: pl.DataFrame, progress=None) -> pl.DataFrame:
        for i in range(rows.height):
            if progress is not None:
                progress("toy: steps", 2 * (i + 1), 2 * rows.height)
            self.step(rows, i)
        return super().__call__(rows)

    def step(self, rows: pl.DataFrame, i: int) -> None:
        return


class GatedReportingScorer(ReportingScorer):
    def step(self, rows: pl.DataFrame, i: int) -> None:
        if rows["battle_id"][0] != "b0000" or i + 1 != rows.height // 2:
            return
        gate, waited = os.environ["SDSCORE_PROGRESS_GATE"], 0.0
        while not os.path.exists(gate):
            if waited > GATE_LIMIT:
                raise RuntimeError("the parent never saw the rows this window reported")
            time.sleep(0.02)
            waited += 0.02
