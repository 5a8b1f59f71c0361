"""The `ray` executor: a Ray Data pipeline over the manifest's windows, Scorers on an actor pool.

The pipeline (all Ray Data, no scheduling of our own), made for a cluster of several machines:

1. `ray.data.from_items`: one item per pending window (shard, start, stop), one block each, so
   windows spread over the cluster (Ray Data spreads its actors over the nodes);
2. `map_batches(_ScoreWindows)`: a callable class on an actor pool of `workers` actors (each with
   `num_cpus_per_actor` CPUs and `num_gpus_per_actor` GPUs) that builds the job's Scorer once and,
   for each window, reads and validates its rows itself (from the manifest's staged Parquet and
   its rows' first-row index, which the driver ships once through Ray's object store and each actor
   reads from memory, so no node needs the driver's disk), cuts the audio slices the rows point at
   into a temporary folder on its node (removed after the window; one left by an actor killed
   mid-window is removed by the next actor started on that node: audio_slices.
   remove_orphaned_slice_folders), scores the rows (results
   checked with `check_results`) and writes them as an attempt of the window's shard straight to
   the output store (runtime/shard_sink.py: a local or shared folder, or an object store); it
   returns only (shard, rows, failed rows, attempt);
3. the driver streams those small reports (`iter_batches`) and yields each window once, as a
   WrittenShard that runtime/run.py commits (an atomic rename, or a move on an object store).

No result row passes through the driver, whose memory stays flat however wide the results
(`--store-pooled` states, blueprints). An actor that dies (its node lost) is restarted by Ray Data
(max_restarts=-1) and the windows it held are redone on the actors left: a window redone is a new
attempt under another name, and the driver commits the first report of each window and deletes any
later one, so every id is written exactly once. Called without a sink (not through score_manifest),
the actors send each window's results back to the driver instead (with their dtypes) and the
driver yields frames, as the other executors do.

Rows done inside a window (a Scorer that takes a `progress` keyword, runtime/row_progress.py) come back
as (window, rows) on a Ray queue (an actor of no CPU), at most one message every REPORT_EVERY seconds
per actor, read on a thread of the driver.

Blocks: each window is one block and one batch (one item), so `rows_per_block` is the runtime's
window size (`score_manifest(window_rows=...)`, the shard size); it is only recorded here, and a
window larger than a given `rows_per_block` is refused.

Every node needs what the rows point at (audio under paths every node sees, or on an object
store) and the store's credentials in its own environment: the driver sends none.

Ray: an instance already initialised in this process is used as it is; otherwise `address`
("auto", "ray://host:port", ...) is connected to, or a local instance is started with enough
logical CPUs for the actors plus the readers (so fractional actors never starve the read tasks on
a small machine). A local instance is left running for the next run in this process (Ray stops it
at exit); a watchdog (ray_watchdog) stops it within seconds when this process is killed instead. Each actor gets max(1, floor(num_cpus_per_actor)) compute threads (OpenMP, torch).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import re
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import polars as pl
import pyarrow as pa

from sdscore import errors
from sdscore.errors import SdscoreError
from sdscore.runtime.audio_slices import remove_orphaned_slice_folders, slice_folder
from sdscore.runtime.compute_budget import become_worker, cores, limit_threads
from sdscore.runtime.executors.local import close_scorer
from sdscore.runtime.executors.ray_watchdog import RayInstanceWatch
from sdscore.runtime.manifest_windows import ManifestWindows, WindowReader
from sdscore.runtime.row_progress import REPORT_EVERY, RowsDone, Throttled, WindowRows, score_rows, takes_progress
from sdscore.runtime.scorer import ScoringJob, check_results
from sdscore.runtime.shard_sink import ShardSink, WrittenShard

#: Helper columns carried beside a window's rows through the pipeline.
SHARD_COLUMN, ROW_COLUMN = "_shard", "_row"
#: Logical CPUs of an actor when the caller gives none (Ray's CPUs are bookkeeping: a fraction
#: keeps a pool of `workers` actors schedulable next to the driver's and Ray Data's own work).
DEFAULT_ACTOR_CPUS = 0.5
#: Arrow schema metadata key under which an actor sends each shard's result dtypes (pickled).
_DTYPES_KEY = b"sdscore.result_dtypes"


def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as error:
        raise SdscoreError(
            f"the ray executor needs Ray Data, which is not installed ({error}); "
            f"install sdscore[ray] (pip install 'sdscore[ray]')"
        ) from error
    return ray


class _ShippedManifest:
    """The manifest's staged Parquet file in Ray's object store (put once by the driver), read by each
    worker from its bytes in memory: no node reads the driver's disk, none keeps a copy on its own."""

    def __init__(self, ray, manifest: ManifestWindows):
        reader = manifest.reader()
        with open(reader.scan_path, "rb") as handle:
            self.ref = ray.put(handle.read())
        # each row's first row with its key (the duplicate check), as one array beside it, not per window
        self.first_rows_ref = ray.put(manifest.first_rows.to_numpy())
        self.spec, self.source, self.base_dir = reader.spec, reader.source, reader.base_dir

    def fetch(self) -> tuple[bytes, Any]:
        """(the staged Parquet's bytes, the first-row array)."""
        import ray

        return ray.get(self.ref), ray.get(self.first_rows_ref)

    def reader(self, data: bytes, slice_dir: str) -> WindowReader:
        """A reader of the fetched bytes that cuts slices into `slice_dir`."""
        return WindowReader(data, self.spec, self.source, self.base_dir, slice_dir)


