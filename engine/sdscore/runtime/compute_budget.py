"""The one compute budget: how many cores this process may use, and whether it is a pool's worker.

Every pool and fan-out in sdscore takes its size from here, so a run uses the cores it was given
and no more, and no pool nests inside another:

- ``cores()`` — the cores this process may use (>= 1). In order: a scope set in this process
  (``budget(n)``, what an executor or a test gives), else the environment variable
  ``SDSCORE_CORES`` (what a parent gives its worker processes, or what a user sets to cap a whole
  run), else the machine's cores: the CPU affinity where the platform has one (else the CPU
  count), and no more than the CPU quota of the process's cgroup (a container's `--cpus`, a
  Kubernetes CPU limit: ``sdscore.runtime.cgroup_quota``), read once per process.
- ``in_pool()`` — True inside a worker of a process pool (an executor's worker, a feature
  process): a process pool asked for there runs in-process instead (``process_pool_size`` is 1).
- ``become_worker(n)`` — what a pool's worker initializer calls: it records its share ``n`` and
  pool membership in its environment (so its own children inherit them) and limits its compute
  threads (OpenMP/MKL/OpenBLAS/polars, and torch if loaded) to ``n``.
- ``torch_threads_within(n)`` — torch's threads capped at `n` for a block of the caller's process.
- ``blas_threads_within(n)`` — the BLAS libraries' threads (numpy's and scipy's OpenBLAS, MKL)
  capped at `n` for a block: for loops of many tiny linear-algebra calls (a bootstrap's small
  fits), where waking a threaded BLAS per call costs more than the call, and on a busy machine
  each call waits for a thread that cannot be scheduled (``sdscore eval arena``'s bootstrap ran
  13× slower with OpenBLAS on 2 threads than on 1 under load).
- ``library_threads()`` — the size of a library's own thread pool (onnxruntime): its default
  while this process may use every core the library sees, else ``cores()``.
- ``share(workers)`` — each of `workers` workers' share of ``cores()``: cores // workers, min 1.
- ``thread_pool_size(requested, items)`` / ``process_pool_size(requested, items)`` — a pool's
  size: the caller's explicit request, else ``cores()``; never more than `items`; a process pool
  inside a pool is 1 (in-process).

Shared cores: ``import sdscore`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it (before
torch can load libgomp), so the OpenMP threads of torch and of the compiled core sleep while they
wait for work instead of spinning. Spinning waiters win on an idle machine and collapse when other
processes share the cores (bench/cotenancy.py measures both).

This module imports nothing from sdscore but the leaves ``sdscore.errors`` and
``sdscore.runtime.cgroup_quota``, so any layer may use it.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sdscore.errors import SdscoreError
from sdscore.runtime import cgroup_quota

#: The environment variable a parent sets for its worker processes (or a user, to cap a run).
CORES_ENV = "SDSCORE_CORES"
#: Set to "1" in a pool's worker processes: pools asked for there run in-process.
POOL_MEMBER_ENV = "SDSCORE_POOL_MEMBER"
#: The compute-thread variables a worker's share is written to (read by the libraries at load).
THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "POLARS_MAX_THREADS")


class BudgetError(SdscoreError):
    """A compute budget (SDSCORE_CORES, a pool size) is not a whole number >= 1."""


_lock = threading.Lock()
_scope: list[list] = []  # (cores, pool member) scopes set in this process, innermost last


def affinity_cores() -> int:
    """The cores the operating system lets this process run on (what libraries size their pools to)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@functools.cache
def quota_cores() -> int | None:
    """The cores this process's cgroup CPU quota allows (None: no quota), read once per process."""
    return cgroup_quota.quota_cores()


def machine_cores() -> int:
    """The cores this process may really use: its CPU affinity, capped by its cgroup's CPU quota."""
    quota = quota_cores()
    return affinity_cores() if quota is None else min(affinity_cores(), quota)


