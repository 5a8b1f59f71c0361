"""Resumable output: results written shard by shard beside the target, merged at the end.

`OUT.parquet` is produced from `OUT.parquet.parts/part-NNNNNN.parquet` (one per window of input
rows, each written atomically and fsynced) plus `run.json`, the record of what produced them
(runtime/provenance.py). An interrupted run resumes with `resume=True`: finished shards are kept,
the rest are scored. A record that differs (another model, manifest or score-affecting setting)
is refused with the names of what differs, never mixed. The final merge streams the shards in
order into one Parquet file (one shard in memory at a time) with the run's provenance as
metadata, written atomically; then the parts folder is removed.

A shard is written by the driver (`write_shard`), or by a worker as an attempt beside the shards
(runtime/shard_sink.py: `sink()` is what the workers get) that the driver commits (`commit_shard`:
an atomic rename onto the shard's name) or drops; `abandon()` deletes a stopped run's attempts.
"""

from __future__ import annotations

import json
import os
import logging
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from sdscore.atomic_write import atomic_path, write_json
from sdscore.corpus.write import write_manifest
from sdscore.errors import SdscoreError
from sdscore.runtime.provenance import METADATA_KEY
from sdscore.runtime.shard_sink import (ATTEMPT_RUNS_FILE, ShardSink, WrittenShard, attempt_run, check_attempt,
                                        new_run_token)

log = logging.getLogger(__name__)

RUN_FILE = "run.json"


def parts_folder(out: str | os.PathLike) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".parts")


