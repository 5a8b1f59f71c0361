"""Worker threads that each run whole model forwards with one intra-op thread.

On CPU, torch splits every op across cores and joins them at its end; a 160-step, 3-layer LSTM
joins 480 times per forward, and on a shared machine each join waits for a descheduled core.
Whole batches on separate single-threaded workers (torch releases the GIL) keep every core busy
without those joins. Used on CPU only; CUDA forwards run in the caller's thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch


class ForwardPool:
    """`workers` threads running submitted forwards; at most `2 × workers` in flight (backpressure)."""

    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = int(workers)
        caller_threads = torch.get_num_threads()
        self._executor = ThreadPoolExecutor(self.workers, "sdscore-forward", initializer=torch.set_num_threads, initargs=(1,))
        # Start every worker now (each waits for the others), then give threads created later
        # (elsewhere in the process) the caller's setting back: set_num_threads also sets the
        # default that a new thread picks up, while each worker keeps its own setting of 1.
        barrier = threading.Barrier(self.workers)
        for started in [self._executor.submit(barrier.wait) for _ in range(self.workers)]:
            started.result()
        torch.set_num_threads(caller_threads)
        self._in_flight: deque[Future] = deque()

    def submit(self, fn: Callable, *args) -> Future:
        """Run fn(*args) on a worker; blocks while 2 × workers calls are still running."""
        while len(self._in_flight) >= 2 * self.workers:
            self._in_flight.popleft().result()
        future = self._executor.submit(fn, *args)
        self._in_flight.append(future)
        while self._in_flight and self._in_flight[0].done():
            self._in_flight.popleft()
        return future

    def close(self) -> None:
        """Stop the worker threads once their work is done."""
        self._executor.shutdown(wait=True)
