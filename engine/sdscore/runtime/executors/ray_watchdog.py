"""A watchdog that stops the local Ray instance a driver started once that driver is gone.

When `sdscore score --ray` starts a local Ray instance and is then killed (SIGKILL, the OOM
killer), Ray's own fate-sharing ends the GCS server and the raylet at once, but the raylet's
children (the dashboard agent, the runtime-env agent) live on for about a minute, and workers for
a few seconds. The driver therefore starts this watchdog before `ray.init`:

- the driver marks the environment of the processes Ray starts with a token of its own
  (INSTANCE_ENV=<token>, set only while `ray.init` runs): the GCS server, the raylet and the
  workers they start inherit it. Ray's agents rename themselves (setproctitle), which blanks their
  environment as /proc shows it, so the driver also sends the instance's session folder once Ray
  is up: a process of the driver's process group with a file of that folder open (every Ray
  process writes its logs there) belongs to the instance too. Nothing else matches, so another
  sdscore run's instance (its own token and session folder), a user's cluster (joined by address:
  no watchdog; joined by Ray's own discovery: nothing started from our environment) or any other
  process is never touched;
- the watchdog holds the read end of a pipe whose write end only the driver holds, and watches the
  driver's pidfd: it learns of the driver's end at once, however the driver ended;
- then it sends SIGTERM to every process of the instance, SIGKILL after a grace period to those
  still there, and looks again until none is left. Each process is pinned with a pidfd before it
  is signalled and checked again, so a pid reused meanwhile is never hit.

After a normal exit Ray has already stopped the instance (`ray.shutdown` at exit) and the watchdog
finds nothing and exits. It runs in a session of its own (a Ctrl-C on the terminal does not reach
it) and with the standard library only: this file is run as a script, outside the package.
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

#: environment variable that marks the processes of a Ray instance a driver started
INSTANCE_ENV = "SDSCORE_RAY_INSTANCE"
#: what a driver that lives on writes when it lets the watchdog go (session folders are absolute paths)
RELEASE = b"release"
#: seconds between SIGTERM and SIGKILL
GRACE_SECONDS = 3.0
#: rounds of look-and-stop before the watchdog gives up (a round only repeats when processes remain)
ROUNDS = 5


class RayInstanceWatch:
    """The driver's side: the watchdog process and the write end of its pipe."""

    def __init__(self, token: str, write_fd: int, process: subprocess.Popen):
        self.token, self._write_fd, self.process = token, write_fd, process

    @classmethod
    def start(cls, grace_seconds: float = GRACE_SECONDS) -> RayInstanceWatch:
        token = secrets.token_hex(16)
        read_fd, write_fd = os.pipe()  # not inheritable: only the watchdog gets read_fd (pass_fds)
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", os.path.abspath(__file__), str(read_fd), token, str(grace_seconds)],
                pass_fds=(read_fd,), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(token, write_fd, process)

    @contextmanager
    def marking_environment(self) -> Iterator[None]:
        """INSTANCE_ENV=token in this process's environment while the block runs (ray.init)."""
        saved = os.environ.get(INSTANCE_ENV)
        os.environ[INSTANCE_ENV] = self.token
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop(INSTANCE_ENV, None)
            else:
                os.environ[INSTANCE_ENV] = saved

    def tell_session(self, session_dir: str) -> None:
        """Send the started instance's session folder (see the module's docstring)."""
        if self._write_fd is not None and session_dir and "\n" not in session_dir:
            os.write(self._write_fd, os.fsencode(os.path.abspath(session_dir)) + b"\n")

    def close(self) -> None:
        """Let the watchdog go: it stops what still carries the token (nothing after ray.shutdown).
        It is told so ("release"), so it never mistakes this for the driver's death."""
        if self._write_fd is not None:
            try:
                os.write(self._write_fd, RELEASE + b"\n")
            except OSError:  # the watchdog is gone already
                pass
            os.close(self._write_fd)
            self._write_fd = None


# ---- the watchdog process (standard library only) ---------------------------------------------


