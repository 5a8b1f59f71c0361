"""Shared by the tests that call `sdscore serve` as an RL framework would: the real CLI in a
subprocess (the shipped compact model, on the CPU), on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(options: Sequence[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`sdscore serve --port FREE OPTIONS...` started and answering /healthz (else the test fails with
    its output): (the process, its stdout and stderr merged as text; its base URL). `env`: variables
    added to this process's environment. Stopping it is the caller's."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sdscore.cli", "serve", "--port", str(port), *options],
                            env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"sdscore serve did not come up: {proc.communicate(timeout=10)[0][-2000:]}")


@contextmanager
def serve_process(options: Sequence[str], env: dict[str, str] | None = None) -> Iterator[str]:
    """`sdscore serve --device cpu --max-wait-ms 2 OPTIONS...` until the block ends (SIGINT, as an
    operator stops it); yields its base URL. `env`: variables added to this process's environment."""
    proc, url = start_serve(["--device", "cpu", "--max-wait-ms", "2", "--log-level", "warning", *options], env)
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@contextmanager
def server_on_thread(server, join_s: float = 30.0) -> Iterator[None]:
    """Run a uvicorn.Server on a daemon thread until the block ends (then should_exit, and up to
    join_s for the thread); the test fails when it has not started within 30 s."""
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        pytest.fail("the in-process server did not start")
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(join_s)


@contextmanager
def serve_app(app) -> Iterator[str]:
    """`app` (sdscore.rl.server.create_app) on a loopback uvicorn server on a thread; yields its base URL."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    with server_on_thread(server):
        yield f"http://127.0.0.1:{server.config.port}"