def _first_rows(first_rows, start: int, stop: int) -> pl.Series:
    return pl.Series("first_rows", first_rows[start:stop], dtype=pl.UInt32)


class _ScoreWindows:
    """One actor of the pool: the job's Scorer, built once, applied to each window of a batch; each
    window read here (its slices cut into a temporary folder on this node, removed after the window)
    and written by `sink`. On start it removes the slice folders of this node's dead actors (an actor
    killed mid-window leaves its own).

    A Scorer that cannot be built is reported with the first batch (as the processes executor
    does), so it fails the run with its own message instead of Ray restarting the actor."""

    def __init__(self, job: ScoringJob, threads: int, manifest: _ShippedManifest, sink: ShardSink | None = None,
                 reports=None, report_every: float = REPORT_EVERY):
        self.job, self.sink, self.scorer, self.start_error, self.report = job, sink, None, None, None
        self.manifest = manifest
        become_worker(threads)  # cores() is the actor's share; no pool nests in it
        remove_orphaned_slice_folders()
        try:
            self.data, self.first_rows = manifest.fetch()
            self.scorer = job.create()
        except Exception as error:
            self.start_error = _tagged(error, f"{job.scorer_name} could not be built on a Ray actor: ")
        limit_threads(threads)  # the Scorer may have imported torch just now
        if reports is not None and self.scorer is not None and takes_progress(self.scorer):
            self.report = Throttled(lambda k, rows: _send(reports, (k, rows)), report_every)

    def __call__(self, batch: pa.Table) -> pa.Table:
        if self.start_error is not None:
            raise _Failed(self.start_error)
        tables = [self._window(item) for item in batch.to_pylist()]
        if len(tables) == 1:
            return tables[0]
        metadata = {}
        for table in tables:
            metadata.update(pickle.loads((table.schema.metadata or {}).get(_DTYPES_KEY, pickle.dumps({}))))
        table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables], promote_options="permissive")
        return table.replace_schema_metadata({_DTYPES_KEY: pickle.dumps(metadata)})

    def _window(self, item: dict) -> pa.Table:
        k, start, stop = item["shard"], item["start"], item["stop"]
        slice_dir = slice_folder()  # on this actor's node, named after this process
        try:
            try:
                rows = self.manifest.reader(self.data, slice_dir).window(start, stop,
                                                                        _first_rows(self.first_rows, start, stop))
            except Exception as error:
                raise _Failed(_tagged(error, f"reading rows {start + 1}..{stop}: ")) from error
            return self._score(k, start, stop, rows)
        finally:
            shutil.rmtree(slice_dir, ignore_errors=True)

    def _score(self, k: int, start: int, stop: int, rows: pl.DataFrame) -> pa.Table:
        try:
            progress = None if self.report is None else WindowRows(k, rows.height, self.report)
            results = score_rows(self.scorer, rows, progress is not None, progress)
            results = check_results(rows, results, self.job.scorer_name, start)
            clash = [c for c in (SHARD_COLUMN, ROW_COLUMN) if c in results.columns]
            if clash:
                raise SdscoreError(f"{self.job.scorer_name} returned column(s) {clash}, reserved by the ray executor")
            if self.sink is not None:
                written = self.sink.write(k, results)
                return pa.table({"shard": [k], "rows": [written.rows], "failed": [written.failed],
                                 "location": [written.location]})
        except Exception as error:
            raise _Failed(_tagged(error)) from error
        table = results.with_columns(pl.lit(k, pl.Int64).alias(SHARD_COLUMN),
                                     pl.int_range(start, stop, dtype=pl.Int64).alias(ROW_COLUMN)).to_arrow()
        return table.replace_schema_metadata({**(table.schema.metadata or {}),
                                              _DTYPES_KEY: pickle.dumps({k: dict(results.schema)})})

    def __del__(self):  # Ray Data drops the UDF when the actor shuts down gracefully
        if getattr(self, "scorer", None) is not None:
            scorer, self.scorer = self.scorer, None
            close_scorer(scorer)


