"""Worker pools do not outlive a killed parent (parent_watch.exit_with_parent in their initializers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

PARENT = r"""
import sys, time
from sdscore.features.process_extractor import ProcessExtractor
if __name__ == "__main__":
    ex = ProcessExtractor("asr", jobs=2)
    pool = ex._executor()
    pids = set()
    while len(pids) < 2:  # each worker reports once it has started (initializer done)
        pids |= {f.result() for f in [pool.submit(__import__("os").getpid) for _ in range(4)]}
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:  # a zombie is gone but not yet reaped
        return stat.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_extractor_workers_exit_when_their_parent_is_killed():
    pytest.importorskip("pocketsphinx")
    # the parent is no pool's worker, whatever this process's environment says (a pool member's
    # ProcessExtractor runs in-process: it would start one worker, not the two this test waits for)
    env = {k: v for k, v in os.environ.items() if k not in ("SDSCORE_CORES", "SDSCORE_POOL_MEMBER")}
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    try:
        workers = [int(p) for p in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(p) for p in workers)
        parent.send_signal(signal.SIGKILL)  # no cleanup runs in the parent
        parent.wait()
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers), "worker processes outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