def recorded_shard_rows(out: str | os.PathLike) -> int | None:
    """The window size an unfinished run at `out` used (None when there is none or it is unreadable)."""
    try:
        return int(json.loads((parts_folder(out) / RUN_FILE).read_text(encoding="utf-8"))["shard_rows"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _differences(previous: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted names of the entries that differ between two records."""
    names = []
    for key in sorted(set(previous) | set(current)):
        a, b = previous.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            names += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            names.append(f"{prefix}{key} ({a!r} then, {b!r} now)")
    return names


class ShardedOutput:
    """Shards of `out` for a run of `n_rows` input rows cut into windows of `shard_rows`."""

    def __init__(self, out: str | os.PathLike, n_rows: int, shard_rows: int, record: dict, resume: bool):
        if shard_rows < 1:
            raise ValueError(f"shard_rows must be >= 1, got {shard_rows}")
        self.out = Path(out)
        self.parts = parts_folder(self.out)
        self.n_rows = n_rows
        self.shard_rows = shard_rows
        self.record = {**record, "n_rows": n_rows, "shard_rows": shard_rows}
        self.run_token = new_run_token()
        self._registered = False
        self._open(resume)

    def _open(self, resume: bool) -> None:
        run_file = self.parts / RUN_FILE
        if self.parts.is_dir() and self._only_attempts([p.name for p in self.parts.iterdir()]):
            return  # only attempts of runs stopped before their first shard: nothing to resume (finish deletes them)
        if self.parts.exists() and not self.parts.is_dir():
            raise SdscoreError(f"{self.parts}: is a file, not the parts folder of a run (shards are written there); "
                               f"move it away or choose another output")
        if self.parts.is_dir() and not run_file.exists():
            raise _foreign(self.parts, [p.name for p in self.parts.iterdir()])
        if self.parts.exists() and not resume:
            raise SdscoreError(
                f"{self.parts}: holds shards of an unfinished run; pass --resume to continue it, "
                f"or delete the folder to start over"
            )
        if self.parts.exists():
            try:
                previous = json.loads(run_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise SdscoreError(f"{run_file}: cannot read the earlier run's record ({exc})") from exc
            if previous != self.record:
                changed = _differences(previous, self.record)
                raise SdscoreError(
                    f"{self.parts}: the unfinished run was made with different settings, so its shards "
                    f"cannot be mixed with this run's: {'; '.join(changed)}. Rerun with the earlier settings "
                    f"to finish it, or delete the folder to start over"
                )
            return

    def _kept(self) -> str:
        """What a failed write leaves: the finished shards, and how to go on from them."""
        return (f"the finished shards in {self.parts} are intact: free space or fix the permissions, then rerun "
                f"with --resume to continue")

    @property
    def n_shards(self) -> int:
        """Windows of the input; an empty input still has one (empty) shard, so the output has columns."""
        return max(1, (self.n_rows + self.shard_rows - 1) // self.shard_rows)

    def shard_path(self, k: int) -> Path:
        return self.parts / f"part-{k:06d}.parquet"

    def rows_of(self, k: int) -> tuple[int, int]:
        """[start, stop) of input rows in shard k."""
        return k * self.shard_rows, min(self.n_rows, (k + 1) * self.shard_rows)

    def pending(self) -> list[int]:
        """Shards not yet written."""
        return [k for k in range(self.n_shards) if not self.shard_path(k).is_file()]

    def write_shard(self, k: int, frame: pl.DataFrame) -> None:
        start, stop = self.rows_of(k)
        if frame.height != stop - start:
            raise SdscoreError(f"shard {k}: {frame.height} result rows for input rows {start + 1}..{stop}")
        try:
            if not (self.parts / RUN_FILE).is_file():  # with the first shard: a run that fails before any leaves nothing
                self.parts.mkdir(parents=True, exist_ok=True)
                write_json(self.parts / RUN_FILE, self.record)
            write_manifest(frame, self.shard_path(k))
        except (OSError, pl.exceptions.PolarsError) as error:  # disk full, quota, a read-only folder
            raise SdscoreError(f"{self.shard_path(k)}: could not write the shard of rows {start + 1}..{stop} "
                               f"({_reason(error)}); {self._kept()}") from error

    def sink(self) -> ShardSink:
        """The picklable writer of this run's attempts, for workers that write their own shards (this
        run is first listed in the parts folder's ATTEMPT_RUNS_FILE: clean-up deletes only listed runs' attempts)."""
        if not self._registered:
            runs = self._attempt_runs()
            if self.run_token not in runs:
                try:
                    self._write_attempt_runs(runs | {self.run_token})
                except OSError as error:  # (a store's StorageError too)
                    raise SdscoreError(f"{self._runs_file()}: could not list this run before its workers write "
                                       f"their shards ({_reason(error)})") from error
            self._registered = True
        return ShardSink(os.fspath(self.parts), self.run_token)

    def _only_attempts(self, names: list[str]) -> bool:
        """Whether a parts folder holds nothing but attempts of listed runs (and their list)."""
        runs = self._attempt_runs()
        return all(name == ATTEMPT_RUNS_FILE or attempt_run(name) in runs for name in names)

    def _runs_file(self):
        return self.parts / ATTEMPT_RUNS_FILE

    def _attempt_runs(self) -> set[str]:
        """The runs listed in the parts folder as writers of attempts (none when the list is absent or unreadable)."""
        path = self._runs_file()
        if not path.is_file():  # absent, or not a file sdscore wrote (a FIFO would block the read)
            return set()
        try:
            return _run_tokens(path.read_bytes())
        except OSError:
            return set()

    def _write_attempt_runs(self, runs: set[str]) -> None:
        """Write the list of runs (deleting it when none is left)."""
        if self._runs_file().exists() and not self._runs_file().is_file():  # never replaced: sdscore did not make it
            raise OSError(f"{self._runs_file()} is not a regular file")
        if runs:
            self.parts.mkdir(parents=True, exist_ok=True)
            write_json(self._runs_file(), {"runs": sorted(runs)})
        else:
            self._runs_file().unlink(missing_ok=True)

    def _cleanable_runs(self) -> set[str]:
        """The runs whose attempts this run deletes: the listed ones, and itself once it listed itself."""
        return self._attempt_runs() | ({self.run_token} if self._registered else set())

    def _check_written(self, k: int, written: WrittenShard) -> None:
        start, stop = self.rows_of(k)
        check_attempt(self.sink().parts, written)
        if written.shard != k or written.rows != stop - start:
            raise SdscoreError(f"shard {k}: a worker wrote {written.rows} result rows for input rows {start + 1}..{stop} "
                               f"(as shard {written.shard})")

    def commit_shard(self, k: int, written: WrittenShard) -> None:
        """Make a worker's attempt shard k (an atomic rename; the run record is written first)."""
        self._check_written(k, written)
        start, stop = self.rows_of(k)
        try:
            if not (self.parts / RUN_FILE).is_file():
                write_json(self.parts / RUN_FILE, self.record)
            os.replace(written.location, self.shard_path(k))
            _sync_folder(self.parts)
        except OSError as error:
            raise SdscoreError(f"{self.shard_path(k)}: could not commit the shard of rows {start + 1}..{stop} "
                               f"({_reason(error)}); {self._kept()}") from error

    def _attempts(self, runs: set[str]) -> list[Path]:
        if not self.parts.is_dir():
            return []
        return [p for p in self.parts.iterdir() if attempt_run(p.name) in runs]

    def abandon(self) -> None:
        """After a failed run: delete this run's uncommitted attempts (and its entry in the list of
        runs), and the parts folder when that empties it (a run that committed nothing leaves nothing)."""
        if not self._registered:
            return
        for path in self._attempts({self.run_token}):
            path.unlink(missing_ok=True)
        self._write_attempt_runs(self._attempt_runs() - {self.run_token})
        try:
            self.parts.rmdir()
        except OSError:
            pass

    def finish(self, provenance: dict) -> tuple[int, int]:
        """Stream the shards in order into `out` (atomically) with provenance; remove the parts.

        Returns (rows, failed rows)."""
        missing = self.pending()
        if missing:
            raise SdscoreError(f"{self.parts}: shards {missing[:5]} missing; cannot merge")
        rows = failed = 0
        paths = [self.shard_path(k) for k in range(self.n_shards)]
        # one schema for all shards: a column that is all null in one window (polars' Null type)
        # takes the type other windows give it
        schema = pa.unify_schemas([pq.read_schema(self._shard_source(p)) for p in paths],
                                  promote_options="permissive")
        try:
            with self._merged_target() as temp:
                with pq.ParquetWriter(temp, schema) as writer:
                    for path in paths:
                        # (read_table imports pyarrow.dataset: +0.25 s)
                        table = pq.ParquetFile(self._shard_source(path)).read()
                        table = table.select(schema.names).cast(schema)
                        rows += table.num_rows
                        failed += table.num_rows - table.column("error").null_count
                        writer.write_table(table)
                    provenance = {**provenance, "rows": rows, "failed_rows": failed}
                    writer.add_key_value_metadata({METADATA_KEY: json.dumps(provenance, default=str)})
        except OSError as error:  # disk full, or an output that cannot be replaced (immutable, read-only)
            raise SdscoreError(f"{self.out}: could not write the merged results ({_reason(error)}); "
                               f"{self._kept()}") from error
        self._remove_parts(paths)
        return rows, failed

    def _shard_source(self, path):
        """What pyarrow reads a shard from (a local path here; an open object on a store)."""
        return path

    def _merged_target(self):
        """A context manager yielding the local path the merged file is written to; when the block
        succeeds it becomes `out` (here: atomically renamed, fsynced)."""
        return atomic_path(self.out, durable=True)

    def _remove_parts(self, shards: list[Path]) -> None:
        """Delete the shards and run record this run wrote, then the folder if that left it empty:
        a file someone else put into OUT.parquet.parts is never deleted (the folder stays, with it)."""
        # attempts left by redone windows and by listed runs killed before their clean-up; not others
        for path in [*shards, self.parts / RUN_FILE, *self._attempts(self._cleanable_runs()), self._runs_file()]:
            path.unlink(missing_ok=True)
        try:
            self.parts.rmdir()
        except OSError:
            log.warning("%s: left in place: it holds files this run did not write", self.parts)


def _foreign(parts, names: list[str]) -> SdscoreError:
    """The error for a parts folder holding files no run of sdscore wrote (there is no run record)."""
    return SdscoreError(f"{parts}: holds {sorted(names)[0]!r}, which no run of sdscore wrote there (there is no "
                        f"{RUN_FILE}); move it away or choose another output, nothing in it is deleted or overwritten")


def _run_tokens(data: bytes) -> set[str]:
    """The run tokens of an ATTEMPT_RUNS_FILE's bytes (none when they are not such a list)."""
    try:
        runs = json.loads(data)["runs"]
    except (ValueError, KeyError, TypeError):
        return set()
    return {run for run in runs if isinstance(run, str)} if isinstance(runs, list) else set()


def _sync_folder(folder: Path) -> None:
    """fsync a folder, so a rename in it survives a crash (where the platform allows it)."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


def _reason(error: BaseException) -> str:
    """One line of a write error: the OS's words (polars wraps them as ComputeError text)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror + (f": {error.filename}" if error.filename else "")
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
