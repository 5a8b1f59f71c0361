"""CPU worker processes for RewardScorer: each one scores whole windows with its own model copy.

On a CPU one process cannot keep the cores busy: preparing a window (reading clips, laying out
episodes, collating) is Python and runs on one core, and the small tensor ops of a batch split
poorly across threads. N processes with cores/N intra-op threads each can. On the 2-core bench
machine the gain is small (about 1.1× for the compact demo model with 2 single-threaded workers
against one process using both cores; bench/reward.py prints both rows); many-core hosts are
where it is meant to pay, and that is not measured here.

Workers are spawned, not forked (the parent's OpenMP thread pool does not survive a fork), get
the model pickled once, start on first use and live until the scorer is closed or collected.
At most two windows per worker are in flight, so memory stays bounded on any corpus size, and
windows come back in input order. A worker that dies (killed, out of memory) raises an
SdscoreError naming the window instead of hanging.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import numpy as np

from sdscore.errors import SdscoreError

_scorer = None  # the worker process's own RewardScorer


def _start_worker(model: Any, options: dict[str, Any], threads: int) -> None:
    import torch

    from sdscore.runtime.reward_scorer import RewardScorer

    torch.set_num_threads(threads)
    global _scorer
    _scorer = RewardScorer(model, device="cpu", workers=1, prefetch=False, num_threads=threads, **options)


def _score_window(episodes: list, with_pooled: bool):
    prepared = _scorer._prepare_window(episodes, np.arange(len(episodes)))
    return _scorer._run_window(prepared, with_pooled)


class WorkerPool:
    """`workers` spawned processes, each with a RewardScorer over a copy of `model` on the CPU."""

    def __init__(self, model: Any, workers: int, threads: int, options: dict[str, Any]):
        if workers < 2:
            raise ValueError(f"a worker pool needs at least 2 workers, got {workers}")
        self.workers = workers
        self._executor = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_worker, initargs=(model, options, threads),
        )

    def score(self, windows: Iterable[tuple[np.ndarray, list]], with_pooled: bool) -> Iterator[tuple[np.ndarray, Any]]:
        """(indices, ScoredWindow with window-local indices) per (indices, episodes) window, in order."""
        pending: deque[tuple[np.ndarray, Future]] = deque()
        windows = iter(windows)
        exhausted = False
        while True:
            while not exhausted and len(pending) < 2 * self.workers:
                item = next(windows, None)
                if item is None:
                    exhausted = True
                    break
                indices, episodes = item
                pending.append((indices, self._executor.submit(_score_window, episodes, with_pooled)))
            if not pending:
                return
            indices, future = pending.popleft()
            try:
                scored = future.result()
            except BrokenProcessPool as error:
                first = int(indices[0]) if len(indices) else 0
                raise SdscoreError(
                    f"a scoring worker died while scoring episodes {first}..{first + len(indices) - 1} "
                    f"(killed or out of memory?); rerun with workers=1 to see the failure in-process"
                ) from error
            yield indices, scored

    def close(self) -> None:
        """Stop the workers (pending windows are cancelled)."""
        self._executor.shutdown(wait=True, cancel_futures=True)