def _positive(value, what: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise BudgetError(f"{what} must be a whole number of cores >= 1, got {value!r}") from None
    if number < 1:
        raise BudgetError(f"{what} must be a whole number of cores >= 1, got {value!r}")
    return number


def cores() -> int:
    """The cores this process may use: its scope, else $SDSCORE_CORES, else the machine's."""
    if _scope:
        return _scope[-1][0]
    value = os.environ.get(CORES_ENV, "").strip()
    if value:
        return _positive(value, f"the environment variable {CORES_ENV}")
    return machine_cores()


def in_pool() -> bool:
    """True in a worker of a process pool: a process pool asked for here runs in-process."""
    if _scope:
        return _scope[-1][1]
    return os.environ.get(POOL_MEMBER_ENV, "") == "1"


def library_threads() -> int:
    """The thread count to give a library's own pool (onnxruntime's intra_op_num_threads): 0 — the
    library's default, one thread per core it sees — while this process may use all of those
    cores, else ``cores()`` (a smaller budget, or a cgroup quota the library does not read)."""
    n = cores()
    return 0 if n >= affinity_cores() else n


def share(workers: int, total: int | None = None) -> int:
    """Each of `workers` workers' share of `total` cores (default ``cores()``): total // workers, min 1."""
    workers = _positive(workers, "the number of workers")
    return max(1, (cores() if total is None else _positive(total, "the number of cores")) // workers)


def thread_pool_size(requested: int | None = None, items: int | None = None) -> int:
    """A CPU thread pool's size: `requested` (the caller's explicit choice) else ``cores()``,
    at most `items` when given, at least 1."""
    size = cores() if requested is None else _positive(requested, "the number of threads")
    if items is not None:
        size = min(size, max(1, int(items)))
    return size


def process_pool_size(requested: int | None = None, items: int | None = None) -> int:
    """A process pool's size: 1 (run in-process) inside a pool's worker; else as thread_pool_size."""
    if in_pool():
        return 1
    return thread_pool_size(requested, items)


@contextmanager
def budget(n: int, *, pool_member: bool | None = None) -> Iterator[int]:
    """Within the block, ``cores()`` is `n` in this process (and ``in_pool()`` is `pool_member`,
    default unchanged). Executors use it to give the work they run in this process its share."""
    n = _positive(n, "the compute budget")
    member = in_pool() if pool_member is None else bool(pool_member)
    entry = [n, member]  # a new object: found again by identity
    with _lock:
        _scope.append(entry)
    try:
        yield n
    finally:
        with _lock:  # this block's own entry, even if another thread's scope closed out of order
            for i in range(len(_scope) - 1, -1, -1):
                if _scope[i] is entry:
                    del _scope[i]
                    break


def worker_env(n: int) -> dict[str, str]:
    """The environment a pool's worker process with a share of `n` cores runs under."""
    n = _positive(n, "a worker's share of cores")
    return {CORES_ENV: str(n), POOL_MEMBER_ENV: "1", **{name: str(n) for name in THREAD_ENVS}}


def limit_threads(n: int) -> None:
    """Give this process `n` compute threads (OpenMP/MKL/OpenBLAS/polars, and torch if it is loaded)."""
    n = _positive(n, "the number of compute threads")
    for name in THREAD_ENVS:
        os.environ[name] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


@contextmanager
def torch_threads_within(n: int) -> Iterator[None]:
    """Within the block, torch (if loaded) uses at most `n` intra-op threads — a lower setting of
    the caller's is kept — and the caller's setting is back afterwards. For work run in the
    caller's own process (the local executor), where the environment variables come too late."""
    n = _positive(n, "the number of compute threads")
    torch = sys.modules.get("torch")
    before = torch.get_num_threads() if torch is not None else None
    if before is not None and before > n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before is not None and before > n:
            torch.set_num_threads(before)


@contextmanager
def blas_threads_within(n: int) -> Iterator[None]:
    """Within the block, each BLAS library loaded in this process (numpy's and scipy's OpenBLAS,
    MKL, read through threadpoolctl) uses at most `n` threads — a lower setting is kept — and its
    setting is back afterwards. The setting is per library, so it holds for the whole process:
    for a short block of tiny calls (small fits), not around work other threads do at once."""
    n = _positive(n, "the number of BLAS threads")
    from threadpoolctl import ThreadpoolController

    capped = [(lib, lib.num_threads) for lib in ThreadpoolController().select(user_api="blas").lib_controllers
              if lib.num_threads > n]
    for lib, _ in capped:
        lib.set_num_threads(n)
    try:
        yield
    finally:
        for lib, before in capped:
            lib.set_num_threads(before)


def become_worker(n: int) -> None:
    """Make this process a pool's worker with a share of `n` cores: ``cores()`` is `n`,
    ``in_pool()`` is True (here and in the processes it starts), and its compute threads are `n`."""
    os.environ.update(worker_env(n))
    limit_threads(n)