def _send(reports, message: tuple[int, int]) -> None:
    """A row count to the driver's queue; one that cannot be sent is dropped (the window's results carry
    its rows), never failing the window."""
    try:
        reports.put_nowait(message)
    except Exception:  # noqa: BLE001 - a full or closed queue, or the driver already gone
        pass


class _RowReports:
    """The driver's side of the actors' row counts: a Ray queue (an actor of no CPU) read by a thread that
    hands (window, rows) to rows_done until close(), which reads what is left (an actor's count is in the
    queue before the batch it belongs to is returned) and removes the queue."""

    def __init__(self, rows_done: RowsDone):
        from ray.util.queue import Queue

        self.queue, self.rows_done = Queue(actor_options={"num_cpus": 0}), rows_done
        self.stop, self.error = threading.Event(), None
        self.thread = threading.Thread(target=self._forward, name="sdscore-rows", daemon=True)
        self.thread.start()

    def _forward(self) -> None:
        from ray.util.queue import Empty

        while not self.stop.is_set():
            try:
                self._take(self.queue.get(timeout=0.2))
            except Empty:
                continue

    def _take(self, message: tuple[int, int]) -> None:
        if self.error is None:
            try:
                self.rows_done(*message)
            except Exception as error:  # noqa: BLE001 - raised by the run, in its own thread
                self.error = error

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        try:
            for message in self.queue.get_nowait_batch(self.queue.qsize()):
                self._take(message)
        finally:
            self.queue.shutdown()


