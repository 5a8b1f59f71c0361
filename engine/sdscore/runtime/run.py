"""score_manifest: run a ScoringJob over a manifest file into one results Parquet file.

The one loop every protocol's `sdscore score` goes through: check the output path before any
work, lock the output against a second run (runtime/output_lock.py), open the manifest in
windows (runtime/manifest_windows.py), open or resume the sharded output
(runtime/sharded_output.py) under the run record (runtime/provenance.py), score the pending
windows on an executor (runtime/executors/), write each window's results as a shard, report
progress, and merge the shards with the run's provenance. Nothing here knows a protocol. An output
on an object store (s3://, gs://) is written by runtime/object_output.py under a lease
(runtime/object_lock.py) instead of a local flock.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdscore import storage
from sdscore.corpus.validate import ERROR_COLUMN
from sdscore.errors import SdscoreError
from sdscore.progress import Progress, accepts_keyword
from sdscore.runtime.audio_slices import owned_folder, remove_orphaned_folders, slice_files
from sdscore.runtime.executors import Executor, make_executor
from sdscore.runtime.manifest_windows import ManifestWindows
from sdscore.runtime.object_lock import ObjectLock
from sdscore.runtime.object_output import ObjectShardedOutput, recorded_object_shard_rows
from sdscore.runtime.output_lock import OutputLock
from sdscore.runtime.provenance import manifest_fingerprint, now, run_provenance, weights_digest
from sdscore.runtime.row_progress import RunRows
from sdscore.runtime.scorer import ScoringJob
from sdscore.runtime.shard_sink import WrittenShard
from sdscore.runtime.sharded_output import ShardedOutput, parts_folder, recorded_shard_rows

log = logging.getLogger(__name__)

#: Rows per window (and per resumable shard) when neither the caller nor an unfinished run says.
DEFAULT_WINDOW_ROWS = 1024
#: Smallest window used to spread a small manifest over several workers.
MIN_SPREAD_ROWS = 8
OUTPUT_SUFFIXES = (".parquet", ".pq")


@dataclass(frozen=True)
class RunSummary:
    """What a run wrote: the output, its rows and failed rows, the shards scored now, wall time."""

    out: Path | str  # a str for an object-store URI
    rows: int
    failed: int
    scored_shards: int
    resumed_shards: int
    seconds: float


def check_output_path(out: str | os.PathLike, manifest: str | os.PathLike) -> Path | str:
    """Refuse an output path that would fail after the scoring, or overwrite the input, up front.

    A file:// URI is its local path; an object-store URI (s3://, gs://) is returned as given."""
    out = storage.normalize(out)
    if storage.is_remote(out):
        return check_object_output(out, manifest)
    out = Path(out)
    if out.suffix.lower() not in OUTPUT_SUFFIXES:
        raise SdscoreError(f"{out}: results are written as Parquet; give --out a .parquet path")
    if out.is_dir():
        raise SdscoreError(f"{out}: is a folder; give --out a .parquet file path")
    if os.path.exists(manifest) and out.exists() and os.path.samefile(out, manifest):
        raise SdscoreError(f"{out}: is the manifest itself; write the results elsewhere")
    parent = out.parent if str(out.parent) else Path(".")
    probe = parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise SdscoreError(f"{out}: cannot write there ({probe} is not a writable folder)")
    return out


def check_object_output(out: str, manifest: str | os.PathLike) -> str:
    """An output URI: a Parquet name with a bucket, not the manifest itself."""
    storage.split_uri(out)
    if not out.lower().endswith(OUTPUT_SUFFIXES):
        raise SdscoreError(f"{out}: results are written as Parquet; give --out a .parquet URI")
    if isinstance(manifest, str) and storage.is_remote(manifest) and manifest.rstrip("/") == out:
        raise SdscoreError(f"{out}: is the manifest itself; write the results elsewhere")
    return out


def _window_rows(requested: int | None, out: Path | str, resume: bool, n_rows: int, workers: int) -> int:
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise ValueError(f"window_rows must be an integer >= 1, got {requested!r}")
        return requested
    recorded = (recorded_object_shard_rows(out) if isinstance(out, str) else recorded_shard_rows(out)) if resume else None
    if recorded is not None:  # the shard layout belongs to the unfinished run
        return recorded
    if workers > 1:  # spread a small manifest over the workers (two windows each)
        return max(MIN_SPREAD_ROWS, min(DEFAULT_WINDOW_ROWS, math.ceil(n_rows / (2 * workers))))
    return DEFAULT_WINDOW_ROWS


