"""An exclusive lock on a run's output, so two runs never write (or resume) the same shards.

`OUT.parquet.lock` is held with flock(2) for the whole run and names its holder (pid, host,
start time) for the error the second run gets. The kernel drops the lock when the holder dies,
even by kill -9, so a stale lock never blocks a later run; the file is removed when the run ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from sdscore.errors import SdscoreError
from sdscore.runtime.provenance import now


class OutputLock:
    """`with OutputLock(out):` holds OUT.lock exclusively or raises SdscoreError naming the holder."""

    def __init__(self, out: str | os.PathLike):
        self.path = Path(out).with_name(Path(out).name + ".lock")
        self._fd: int | None = None

    def __enter__(self) -> OutputLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise SdscoreError(
                    f"{self.path.with_suffix('')}: another run is writing this output ({holder}); wait for it "
                    f"to finish, or give --out another path"
                ) from None
            # the holder before us may have removed the file after we opened it: lock the live one
            if _same_file(fd, self.path):
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": now()}).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self._fd)  # closing releases the lock
            self._fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


def _read_holder(fd: int) -> str:
    try:
        holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {holder['pid']} on {holder['host']}, started {holder['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