class _Instance:
    """What marks the processes of one instance: the environment token, and (once the driver sent
    it) the session folder, whose files count only in the driver's process group."""

    def __init__(self, token: str, driver_pgid: int | None, session_dir: bytes | None = None,
                 spared: frozenset[int] = frozenset()):
        self.marker = f"\0{INSTANCE_ENV}={token}\0".encode()
        self.driver_pgid, self.session_dir = driver_pgid, session_dir
        self.spared = spared  # the driver and its ancestors: never the instance's, whatever they hold open

    def owns(self, pid: int) -> bool:
        if pid in self.spared:
            return False
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if self.marker in b"\0" + environ.read():
                    return True
        except OSError:  # gone, or not ours to read
            return False
        if self.session_dir is None or self.driver_pgid is None:
            return False
        try:
            if os.getpgid(pid) != self.driver_pgid:
                return False
            inside = self.session_dir + b"/"
            fds = f"/proc/{pid}/fd"
            return any(os.readlink(os.path.join(fds, fd).encode()).startswith(inside) for fd in os.listdir(fds))
        except OSError:
            return False

    def processes(self) -> list[int]:
        me = os.getpid()
        return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != me
                and self.owns(int(name))]

    def pin(self, pid: int) -> int | None:
        """A pidfd on pid if it is still the instance's (checked after pinning), else None."""
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return None
        if self.owns(pid):
            return pidfd
        os.close(pidfd)
        return None


def _signal(pidfd: int, signum: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signum)
    except OSError:  # already gone
        pass


def _wait_gone(pidfds: list[int], seconds: float) -> list[int]:
    """The pidfds whose process has not ended within `seconds` (a pidfd reads ready at the end)."""
    deadline = time.monotonic() + seconds
    left = list(pidfds)
    while left:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select(left, [], [], remaining)
        left = [fd for fd in left if fd not in ready]
    return left


def stop_instance(instance: _Instance, grace_seconds: float = GRACE_SECONDS) -> int:
    """SIGTERM, then SIGKILL after grace_seconds, to every process of the instance; returns how
    many were signalled."""
    signalled = 0
    for _ in range(ROUNDS):
        pidfds = [fd for fd in (instance.pin(pid) for pid in instance.processes()) if fd is not None]
        if not pidfds:
            break
        signalled += len(pidfds)
        try:
            for fd in pidfds:
                _signal(fd, signal.SIGTERM)
            for fd in _wait_gone(pidfds, grace_seconds):
                _signal(fd, signal.SIGKILL)
            _wait_gone(pidfds, grace_seconds)
        finally:
            for fd in pidfds:
                os.close(fd)
    return signalled


def _wait_for_driver(read_fd: int) -> tuple[bytes | None, bool]:
    """Once the driver has ended or let go (EOF on the pipe, or its pidfd ready): the last session
    folder it sent, if any, and whether it let go (RELEASE) rather than died."""
    received = b""
    watched = [read_fd]
    driver = os.getppid()
    try:
        watched.append(os.pidfd_open(driver))
    except OSError:
        pass
    ended = os.getppid() != driver  # it ended before it was pinned
    while not ended:
        ready, _, _ = select.select(watched, [], [])
        if read_fd in ready:
            chunk = os.read(read_fd, 65536)
            received += chunk
            ended = not chunk
        ended = ended or any(fd in ready for fd in watched[1:])
    while select.select([read_fd], [], [], 0)[0]:  # what the driver wrote before it ended
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        received += chunk
    lines = [line for line in received.split(b"\n")[:-1] if line]  # complete lines only
    sessions = [line for line in lines if line.startswith(b"/")]
    return (sessions[-1] if sessions else None), RELEASE in lines


def _ancestors(pid: int) -> frozenset[int]:
    """pid and every process above it (from /proc/PID/stat), up to init."""
    found = set()
    while pid > 1 and pid not in found:
        found.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])  # the field after the state
        except (OSError, ValueError, IndexError):
            break
    return frozenset(found)


def main(argv: list[str]) -> int:
    read_fd, token, grace = int(argv[0]), argv[1], float(argv[2])
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    driver = os.getppid()
    try:
        driver_pgid = os.getpgid(driver)
    except OSError:
        driver_pgid = None
    # A driver that lets the watchdog go while it lives on (a library call that returns, a second
    # instance started by the same process) may still hold files of the session folder open: it,
    # and whatever runs it (pytest, make, a shell), is never signalled.
    spared = _ancestors(driver)
    session_dir, released = _wait_for_driver(read_fd)
    if released:  # let go by a driver that lives on (it shut Ray down itself): only what carries
        session_dir = None  # the token is left to stop, never the driver's other children
    stop_instance(_Instance(token, driver_pgid, session_dir, spared), grace)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