def score_manifest(
    job: ScoringJob,
    manifest: str | os.PathLike,
    out: str | os.PathLike,
    *,
    executor: str | Executor | None = None,
    workers: int = 1,
    ray_address: str | None = None,
    resume: bool = False,
    window_rows: int | None = None,
    executor_options: dict | None = None,
    progress: Progress | None = None,
    read_options: Mapping[str, Any] | None = None,
) -> RunSummary:
    """Score every row of `manifest` with `job` into `out` (Parquet), resumably; see the module doc.

    executor: "local" | "processes" | "ray" (or an Executor; default: processes when workers > 1,
    else local); workers: processes or Ray actors;
    window_rows: rows per window and per shard (default: the unfinished run's on resume, else
    DEFAULT_WINDOW_ROWS, smaller to give every worker two windows); executor_options go to the
    executor (ray: num_cpus_per_actor, num_gpus_per_actor); progress(stage, done, total) gets the rows
    done (also those a Scorer reports inside a window, runtime/row_progress.py; from a helper thread
    with the processes and ray executors, one call at a time), and `failed=` (rows with an error so
    far) when it takes that keyword; read_options: keywords of the manifest reader
    (sdscore.corpus.read.load_table, e.g. lhotse_group_by), passed through unread and kept in the run
    record (a resume with other read options is refused, naming them). Returns a RunSummary; the
    results are in `out`, one row per manifest row in manifest order, with an `error` column.
    """
    began, started = time.perf_counter(), now()
    out = check_output_path(out, manifest)
    if executor is None:
        executor = "processes" if workers > 1 else "local"
    if isinstance(executor, str):
        runner = make_executor(executor, workers=workers, ray_address=ray_address, **(executor_options or {}))
    else:
        runner = executor
    remote = isinstance(out, str)
    if not remote:
        out.parent.mkdir(parents=True, exist_ok=True)
    with (ObjectLock(out) if remote else OutputLock(out)) as lock, _staging_folder(out) as staging:
        windows = ManifestWindows(manifest, job.protocol, staging, read_options)
        rows_per_window = _window_rows(window_rows, out, resume, windows.n_rows, workers)
        record = {
            "protocol": windows.protocol,
            "scorer": job.scorer_name,
            "settings": job.score_settings(),
            "model": {"dir": None if job.model_dir is None else os.path.abspath(job.model_dir),
                      "weights": weights_digest(job.model_dir)},
            "manifest": manifest_fingerprint(manifest, windows.keys_digest, windows.n_rows, windows.local_path),
        }
        if read_options:  # (absent when none: a run recorded before read options resumes as it was)
            record["read_options"] = dict(read_options)
        if remote:
            output = ObjectShardedOutput(out, windows.n_rows, rows_per_window, record, resume,
                                         staging_dir=staging, lock=lock)
        else:
            output = ShardedOutput(out, windows.n_rows, rows_per_window, record, resume)
        todo = [(k, *output.rows_of(k)) for k in output.pending()]
        done = windows.n_rows - sum(stop - start for _, start, stop in todo)
        counter = RunRows(progress, f"score {windows.protocol}", windows.n_rows, done)
        counter.report()
        options = {"rows_done": counter.rows_done} if progress and accepts_keyword(runner.run, "rows_done") else {}
        if accepts_keyword(runner.run, "sink"):  # its workers write their shards; we commit them
            options["sink"] = output.sink()
        scored = runner.run(job, windows, todo, **options)
        try:
            for k, results in scored:
                if isinstance(results, WrittenShard):
                    output.commit_shard(k, results)
                    counter.window_finished(k, results.rows, results.failed)
                else:
                    output.write_shard(k, results)
                    counter.window_finished(k, results.height, int(results[ERROR_COLUMN].is_not_null().sum()))
        except BaseException:
            if "sink" in options:
                getattr(scored, "close", lambda: None)()  # no worker writes after this
                _abandon(output)
            raise
        rows, failed = output.finish(run_provenance(record, runner.describe(), started))
    return RunSummary(out, rows, failed, len(todo), output.n_shards - len(todo), time.perf_counter() - began)


def _abandon(output) -> None:
    """Delete a stopped run's uncommitted attempts; the error that stopped it is the one reported."""
    try:
        output.abandon()
    except Exception as error:  # noqa: BLE001 - e.g. the store is unreachable now
        log.warning("%s: could not delete this run's uncommitted shard attempts (%s)", output.parts, error)


_MERGED = re.compile(r"\.merged-[a-z0-9_]{8}\.parquet")  # object_output's merged file (mkstemp)


def _staged_files(folder: str) -> tuple[list[str], list[str]] | None:
    """What a run writes in its staging folder (manifest.parquet, slices/ of slice files, an object
    store's .merged-*.parquet) as (files, subfolders), or None if the folder holds anything else."""
    files, subfolders = [], []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name == "slices" and entry.is_dir(follow_symlinks=False):
                slices = slice_files(entry.path)
                if slices is None:
                    return None
                files += slices
                subfolders.append(entry.path)
            elif entry.is_file(follow_symlinks=False) and (entry.name == "manifest.parquet"
                                                           or _MERGED.fullmatch(entry.name)):
                files.append(entry.path)
            else:
                return None
    return files, subfolders


@contextmanager
def _staging_folder(out: Path | str) -> Iterator[str]:
    """A temporary folder beside the output (for a staged copy of a non-Parquet manifest, and the
    slices it points at), or in the system's temp folder for an output on an object store (also where
    its merged file is written before its upload). Named after this host and process (owned_folder);
    a killed run's one for the same output name, on this host, is removed first (remove_orphaned_folders:
    its process is gone and it holds only what a run writes there). Called with the output's lock held."""
    if isinstance(out, str):
        parent, prefix = tempfile.gettempdir(), f"sdscore-{storage.basename(out)[:40]}.stage-"
    else:
        parent, prefix = os.fspath(out.parent), f".{out.name[:40]}.stage-"
    remove_orphaned_folders(parent, prefix, _staged_files)
    staging = owned_folder(prefix, parent)
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


__all__ = ["DEFAULT_WINDOW_ROWS", "RunSummary", "check_output_path", "parts_folder", "score_manifest"]
