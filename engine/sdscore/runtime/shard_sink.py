"""Shards written where they are scored, committed by the driver.

With the `ray` executor a worker writes its window's results itself, straight to the output store
(a local or shared folder, or an object store), and sends the driver only a WrittenShard: the
window, its row and failed-row counts and where the attempt lies. The driver commits it
(runtime/sharded_output.py, runtime/object_output.py): a local attempt file is renamed onto the
shard's name (atomic), an object is moved onto it (the store's copy and delete, done by the store:
no result byte passes through the driver). The shard's name is what `--resume` sees, so a shard
exists only once the driver has counted it, and the run record means what it always did.

An attempt is named by the run and by the attempt (`part-NNNNNN.<run>-<attempt>.attempt.parquet`
beside the shards): a window redone after its actor died is a second attempt under another name,
and only the first one reported is committed; the others, and the attempts of a run that stopped,
are deleted by the driver. Before its workers write, the driver adds its run token to
`attempt-runs.json` in the parts folder (ATTEMPT_RUNS_FILE); clean-up deletes only attempts of the
runs listed there (the finished run also those of earlier runs killed before they could), so a
file merely named like an attempt that no run of sdscore wrote is never deleted.
"""

from __future__ import annotations

import io
import os
import re
import secrets
from dataclasses import dataclass

import polars as pl

from sdscore import storage
from sdscore.corpus.validate import ERROR_COLUMN
from sdscore.errors import SdscoreError

#: An attempt's file or object name: shard, run token, attempt token.
ATTEMPT_NAME = re.compile(r"^part-(\d{6})\.([0-9a-f]+)-([0-9a-f]+)\.attempt\.parquet$")
#: The parts folder's list of the runs whose workers may have written attempts there.
ATTEMPT_RUNS_FILE = "attempt-runs.json"


@dataclass(frozen=True)
class WrittenShard:
    """What a worker reports for a window it wrote: its rows, failed rows and the attempt's location."""

    shard: int
    rows: int
    failed: int
    location: str


def attempt_name(k: int, run: str, attempt: str) -> str:
    return f"part-{k:06d}.{run}-{attempt}.attempt.parquet"


def is_attempt(name: str, run: str | None = None) -> bool:
    """Whether a file name in a parts folder is an attempt (of the run `run`, when given)."""
    found = ATTEMPT_NAME.match(name)
    return found is not None and (run is None or found.group(2) == run)


def attempt_run(name: str) -> str | None:
    """The run token in an attempt's name (None for a name that is not an attempt's)."""
    found = ATTEMPT_NAME.match(name)
    return None if found is None else found.group(2)


class ShardSink:
    """A picklable writer of attempts into the parts folder (a local path or an object-store URI) of
    one run; what workers get instead of the output."""

    def __init__(self, parts: str, run: str):
        self.parts, self.run = parts, run
        self.remote = storage.is_remote(parts)

    def location(self, k: int, attempt: str) -> str:
        name = attempt_name(k, self.run, attempt)
        return storage.join(self.parts, name) if self.remote else os.path.join(self.parts, name)

    def write(self, k: int, frame: pl.DataFrame) -> WrittenShard:
        """Write one window's results as a new attempt (fsynced; an object appears whole); raises SdscoreError."""
        location = self.location(k, secrets.token_hex(6))
        failed = int(frame[ERROR_COLUMN].is_not_null().sum()) if ERROR_COLUMN in frame.columns else 0
        try:
            if self.remote:
                buffer = io.BytesIO()
                frame.write_parquet(buffer)
                storage.write_bytes(location, buffer.getvalue())
            else:  # written in place: an attempt is only a shard once the driver renames it, so a partial one
                os.makedirs(self.parts, exist_ok=True)  # (its worker killed mid-write) is never reported
                _write_durably(frame, location)
        except storage.StorageError as error:
            raise SdscoreError(f"{location}: could not write the results of shard {k} ({error})") from error
        except (OSError, pl.exceptions.PolarsError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0]
            raise SdscoreError(f"{location}: could not write the results of shard {k} ({reason})") from error
        return WrittenShard(k, frame.height, failed, location)

    def discard(self, written: WrittenShard) -> None:
        """Delete an attempt that will not be committed (a window's second report)."""
        check_attempt(self.parts, written)
        if self.remote:
            storage.delete(written.location)
        else:
            try:
                os.remove(written.location)
            except FileNotFoundError:
                pass


def _write_durably(frame: pl.DataFrame, path: str) -> None:
    try:
        frame.write_parquet(path)
        with open(path, "rb+") as written:
            os.fsync(written.fileno())
    except BaseException:
        try:
            os.remove(path)
        except OSError:
            pass
        raise


def check_attempt(parts: str, written: WrittenShard) -> None:
    """Refuse a report whose location is not an attempt of shard `written.shard` in `parts`."""
    folder, name = (storage.parent(written.location), storage.basename(written.location)) if storage.is_remote(parts) \
        else os.path.split(written.location)
    found = ATTEMPT_NAME.match(name)
    if folder.rstrip("/") != parts.rstrip("/") or found is None or int(found.group(1)) != written.shard:
        raise SdscoreError(f"shard {written.shard}: a worker reported {written.location!r}, which is not an attempt "
                           f"of that shard in {parts}")


def new_run_token() -> str:
    return secrets.token_hex(4)