def _score_empty(job: ScoringJob, manifest: _ShippedManifest, threads: int) -> pl.DataFrame:
    """The (empty) results of an empty manifest, so the output still has the Scorer's columns."""
    become_worker(threads)
    remove_orphaned_slice_folders()
    scratch = slice_folder()
    try:
        try:
            reader = manifest.reader(manifest.fetch()[0], scratch)
            scorer = job.create()
        except Exception as error:
            raise _Failed(_tagged(error, f"{job.scorer_name} could not be built on a Ray worker: ")) from error
        try:
            rows = reader.window(0, 0, pl.Series("first_rows", [], dtype=pl.UInt32))
            return check_results(rows, scorer(rows), job.scorer_name, 0)
        except Exception as error:
            raise _Failed(_tagged(error)) from error
        finally:
            close_scorer(scorer)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _Shards:
    """Rows of the pending shards gathered from the output batches until each is whole."""

    def __init__(self, windows):
        self.bounds = {k: (start, stop) for k, start, stop in windows}
        self.parts: dict[int, list[pl.DataFrame]] = {}
        self.counts: dict[int, int] = {}
        self.dtypes: dict[int, dict[str, pl.DataType]] = {}
        self.done: set[int] = set()

    def add(self, batch: pa.Table) -> Iterator[tuple[int, pl.DataFrame]]:
        """The shards this batch completes."""
        metadata = batch.schema.metadata or {}
        sent = pickle.loads(metadata[_DTYPES_KEY]) if _DTYPES_KEY in metadata else {}
        frame = pl.from_arrow(batch.replace_schema_metadata(None))
        if not frame.height:
            return
        for part in frame.partition_by(SHARD_COLUMN, maintain_order=True):
            k = int(part[SHARD_COLUMN][0])
            if k not in self.bounds:
                raise SdscoreError(f"the ray executor got {part.height} result rows for shard {k}, which was not asked for")
            start, stop = self.bounds[k]
            if k in self.done:
                raise SdscoreError(f"shard {k}: duplicate result rows for input rows {start + 1}..{stop} from ray")
            self.parts.setdefault(k, []).append(part)
            self.counts[k] = self.counts.get(k, 0) + part.height
            known = self.dtypes.setdefault(k, {})
            for name, dtype in sent.get(k, {}).items():
                if known.get(name) in (None, pl.Null):  # a piece that is all null may say Null
                    known[name] = dtype
            if self.counts[k] >= stop - start:
                yield k, self._finish(k)

    def _finish(self, k: int) -> pl.DataFrame:
        start, stop = self.bounds[k]
        parts = self.parts.pop(k)
        frame = (parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed")).sort(ROW_COLUMN)
        rows = frame[ROW_COLUMN]
        if frame.height != stop - start or rows.n_unique() != frame.height or rows[0] != start or rows[-1] != stop - 1:
            raise SdscoreError(
                f"shard {k}: ray returned {frame.height} result rows ({rows.n_unique()} distinct) for input rows "
                f"{start + 1}..{stop}; rows were lost or duplicated"
            )
        self.done.add(k)
        del self.counts[k]
        frame = frame.drop(SHARD_COLUMN, ROW_COLUMN)
        dtypes = {n: d for n, d in self.dtypes.pop(k, {}).items() if n in frame.columns and frame.schema[n] != d}
        return frame.cast(dtypes) if dtypes else frame

    def missing(self) -> list[int]:
        return [k for k in self.bounds if k not in self.done]


class _Reports:
    """The workers' reports of the windows they wrote: each window's first report is yielded, a later one
    (a window redone after its actor died, once its first report was in) is deleted through the sink."""

    def __init__(self, windows, sink: ShardSink):
        self.bounds = {k: (start, stop) for k, start, stop in windows}
        self.sink, self.done = sink, set()

    def add(self, batch: pa.Table) -> Iterator[tuple[int, WrittenShard]]:
        for report in batch.replace_schema_metadata(None).to_pylist():
            written = WrittenShard(int(report["shard"]), int(report["rows"]), int(report["failed"]), report["location"])
            k = written.shard
            if k not in self.bounds:
                raise SdscoreError(f"the ray executor got a report of shard {k}, which was not asked for")
            if k in self.done:
                self.sink.discard(written)
                continue
            self.done.add(k)
            yield k, written

    def missing(self) -> list[int]:
        return [k for k in self.bounds if k not in self.done]


class _Failed(RuntimeError):
    """Raised in Ray tasks and actors with the original error's text between tags: Ray keeps the
    text of a remote error (its traceback) but not always the error, so the driver finds it there."""


_TAG = re.compile(r"<sdscore-error class=(\w+)>(.*?)</sdscore-error>", re.DOTALL)


def _tagged(error: BaseException, prefix: str = "") -> str:
    if isinstance(error, SdscoreError):
        name, text = type(error).__name__, str(error)
    else:
        name, text = "SdscoreError", f"{type(error).__name__}: {error}"
    return f"<sdscore-error class={name}>{prefix}{text}</sdscore-error>"


def _failure(error: BaseException) -> SdscoreError:
    """An SdscoreError with the message of the error raised in a Ray task or actor (of its own class
    when that is one of sdscore.errors), or Ray's own error's first line when Ray itself failed."""
    found = _TAG.search(str(error))
    if found:
        name, text = found.groups()
        kind = getattr(errors, name, SdscoreError)
        kind = kind if isinstance(kind, type) and issubclass(kind, SdscoreError) else SdscoreError
        try:
            return kind(text)
        except Exception:
            return SdscoreError(text)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    return SdscoreError(f"scoring on ray failed ({type(error).__name__}: {text}); see the Ray logs for more")


def _ray_data_logs_follow_the_session() -> None:
    """Point Ray Data's log files at the current Ray session.

    Ray Data's file handler (ray 2.60: ``SessionFileHandler`` on the ``ray.data`` loggers) resolves
    the session folder on its first record and reopens that same path after a close, so in a process
    that starts a second Ray session after the first session's folder was removed (a temporary
    ``_temp_dir``, a torn-down cluster) every run failed with FileNotFoundError naming the old
    folder's ray-data.log. A handler whose file lies outside the current session's folder is closed
    here and resolves the current folder on its next record. Private Ray API: on another Ray whose
    internals differ, nothing is done."""
    try:
        from ray.data._internal import logging as ray_data_logging
        current = ray_data_logging.get_log_directory()
        names = ray_data_logging._get_logger_names()
        handler_type = ray_data_logging.SessionFileHandler
    except Exception:  # another Ray version's internals: leave its logging as it is
        return
    if current is None:
        return
    for name in names:
        for handler in logging.getLogger(name).handlers:
            path = getattr(handler, "_path", None)
            if (isinstance(handler, handler_type) and path is not None
                    and os.path.dirname(os.path.abspath(path)) != os.path.abspath(current)):
                inner = getattr(handler, "_handler", None)
                if inner is not None:
                    inner.close()
                handler._handler = None


@contextmanager
def _quiet_ray_data(ray):
    """No progress bars or execution banners from Ray Data while we run (errors still show); its log
    files in the current session's folder."""
    _ray_data_logs_follow_the_session()
    context = ray.data.DataContext.get_current()
    quiet = {"enable_progress_bars": False, "print_on_execution_start": False, "enable_auto_log_stats": False}
    saved = {name: getattr(context, name) for name in quiet if hasattr(context, name)}
    data_logger = logging.getLogger("ray.data")
    saved_level = data_logger.level
    for name in saved:
        setattr(context, name, quiet[name])
    data_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(context, name, value)
        data_logger.setLevel(saved_level)


#: The watchdog of the local Ray instance this process started last (see ray_watchdog).
_WATCH: RayInstanceWatch | None = None


@contextmanager
def _watched_local_start(ray):
    """Start a watchdog that stops the local instance `ray.init` starts in the block once this
    process is gone, even killed (Linux; elsewhere Ray's own clean-up only). The processes Ray
    starts carry the watchdog's token in their environment, and it learns the instance's session
    folder; when `ray.init` joined a running instance instead (RAY_ADDRESS, a `ray start` cluster),
    none does and the watchdog is let go."""
    global _WATCH
    if not (hasattr(os, "pidfd_open") and os.path.isdir("/proc")):
        yield
        return
    if _WATCH is not None:  # this process's previous instance, already shut down (ray is not initialised)
        _WATCH.close()
        _WATCH = None
    watch = RayInstanceWatch.start()
    try:
        with watch.marking_environment():
            yield
    except BaseException:
        watch.close()  # stops what a failed start left behind
        raise
    node = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(node, "_global_node", None)
    if node is not None and getattr(node, "head", True) is False:  # joined, not started
        watch.close()
        return
    session = getattr(node, "get_session_dir_path", None)
    if callable(session):
        watch.tell_session(session())
    _WATCH = watch


class RayExecutor:
    """`workers` Scorer actors on a Ray cluster (or a local Ray), fed and drained by Ray Data."""

    def __init__(
        self,
        workers: int,
        address: str | None = None,
        num_cpus_per_actor: float | None = None,
        num_gpus_per_actor: float = 0.0,
        rows_per_block: int | None = None,
        report_every: float = REPORT_EVERY,
    ):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        cpus = DEFAULT_ACTOR_CPUS if num_cpus_per_actor is None else float(num_cpus_per_actor)
        if not cpus > 0:
            raise ValueError(f"num_cpus_per_actor must be > 0, got {num_cpus_per_actor!r}")
        if not float(num_gpus_per_actor) >= 0:
            raise ValueError(f"num_gpus_per_actor must be >= 0, got {num_gpus_per_actor!r}")
        if rows_per_block is not None and (
            isinstance(rows_per_block, bool) or not isinstance(rows_per_block, int) or rows_per_block < 1
        ):
            raise ValueError(f"rows_per_block must be an integer >= 1, got {rows_per_block!r}")
        self.workers = workers
        self.address = address
        self.num_cpus_per_actor = cpus
        self.num_gpus_per_actor = float(num_gpus_per_actor)
        self.rows_per_block = rows_per_block
        self.threads = max(1, math.floor(cpus))
        self.report_every = report_every  # seconds between two row-count messages of an actor

    def describe(self) -> dict:
        return {
            "name": "ray",
            "workers": self.workers,
            "address": self.address,
            "num_cpus_per_actor": self.num_cpus_per_actor,
            "num_gpus_per_actor": self.num_gpus_per_actor,
            "rows_per_block": self.rows_per_block,
            "threads_per_actor": self.threads,
        }

    def _start_ray(self, ray) -> None:
        if ray.is_initialized():
            return
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        if self.address:  # a cluster of the user's: nothing of it is ours to stop
            ray.init(address=self.address, **quiet)
            return
        needed = self.workers * self.num_cpus_per_actor + 1  # the actors, and a core for Ray Data's own tasks
        with _watched_local_start(ray):
            ray.init(num_cpus=max(cores(), math.ceil(needed)), include_dashboard=False, **quiet)

    def _check_resources(self, ray) -> None:
        """Refuse an actor pool a local Ray can never hold (Ray Data would wait for it forever).

        A cluster given by address may autoscale, so it is trusted."""
        if self.address:
            return
        total = ray.cluster_resources()
        gpus = self.workers * self.num_gpus_per_actor
        cpus = self.workers * self.num_cpus_per_actor
        for name, needed in (("CPU", cpus), ("GPU", gpus)):
            have = total.get(name, 0.0)
            if needed > have + 1e-9:
                raise SdscoreError(
                    f"the ray executor needs {needed:g} {name}s for {self.workers} actor(s) but "
                    f"the local Ray instance has {have:g}; use fewer workers or smaller num_cpus/num_gpus per actor"
                )

    def run(self, job: ScoringJob, manifest: ManifestWindows, windows, rows_done: RowsDone | None = None,
            sink: ShardSink | None = None) -> Iterator[tuple[int, pl.DataFrame | WrittenShard]]:
        """(shard, results) per window; with a sink, the actors write the results (an attempt each) and
        (shard, WrittenShard) comes back instead, for the caller to commit."""
        if not windows:
            return
        largest = max(stop - start for _, start, stop in windows)
        if self.rows_per_block is not None and largest > self.rows_per_block:
            raise SdscoreError(
                f"rows_per_block={self.rows_per_block} but the run's windows hold up to {largest} rows; a block is "
                f"one window, so score with window_rows={self.rows_per_block}"
            )
        ray = _import_ray()
        self._start_ray(ray)
        self._check_resources(ray)
        with _quiet_ray_data(ray):
            shipped = _ShippedManifest(ray, manifest)  # (held until the run ends: the actors read it)
            for k, start, stop in windows:
                if start == stop:  # only an empty manifest has an empty window: no rows to stream
                    yield k, self._score_empty(ray, job, shipped)
            windows = [window for window in windows if window[1] < window[2]]
            if windows:
                yield from self._stream(ray, job, shipped, windows, rows_done, sink)

    def _stream(self, ray, job: ScoringJob, manifest: _ShippedManifest, windows, rows_done: RowsDone | None = None,
                sink: ShardSink | None = None):
        """Run the pipeline, yielding each shard once (once all its rows, or its report, are back)."""
        reports = None if rows_done is None else _RowReports(rows_done)
        try:
            yield from self._drain(ray, job, manifest, windows, reports, sink)
        finally:
            if reports is not None:
                reports.close()
        if reports is not None and reports.error is not None:
            raise reports.error

    def _drain(self, ray, job: ScoringJob, manifest: _ShippedManifest, windows, reports, sink: ShardSink | None):
        batches = iter(self._dataset(ray, job, manifest, windows, reports, sink).iter_batches(
            batch_size=None, batch_format="pyarrow"
        ))
        try:
            shards = _Shards(windows) if sink is None else _Reports(windows, sink)
            while True:
                try:
                    batch = next(batches, None)
                except Exception as error:  # Ray wraps what the read tasks and Scorers raised
                    raise _failure(error) from error
                if batch is None:
                    break
                if reports is not None and reports.error is not None:
                    raise reports.error
                yield from shards.add(batch)
            missing = shards.missing()
            if missing:
                raise SdscoreError(
                    f"ray returned too few result rows for shard(s) {missing[:5]}"
                    f"{' ...' if len(missing) > 5 else ''}; rows were lost"
                )
        finally:
            close = getattr(batches, "close", None)
            if callable(close):  # stops the Ray Data execution when we leave early
                close()

    def _score_empty(self, ray, job: ScoringJob, manifest: _ShippedManifest) -> pl.DataFrame:
        gpu = {"num_gpus": self.num_gpus_per_actor} if self.num_gpus_per_actor > 0 else {}
        task = ray.remote(_score_empty).options(num_cpus=self.num_cpus_per_actor, max_retries=0, **gpu)
        try:
            return ray.get(task.remote(job, manifest, self.threads))
        except Exception as error:
            raise _failure(error) from error

    def _dataset(self, ray, job: ScoringJob, manifest: _ShippedManifest, windows, reports=None,
                 sink: ShardSink | None = None):
        items = [{"shard": k, "start": start, "stop": stop} for k, start, stop in windows]
        try:
            dataset = ray.data.from_items(items, override_num_blocks=len(items))
        except TypeError:  # Ray < 2.10
            dataset = ray.data.from_items(items, parallelism=len(items))
        gpu = {"num_gpus": self.num_gpus_per_actor} if self.num_gpus_per_actor > 0 else {}
        return dataset.map_batches(
            _ScoreWindows,
            fn_constructor_kwargs={"job": job, "threads": self.threads, "manifest": manifest, "sink": sink,
                                   "reports": None if reports is None else reports.queue,
                                   "report_every": self.report_every},
            batch_size=1,  # one window (one item) per call: an actor reads, scores and writes it whole
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=self.workers),
            num_cpus=self.num_cpus_per_actor,
            **gpu,
        )
