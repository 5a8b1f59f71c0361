"""A lease on an object-store output (`OUT.parquet.lock` beside `s3://.../OUT.parquet`).

flock(2) cannot guard an object store, and pyarrow's filesystems offer no conditional write, so
the lock is a lease object: {pid, host, started, token, renewed}. A run reads it first: a lease
renewed within the last LEASE_SECONDS by a live run is refused with its holder; an older one, or
one left by a process of this host that is gone (a crash, kill -9), is taken over. The holder
writes its own token, reads it back, renews the lease every LEASE_SECONDS / 4 on a thread, and
checks that the token is still its own before every shard and before the merge; a run that finds
another's token there stops with an error. The object is deleted when the run ends.

What this guarantees, and what not (the store offers no atomic create here): a run started while
another holds a live lease is refused; two runs started within the same instant may both start,
and then the one whose write of the lock came last keeps it and the other stops at its next shard
(shards are written whole, and two runs with the same record write the same rows, so the shards
stay consistent, but the loser's work in flight is lost). After a crash on another machine a
`--resume` waits until the lease is LEASE_SECONDS old (or the lock object is deleted by hand).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time

from sdscore import storage
from sdscore.errors import SdscoreError
from sdscore.runtime.provenance import now

#: A lease not renewed for this long belongs to a run that is gone ($SDSCORE_LOCK_LEASE_SECONDS).
LEASE_SECONDS = 120.0
LEASE_ENV = "SDSCORE_LOCK_LEASE_SECONDS"


def lease_seconds() -> float:
    text = os.environ.get(LEASE_ENV, "").strip()
    try:
        value = float(text) if text else LEASE_SECONDS
    except ValueError:
        raise SdscoreError(f"{LEASE_ENV}={text!r}: expected a number of seconds") from None
    if not value > 0:
        raise SdscoreError(f"{LEASE_ENV}={text!r}: expected a positive number of seconds")
    return value


class ObjectLock:
    """`with ObjectLock(out_uri):` holds OUT.lock as a lease, or raises SdscoreError naming the holder."""

    def __init__(self, out: str, lease: float | None = None):
        self.uri = out + ".lock"
        self.out = out
        self.lease = lease_seconds() if lease is None else float(lease)
        self.token = secrets.token_hex(16)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost: str | None = None
        self._started = now()

    def _holder(self) -> dict | None:
        try:
            return json.loads(storage.read_bytes(self.uri))
        except storage.StorageError as error:
            if error.strerror == "no such object":
                return None
            raise SdscoreError(f"{self.uri}: cannot read the output's lock ({error.strerror})") from None
        except ValueError:
            return {}  # not a lease we can read: treated as stale (it holds no renewal time)

    def _write(self) -> None:
        lease = {"pid": os.getpid(), "host": socket.gethostname(), "started": self._started,
                 "token": self.token, "renewed": time.time()}
        try:
            storage.write_bytes(self.uri, json.dumps(lease).encode())
        except storage.StorageError as error:
            raise SdscoreError(f"{self.uri}: cannot write the output's lock ({error.strerror})") from None

    def _is_live(self, holder: dict) -> bool:
        renewed = holder.get("renewed")
        if not isinstance(renewed, (int, float)) or time.time() - renewed > self.lease:
            return False
        if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
            return _pid_alive(holder["pid"])
        return True

    def __enter__(self) -> ObjectLock:
        holder = self._holder()
        if holder and self._is_live(holder):
            raise SdscoreError(f"{self.out}: another run is writing this output ({_describe(holder)}); wait for "
                               f"it to finish, or give --out another path (a lock left by a run on another "
                               f"machine that is gone expires {self.lease:g} s after its last renewal)")
        self._write()
        self.check()
        self._renewer = threading.Thread(target=self._renew, name="sdscore-lock-lease", daemon=True)
        self._renewer.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.lease / 4):
            try:
                holder = self._holder()
                if not holder or holder.get("token") != self.token:
                    self._lost = _describe(holder or {})
                    return
                self._write()
            except SdscoreError:  # a store that fails now and then: the next renewal retries
                continue

    def check(self) -> None:
        """SdscoreError unless this run still holds the lock (read from the store, not remembered)."""
        holder = self._holder()
        if self._lost is not None or not holder or holder.get("token") != self.token:
            who = self._lost or _describe(holder or {})
            raise SdscoreError(f"{self.out}: this run no longer holds the output's lock ({self.uri}: now {who}); "
                               "it stops so that two runs never write one output")

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        try:
            holder = self._holder()
            if holder and holder.get("token") == self.token:
                storage.delete(self.uri)
        except (SdscoreError, storage.StorageError):
            pass  # the lease expires by itself


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(holder: dict) -> str:
    if not holder.get("pid"):
        return "holder unknown"
    return f"pid {holder['pid']} on {holder.get('host')}, started {holder.get('started')}"
