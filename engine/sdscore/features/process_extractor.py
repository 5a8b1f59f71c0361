"""Run a registered extractor's items on a pool of worker processes: for extractors that hold the GIL.

pocketsphinx and Praat decode one clip per C call and keep the GIL while they do, so threads do
not help them; worker processes do. ``ProcessExtractor(name, jobs, **options)`` has the wrapped
extractor's name, inputs and columns; each worker builds the extractor once (spawned, so no
forked model state), and a batch is split into ``jobs`` parts of about equal audio length
(longest items first, each to the lightest part), which run at once and are put back in order.
An item's result does not depend on which part it lands in (the extractors reset per item), so
the output equals the in-process extractor's. ``jobs=1`` runs in-process and starts no pool. Several extractors can share one pool
(``ProcessExtractor(["asr", "praat_pitch"], jobs, options)``): a worker runs each on its part.

Pools never nest (sdscore.runtime.compute_budget): inside a pool's worker — a `processes` or `ray`
executor's worker — the extractor runs in-process whatever `jobs` asks (the executor already
spreads the work over the cores); each feature worker gets cores() // jobs compute threads.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from sdscore.audio import AudioBatch
from sdscore.features.extract import ROW_ERRORS, make_extractor
from sdscore.parent_watch import exit_with_parent
from sdscore.runtime.compute_budget import become_worker, process_pool_size, share
from sdscore.ragged import pack

_WORKER_EXTRACTORS: list = []


def _build(names: Sequence[str], options: Mapping[str, Mapping]) -> list:
    return [make_extractor(name, **dict(options.get(name, {}))) for name in names]


def _init_worker(names: Sequence[str], options: Mapping[str, Mapping], threads: int) -> None:
    exit_with_parent()  # a killed parent leaves no idle workers holding their models
    become_worker(threads)  # its share of the budget; a pool asked for in it runs in-process
    _WORKER_EXTRACTORS[:] = _build(names, options)


def run_all(extractors: Sequence, batch: AudioBatch, inputs: Mapping[str, list]) -> dict[str, list]:
    """Every extractor's columns on one batch; their ROW_ERRORS joined per item."""
    out: dict[str, list] = {}
    reasons: list = [None] * len(batch)
    for ex in extractors:
        values = dict(ex.run(batch, inputs))
        for i, r in enumerate(values.pop(ROW_ERRORS, None) or []):
            if r is not None:
                reasons[i] = r if reasons[i] is None else f"{reasons[i]}; {r}"
        out.update(values)
    if any(r is not None for r in reasons):
        out[ROW_ERRORS] = reasons
    return out


def _ready() -> bool:
    return True


def _run_part(items: list[np.ndarray], errors: list, sample_rate: int, inputs: Mapping[str, list]) -> dict:
    data, offsets = pack(items)
    return run_all(_WORKER_EXTRACTORS, AudioBatch(data, offsets, errors, sample_rate), inputs)


def balanced_parts(lengths: list[int], parts: int) -> list[list[int]]:
    """Item indices in `parts` groups of about equal total length (longest first, to the lightest group);
    each group in ascending order, empty groups dropped."""
    groups: list[list[int]] = [[] for _ in range(max(1, parts))]
    load = [0] * len(groups)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        g = load.index(min(load))
        groups[g].append(i)
        load[g] += lengths[i] + 1
    return [sorted(g) for g in groups if g]


class ProcessExtractor:
    """The registered extractors `names` (their `options` by name), their items spread over `jobs`
    worker processes (1, in-process, inside a pool's worker: pools do not nest)."""

    def __init__(self, names: str | Sequence[str], jobs: int = 1, options: Mapping[str, Mapping] | None = None):
        if int(jobs) < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs}")
        self.names = [names] if isinstance(names, str) else list(names)
        self.options = {k: dict(v) for k, v in (options or {}).items()}
        self.local = _build(self.names, self.options)  # checks the options; serves jobs=1 and single items
        self.name = "+".join(ex.name for ex in self.local)
        inner = {ex.name for ex in self.local}
        self.requires = tuple(dict.fromkeys(r for ex in self.local for r in ex.requires if r not in inner))
        self.schema = {c: t for ex in self.local for c, t in ex.schema.items()}
        self.jobs = process_pool_size(int(jobs))
        self._pool: ProcessPoolExecutor | None = None
        self._broken = 0  # pools broken in a row

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.jobs, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker, initargs=(self.names, self.options, share(self.jobs)),
            )
            # Inside a multiprocessing child (a runtime worker), exit joins the child's own children
            # before threading's atexit would stop this pool: shut it down first, or exit hangs.
            multiprocessing.util.Finalize(self._pool, self._pool.shutdown, kwargs={"cancel_futures": True},
                                          exitpriority=10)
        return self._pool

    def warm(self) -> None:
        """Start the worker processes now (they import and load their models while the caller does
        other work) without waiting for them; jobs=1 starts nothing."""
        if self.jobs > 1:
            pool = self._executor()
            for _ in range(self.jobs):
                pool.submit(_ready)

    def run(self, batch: AudioBatch, inputs: Mapping[str, list] | None = None) -> dict[str, list]:
        inputs = dict(inputs or {})
        if self.jobs == 1 or len(batch) < 2:
            return run_all(self.local, batch, inputs)
        parts = balanced_parts([int(n) for n in batch.lengths], self.jobs)
        pool = self._executor()
        try:  # submit raises it too once the pool has seen a worker die (a kill between two batches)
            futures = [
                pool.submit(_run_part, [np.asarray(batch[i]) for i in part], [batch.errors[i] for i in part],
                            batch.sample_rate, {c: [v[i] for i in part] for c, v in inputs.items()})
                for part in parts
            ]
            results = [f.result() for f in futures]
        except BrokenProcessPool:
            # a worker died (killed, out of memory): the next batch starts a fresh pool, and this
            # one's items are retried one by one in-process by extract()'s isolation. Pools that
            # break twice in a row cannot start here (e.g. a __main__ read from stdin cannot be
            # re-imported by spawn): the rest runs in-process, with a warning.
            self._pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            self._broken += 1
            if self._broken >= 2:
                warnings.warn(f"{self.name}: worker processes keep dying; running in this process from now on",
                              RuntimeWarning, stacklevel=2)
                self.jobs = 1
            raise
        self._broken = 0
        out: dict[str, list] = {c: [None] * len(batch) for c in self.schema}
        reasons = [None] * len(batch)
        for part, values in zip(parts, results):
            for c in self.schema:
                for i, v in zip(part, values[c]):
                    out[c][i] = v
            for i, r in zip(part, values.get(ROW_ERRORS) or [None] * len(part)):
                reasons[i] = r
        if any(r is not None for r in reasons):
            out[ROW_ERRORS] = reasons
        return out

    def close(self) -> None:
        """Stop the worker processes (a later run starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to report to at exit
            pass
