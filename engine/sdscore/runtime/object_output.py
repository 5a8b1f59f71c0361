"""Resumable output on an object store: `--out s3://bucket/OUT.parquet` (or gs://).

The same layout and rules as a local run (runtime/sharded_output.py): one object per window,
`OUT.parquet.parts/part-NNNNNN.parquet`, beside `OUT.parquet.parts/run.json`, the run record that
`--resume` compares; the merge streams the shards in order into one Parquet file with the run's
provenance. On a store, an object appears whole when its upload completes, which stands in for the
local temp-file-and-rename: a shard is one PUT, and the merged file is written to the run's local
staging folder, then uploaded (a multipart upload: the object appears only when it completes, so
readers never see half of it). Then this run's shards and record are deleted; anything else under
the prefix is left, with a warning. Every shard write first checks that this run still holds the
output's lock object (runtime/object_lock.py).

Shards written by workers (runtime/shard_sink.py) arrive as attempt objects beside the shards; the
driver commits one by moving it onto the shard's name (the store copies and deletes: no result byte
passes through the driver), after the same lock check.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import polars as pl

from sdscore import storage
from sdscore.errors import SdscoreError
from sdscore.runtime.object_lock import ObjectLock
from sdscore.runtime.shard_sink import ATTEMPT_RUNS_FILE, WrittenShard, attempt_run, new_run_token
from sdscore.runtime.sharded_output import RUN_FILE, ShardedOutput, _differences, _foreign, _reason, _run_tokens

log = logging.getLogger(__name__)


def recorded_object_shard_rows(out: str) -> int | None:
    """The window size an unfinished run at the URI `out` used (None when there is none or it is unreadable)."""
    try:
        return int(json.loads(storage.read_bytes(storage.join(out + ".parts", RUN_FILE)))["shard_rows"])
    except (storage.StorageError, ValueError, KeyError, TypeError):
        return None


class ObjectShardedOutput(ShardedOutput):
    """ShardedOutput whose shards, record and merged file are objects under the URI `out`."""

    def __init__(self, out: str, n_rows: int, shard_rows: int, record: dict, resume: bool, *,
                 staging_dir: str | os.PathLike, lock: ObjectLock | None = None):
        self.staging_dir = os.fspath(staging_dir)
        self.lock = lock
        self._record_written = False
        if shard_rows < 1:
            raise ValueError(f"shard_rows must be >= 1, got {shard_rows}")
        self.out = out
        self.parts = out + ".parts"
        self.n_rows = n_rows
        self.shard_rows = shard_rows
        self.record = {**record, "n_rows": n_rows, "shard_rows": shard_rows}
        self.run_token = new_run_token()
        self._registered = False
        self._open(resume)

    def _listing(self) -> set[str]:
        try:
            return set(storage.list_files(self.parts))
        except storage.StorageError as error:
            raise SdscoreError(str(error)) from None

    def _open(self, resume: bool) -> None:
        listing = self._listing()
        # listed runs' attempts alone: no run to resume
        present = set() if self._only_attempts(list(listing)) else listing
        if present and RUN_FILE not in present:
            raise _foreign(self.parts, list(present))
        if present and not resume:
            raise SdscoreError(
                f"{self.parts}: holds shards of an unfinished run; pass --resume to continue it, "
                f"or delete those objects to start over"
            )
        if not present:
            return
        run_file = storage.join(self.parts, RUN_FILE)
        try:
            previous = json.loads(storage.read_bytes(run_file))
        except (storage.StorageError, ValueError) as exc:
            raise SdscoreError(f"{run_file}: cannot read the earlier run's record ({exc})") from exc
        if previous != self.record:
            raise SdscoreError(
                f"{self.parts}: the unfinished run was made with different settings, so its shards "
                f"cannot be mixed with this run's: {'; '.join(_differences(previous, self.record))}. Rerun with "
                f"the earlier settings to finish it, or delete those objects to start over"
            )
        self._record_written = True

    def _kept(self) -> str:
        return (f"the finished shards under {self.parts} are intact: fix the access or the store, then rerun "
                f"with --resume to continue")

    def shard_path(self, k: int) -> str:  # type: ignore[override]
        return storage.join(self.parts, f"part-{k:06d}.parquet")

    def pending(self) -> list[int]:
        present = self._listing()
        return [k for k in range(self.n_shards) if storage.basename(self.shard_path(k)) not in present]

    def write_shard(self, k: int, frame: pl.DataFrame) -> None:
        start, stop = self.rows_of(k)
        if frame.height != stop - start:
            raise SdscoreError(f"shard {k}: {frame.height} result rows for input rows {start + 1}..{stop}")
        if self.lock is not None:
            self.lock.check()
        buffer = io.BytesIO()
        frame.write_parquet(buffer)
        try:
            self._write_record()  # with the first shard: a run that fails before any leaves nothing
            storage.write_bytes(self.shard_path(k), buffer.getvalue())
        except storage.StorageError as error:
            raise SdscoreError(f"{self.shard_path(k)}: could not write the shard of rows {start + 1}..{stop} "
                               f"({_reason(error)}); {self._kept()}") from error

    def commit_shard(self, k: int, written: WrittenShard) -> None:
        """Make a worker's attempt object shard k: moved onto its name by the store (copy + delete)."""
        self._check_written(k, written)
        if self.lock is not None:
            self.lock.check()
        start, stop = self.rows_of(k)
        fs, source = storage.filesystem(written.location)
        _, target = storage.filesystem(self.shard_path(k))
        try:
            self._write_record()
            try:
                fs.move(source, target)
            except (OSError, ValueError) as error:
                raise storage.storage_error(written.location, error, "move") from None
        except storage.StorageError as error:
            raise SdscoreError(f"{self.shard_path(k)}: could not commit the shard of rows {start + 1}..{stop} "
                               f"({_reason(error)}); {self._kept()}") from error

    def _write_record(self) -> None:
        if not self._record_written:
            storage.write_bytes(storage.join(self.parts, RUN_FILE),
                                (json.dumps(self.record, indent=2, allow_nan=False) + "\n").encode())
            self._record_written = True

    def _runs_file(self) -> str:  # type: ignore[override]
        return storage.join(self.parts, ATTEMPT_RUNS_FILE)

    def _attempt_runs(self) -> set[str]:
        if ATTEMPT_RUNS_FILE not in self._listing():
            return set()
        try:
            return _run_tokens(storage.read_bytes(self._runs_file()))
        except storage.StorageError:
            return set()

    def _write_attempt_runs(self, runs: set[str]) -> None:
        if runs:
            storage.write_bytes(self._runs_file(), (json.dumps({"runs": sorted(runs)}, indent=2) + "\n").encode())
        elif ATTEMPT_RUNS_FILE in self._listing():
            storage.delete(self._runs_file())

    def _attempts(self, runs: set[str]) -> list[str]:  # type: ignore[override]
        return [storage.join(self.parts, name) for name in self._listing() if attempt_run(name) in runs]

    def abandon(self) -> None:
        if not self._registered:
            return
        for uri in self._attempts({self.run_token}):
            storage.delete(uri)
        self._write_attempt_runs(self._attempt_runs() - {self.run_token})
        storage.remove_empty_prefix(self.parts)

    def finish(self, provenance: dict) -> tuple[int, int]:
        if self.lock is not None:
            self.lock.check()
        try:
            return super().finish(provenance)
        except storage.StorageError as error:  # a shard that cannot be read back
            raise SdscoreError(f"{self.out}: could not merge the shards ({error})") from error

    def _shard_source(self, path):
        fs, key = storage.filesystem(path)
        try:
            return fs.open_input_file(key)
        except (OSError, ValueError) as error:
            raise storage.storage_error(path, error) from None

    @contextmanager
    def _merged_target(self) -> Iterator[str]:
        handle, temp = tempfile.mkstemp(prefix=".merged-", suffix=".parquet", dir=self.staging_dir)
        os.close(handle)
        try:
            yield temp
            if self.lock is not None:
                self.lock.check()
            storage.upload(temp, self.out)
        finally:
            os.remove(temp)

    def _remove_parts(self, shards: list) -> None:
        for uri in [*shards, storage.join(self.parts, RUN_FILE), *self._attempts(self._cleanable_runs())]:
            storage.delete(uri)
        self._write_attempt_runs(set())
        if not storage.remove_empty_prefix(self.parts):
            log.warning("%s: left in place: it holds objects this run did not write", self.parts)
