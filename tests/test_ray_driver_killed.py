"""A Ray instance that `sdscore score --ray` started goes with its driver, even a SIGKILLed one
(ray_watchdog), and nothing else does: not another Ray instance, not a cluster given by address.

Each run scores the judge manifest with the openai judge pointed at a socket of the test that takes
the request and never answers, so the run holds still, with all of Ray up, until it is killed; the
first request is the sign that Ray's actors (and so its raylet, GCS server and agents) are running.
A second, unrelated Ray instance (`ray start --head --block` in a session of its own, in its own
temp folder so no `ray.init()` finds it) runs beside them and is the cluster of the address test.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
              pytest.mark.xdist_group("ray")]  # Ray: one xdist worker (--dist loadgroup)

#: the test's cluster and the driver that joins it skip Ray's token authentication (loopback only)
NO_TOKEN = {"RAY_AUTH_MODE": "disabled"}
#: bound on Ray's start (2 slow cores) and on the processes' end after the kill
START_S, GONE_S = 240, 20


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"  # a zombie is gone but not yet reaped


def _descendants(root: int) -> set[int]:
    parents = {}
    for name in os.listdir("/proc"):
        fields = _stat(int(name)) if name.isdigit() else None
        if fields is not None and fields[0] != "Z":
            parents[int(name)] = int(fields[1])
    found, todo = set(), [root]
    while todo:
        parent = todo.pop()
        children = {pid for pid, ppid in parents.items() if ppid == parent} - found
        found |= children
        todo.extend(children)
    return found


def _group(pgid: int) -> set[int]:
    return {int(n) for n in os.listdir("/proc") if n.isdigit() and (s := _stat(int(n))) and s[0] != "Z"
            and int(s[3]) == pgid}


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _wait_until(condition, seconds: float, message) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, message()
        time.sleep(0.1)


@pytest.fixture(scope="module")
def other_ray():
    """(address, pids) of a Ray instance of its own, started by `ray start`, stopped at the end."""
    temp = tempfile.mkdtemp(prefix="sdscore-ray-", dir="/tmp")  # short: Ray's socket paths must fit
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(os.path.join(temp, "ray-start.log"), "w")
    ray_cli = [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]
    head = subprocess.Popen(
        [*ray_cli, "start", "--head", "--block", "--port", str(port), "--temp-dir", temp, "--num-cpus", "2",
         "--include-dashboard", "false", "--disable-usage-stats"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **NO_TOKEN},
    )
    address_file = Path(temp) / "ray_current_cluster"
    try:
        _wait_until(lambda: head.poll() is not None or "Ray runtime started" in Path(log.name).read_text(),
                    START_S, lambda: "ray start did not finish in time")
        assert head.poll() is None, Path(log.name).read_text()[-2000:]
        address = address_file.read_text().strip()
        yield address, _group(head.pid)
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        head.wait()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)  # the folder this fixture made


def _start_held_run(corpus: Path, tmp_path: Path, ray_option: list[str], env: dict | None = None):
    """(driver, its log, the accepted judge connection) of a `score judge --ray` run held by its judge."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(1.0)
    port = listener.getsockname()[1]
    log = tmp_path / "driver.log"
    driver = subprocess.Popen(
        [sys.executable, "-m", "sdscore.cli", "score", "judge", str(corpus / "judge_items.parquet"),
         "--out", str(tmp_path / "out.parquet"), *ray_option, "--workers", "1", "--window-rows", "1",
         "--judge", "openai", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--timeout", "600"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, env={**os.environ, "OPENAI_API_KEY": "test", **(env or {})},
    )
    deadline = time.monotonic() + START_S
    with listener:
        while True:
            assert driver.poll() is None, f"the run ended (rc {driver.returncode}): {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "no judge request: Ray did not start in time"
            try:
                connection, _ = listener.accept()
                return driver, log, connection
            except TimeoutError:
                continue


def test_killed_driver_takes_its_ray_instance_and_nothing_else(tiny_corpus, tmp_path, other_ray):
    _, others = other_ray
    driver, _, connection = _start_held_run(tiny_corpus, tmp_path, ["--ray"])
    try:
        instance = _descendants(driver.pid)  # the watchdog, GCS server, raylet, agents, workers
        names = {pid: _cmdline(pid) for pid in instance}
        assert any("raylet" in name for name in names.values()), names
        assert any("Agent" in name for name in names.values()), names
        assert not instance & others
        driver.send_signal(signal.SIGKILL)  # no clean-up runs in the driver
        driver.wait()
        _wait_until(lambda: not any(_alive(pid) for pid in instance), GONE_S,
                    lambda: f"outlived their killed driver: {[names[p][:80] for p in instance if _alive(p)]}")
        assert all(_alive(pid) for pid in others), "the other Ray instance lost processes"
    finally:
        connection.close()
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_cluster_given_by_address_keeps_running_when_the_driver_is_killed(tiny_corpus, tmp_path, other_ray):
    address, cluster = other_ray
    driver, log, connection = _start_held_run(tiny_corpus, tmp_path, ["--ray", address], NO_TOKEN)
    try:
        started = {_cmdline(pid) for pid in _descendants(driver.pid)}
        assert not any("ray_watchdog" in name for name in started), started  # nothing to stop the cluster
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        # the cluster ends the dead job's actor itself, which closes the judge connection
        connection.settimeout(1.0)
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "the cluster never ended the killed job's actor"
            try:
                if not connection.recv(65536):
                    break
            except TimeoutError:
                continue
            except ConnectionError:
                break
        assert all(_alive(pid) for pid in cluster), [(p, _cmdline(p)[:80]) for p in cluster if not _alive(p)]
    finally:
        connection.close()
        if driver.poll() is None:
            driver.kill()
            driver.wait()


_RELEASE_WHILE_ALIVE = """
import os, sys
from sdscore.runtime.executors.ray_watchdog import RayInstanceWatch
session = sys.argv[1]
held = open(os.path.join(session, "logs.txt"), "w")  # the driver keeps a file of the session open
watch = RayInstanceWatch.start(grace_seconds=0.5)
watch.tell_session(session)
watch.close()  # let go while the driver lives on (a library call returned; a second instance starts)
watch.process.wait(timeout=60)
print("driver alive")
"""


def test_a_watchdog_let_go_while_its_driver_lives_never_signals_the_driver(tmp_path):
    """Found by the full suite: pytest ran the Ray executor in process, let the watchdog go and kept
    a file of the session folder open; the watchdog counted pytest itself as the instance's and
    sent it SIGTERM (make: Terminated). The driver and its ancestors are spared."""
    session = tmp_path / "session_x"
    session.mkdir()
    done = subprocess.run([sys.executable, "-c", _RELEASE_WHILE_ALIVE, str(session)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "driver alive" in done.stdout, (done.returncode, done.stderr[-2000:])


_CHILD_HOLDS_A_SESSION_FILE = """
import os, subprocess, sys
from sdscore.runtime.executors.ray_watchdog import RayInstanceWatch
session = sys.argv[1]
held = open(os.path.join(session, "logs.txt"), "w")
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(held.fileno(),))
watch = RayInstanceWatch.start(grace_seconds=0.5)
watch.tell_session(session)
watch.close()
watch.process.wait(timeout=60)
print("child alive" if child.poll() is None else f"child ended {child.returncode}")
child.kill()
"""


def test_a_watchdog_let_go_spares_the_drivers_other_children(tmp_path):
    """The session-folder rule is for a driver that is gone; one let go by a live driver (which shut
    Ray down itself) never stops the driver's other children, even one holding a session file."""
    session = tmp_path / "session_y"
    session.mkdir()
    done = subprocess.run([sys.executable, "-c", _CHILD_HOLDS_A_SESSION_FILE, str(session)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "child alive" in done.stdout, (done.stdout, done.stderr[-2000:])
