"""Executors: run a ScoringJob's Scorer over windows of a manifest, yielding (window, results).

Every executor takes the same (ScoringJob, ManifestWindows, windows) and gives the same results:
`local` scores in this process (reading the next window on a thread meanwhile), `processes` in N
spawned worker processes on this machine, `ray` on a Ray cluster with Ray Data (an actor pool of
Scorers). The caller (runtime/run.py) writes each window's results as one shard.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import polars as pl

from sdscore.runtime.manifest_windows import ManifestWindows
from sdscore.runtime.row_progress import RowsDone
from sdscore.runtime.scorer import ScoringJob

#: (shard index, first row, stop row) of one window of the manifest
Window = tuple[int, int, int]
EXECUTORS = ("local", "processes", "ray")


class Executor(Protocol):
    def run(
        self, job: ScoringJob, manifest: ManifestWindows, windows: list[Window], rows_done: RowsDone | None = None
    ) -> Iterator[tuple[int, pl.DataFrame]]:
        """(shard index, results) for each window, each exactly once, in any order; rows_done(shard, rows)
        as a Scorer that takes a `progress` keyword reports rows done inside a window (runtime/row_progress.py;
        an executor without the keyword is called without it)."""
        ...

    def describe(self) -> dict:
        """What ran the job, for the output's provenance."""
        ...


def make_executor(name: str = "local", *, workers: int = 1, ray_address: str | None = None, **options) -> Executor:
    """The executor called `name` (local, processes, ray) with `workers` workers (processes, actors)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if name == "local":
        if workers != 1:
            raise ValueError(f"the local executor runs in this process: workers must be 1, got {workers} "
                             f"(use the processes or ray executor)")
        from sdscore.runtime.executors.local import LocalExecutor

        return LocalExecutor()
    if name == "processes":
        from sdscore.runtime.executors.processes import ProcessExecutor

        return ProcessExecutor(workers, **options)
    if name == "ray":
        from sdscore.runtime.executors.ray_data import RayExecutor

        return RayExecutor(workers, address=ray_address, **options)
    raise ValueError(f"unknown executor {name!r}; expected one of {', '.join(EXECUTORS)}")
