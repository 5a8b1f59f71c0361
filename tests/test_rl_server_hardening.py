"""`sdscore serve` against hostile clients, on a real loopback uvicorn server configured as `serve`
runs it (sdscore.rl.server.server_config): server-local paths refused unless under an allowed
folder (symlinks resolved first), a slow body cut at its deadline, idle and slow-header
connections closed, a flood of idle connections bounded, deep JSON refused before parsing, a
request larger than the queue refused for good, a mid-body disconnect logged as one line, and a
clean exit on one SIGINT with slow clients connected. Deadlines are set small for the tests;
nothing asserts how fast anything runs (the waits are generous safety nets)."""

from __future__ import annotations

import base64
import json
import logging
import selectors
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
from sdscore.rl.audio_paths import AllowedFolderError, AudioPathPolicy
from sdscore.rl.batcher import RewardBatcher
from sdscore.rl.bounded_json import JSONBodyError, json_depth, loads_bounded
from sdscore.rl.server import ServerConfigError, ServerLimits, create_app, server_config

from rl_episodes import compact_scorer, wav_bytes, wave
from serve_process import free_port, server_on_thread, start_serve

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

SAFETY_S = 30.0  # how long a test waits for something that should happen well before


@pytest.fixture(scope="module")
def scorer():
    return compact_scorer()


@contextmanager
def running(scorer, limits: ServerLimits = ServerLimits(), **batcher_options):
    """create_app + server_config (as `serve` does) on a loopback port, on a thread."""
    batcher = RewardBatcher(scorer, max_wait_ms=1, **batcher_options)
    port = free_port()
    server = uvicorn.Server(server_config(create_app(batcher, limits=limits), host="127.0.0.1", port=port,
                                          limits=limits, log_level="info"))
    with server_on_thread(server, join_s=SAFETY_S):
        yield port, server


def _post(port: int, path: str, body) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"http://127.0.0.1:{port}{path}", content=content,
                      headers={"content-type": "application/json"}, timeout=60)


def _b64(samples) -> str:
    return base64.b64encode(wav_bytes(samples)).decode()


def _one_episode(audio) -> dict:
    return {"episodes": [{"turns": [{"role": "user", "text": "hi"},
                                    {"role": "assistant", "text": "hello", "audio": audio}]}]}


def _closed_by_server(sock: socket.socket, within: float) -> bool:
    """True once the server has closed `sock` (EOF or reset), reading whatever it sent first."""
    sock.settimeout(0.2)
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


# ---- server-local paths ---------------------------------------------------------------------------


@pytest.fixture()
def folders(tmp_path):
    rng = np.random.default_rng(3)
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "ok.wav").write_bytes(wav_bytes(wave(rng, 0.5)))
    (outside / "secret.wav").write_bytes(wav_bytes(wave(rng, 0.5)))
    (allowed / "link.wav").symlink_to(outside / "secret.wav")  # a file symlink out
    (allowed / "sub").symlink_to(outside, target_is_directory=True)  # a folder symlink out
    return allowed, outside


def test_paths_are_refused_by_default(scorer, folders):
    allowed, outside = folders
    with running(scorer) as (port, _):
        for path in (str(allowed / "ok.wav"), "/etc/passwd", "/etc/shadow", "../../../../etc/passwd"):
            r = _post(port, "/score", _one_episode(path))
            assert r.status_code == 403, (path, r.text)
            assert "reads no server-local audio paths" in r.json()["error"] and "base64" in r.json()["error"]


def test_paths_outside_the_allowed_folders_are_refused_alike(scorer, folders):
    allowed, outside = folders
    escapes = [
        str(outside / "secret.wav"),  # absolute, outside, exists
        str(outside / "missing.wav"),  # absolute, outside, does not exist
        f"{allowed}/../outside/secret.wav",  # .. out of the allowed folder
        "../../../../../../../../etc/passwd", "/etc/shadow", "/etc/no-such-file",
        str(allowed / "link.wav"),  # a symlink inside pointing outside
        str(allowed / "sub" / "secret.wav"),  # through a folder symlink inside pointing outside
        str(allowed) + "-sibling/ok.wav",  # a prefix of the allowed folder is not inside it
        "bad\x00path",
    ]
    with running(scorer, ServerLimits(allow_paths=(allowed,))) as (port, _):
        errors = []
        for path in escapes:
            for audio in (path, {"path": path}):
                r = _post(port, "/score", _one_episode(audio))
                assert r.status_code == 403, (path, r.text)
                errors.append(r.json()["error"])
        # one message for all: nothing tells whether a refused file exists
        assert len(set(errors)) == 1, set(errors)
        assert "only under its --allow-paths folders" in errors[0]
        assert "secret" not in errors[0] and "passwd" not in errors[0]

        missing = _post(port, "/score", _one_episode(str(allowed / "missing.wav")))
        assert missing.status_code == 422 and "no such audio file under the allowed folders" in missing.json()["error"]
        ok = _post(port, "/score", _one_episode(str(allowed / "ok.wav")))
        assert ok.status_code == 200 and ok.json()["errors"] == [None], ok.text
        dotted = _post(port, "/score", _one_episode(f"{allowed}/sub/../ok.wav"))  # resolves outside/../ok.wav
        assert dotted.status_code in (403, 422), dotted.text


def test_allowed_folders_are_checked_at_start(tmp_path):
    with pytest.raises(AllowedFolderError, match="--allow-paths .*missing: not an existing folder"):
        AudioPathPolicy.allowing([tmp_path / "missing"])
    with pytest.raises(ServerConfigError, match="allow_paths takes a list of folders"):
        ServerLimits(allow_paths=True)
    with pytest.raises(ServerConfigError, match="body_timeout_s must be a positive number"):
        ServerLimits(body_timeout_s=0)
    with pytest.raises(ServerConfigError, match="max_connections must be a positive integer"):
        ServerLimits(max_connections=0)


def test_cli_allow_paths_and_the_old_no_paths_flag(tmp_path, capsys):
    from sdscore.cli import build_parser, main

    assert main(["serve", "--allow-paths", str(tmp_path / "missing")]) == 2  # before any model loads
    assert "missing: not an existing folder" in capsys.readouterr().err
    assert build_parser().parse_args(["serve", "--no-paths"]).allow_paths is None  # still accepted
    args = build_parser().parse_args(["serve", "--allow-paths", "/a", "--allow-paths", "/b"])
    assert args.allow_paths == ["/a", "/b"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--no-paths", "--allow-paths", "/a"])


def test_get_reward_bad_audio_gets_the_error_reward(scorer, folders):
    allowed, _ = folders
    rng = np.random.default_rng(5)
    labels = [{"audio": str(allowed / "missing.wav")}, {"audio": {"base64": _b64(wave(rng, 0.4))}},
              {"audio": "/etc/passwd"}]
    body = {"query": ["q a", "q b", "q c"], "prompts": ["q"] * 3, "labels": labels}
    with running(scorer, ServerLimits(allow_paths=(allowed,), error_reward=-7.0)) as (port, _):
        r = _post(port, "/get_reward", body)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["rewards"][0] == -7.0 and reply["rewards"][2] == -7.0 and reply["rewards"][1] != -7.0
    assert reply["extra_logs"]["sdscore_failed"] == [1.0, 0.0, 1.0]
    with running(scorer, ServerLimits(allow_paths=(allowed,))) as (port, _):  # no error_reward: 4xx as before
        r = _post(port, "/get_reward", body)
    assert r.status_code == 422 and "query[0]" in r.json()["error"]


# ---- slow and idle clients --------------------------------------------------------------------------


def test_a_slow_body_is_cut_at_its_deadline(scorer):
    with running(scorer, ServerLimits(body_timeout_s=0.5)) as (port, _):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n{")
        sock.settimeout(0.05)
        reply, closed, deadline = b"", False, time.time() + SAFETY_S
        while not closed and time.time() < deadline:
            try:
                sock.sendall(b" ")  # one byte every 50 ms: the body would take 80 minutes
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            try:
                data = sock.recv(65536)
                reply += data
                closed = data == b""
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
        sock.close()
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"did not arrive within 0.5 s" in reply
    assert closed, "the server kept the connection open after its 408"


def test_idle_and_slow_header_connections_are_closed(scorer):
    with running(scorer, ServerLimits(idle_timeout_s=0.5)) as (port, server):
        idle = socket.create_connection(("127.0.0.1", port))  # says nothing
        trickle = socket.create_connection(("127.0.0.1", port))  # headers, a byte at a time
        stop = threading.Event()

        def drip():
            for byte in b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n" * 100:
                if stop.wait(0.05):
                    return
                try:
                    trickle.send(bytes([byte]))
                except OSError:
                    return

        dripper = threading.Thread(target=drip, daemon=True)
        dripper.start()
        try:
            assert _closed_by_server(idle, SAFETY_S), "an idle connection was held"
            assert _closed_by_server(trickle, SAFETY_S), "a connection trickling its headers was held"
        finally:
            stop.set()
            dripper.join()
        # a kept-alive connection is closed once idle after its response
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            assert client.get("/healthz").status_code == 200
            deadline = time.time() + SAFETY_S
            while server.server_state.connections and time.time() < deadline:
                time.sleep(0.05)
            assert not server.server_state.connections
            assert client.get("/healthz").status_code == 200  # the client reconnects
        idle.close()
        trickle.close()


def _raise_fd_limit(wanted: int) -> int:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def test_a_flood_of_idle_connections_is_bounded(scorer):
    cap = 64
    flood = min(2000, _raise_fd_limit(2000 * 2 + 512) // 2 - 256)  # client and server ends in this process
    if flood < 300:
        pytest.skip(f"the open-file limit allows only {flood} connections")
    with running(scorer, ServerLimits(max_connections=cap, idle_timeout_s=1.0)) as (port, server):
        sockets, most_open = [], 0
        try:
            for _ in range(flood):
                s = socket.socket()
                s.settimeout(10)
                s.connect(("127.0.0.1", port))
                s.setblocking(False)
                sockets.append(s)
                most_open = max(most_open, len(server.server_state.connections))
            selector = selectors.DefaultSelector()
            for s in sockets:
                selector.register(s, selectors.EVENT_READ)
            open_ones, deadline = set(sockets), time.time() + SAFETY_S + 2 * 1.0
            while open_ones and time.time() < deadline:
                most_open = max(most_open, len(server.server_state.connections))
                for key, _ in selector.select(0.1):
                    try:
                        data = key.fileobj.recv(1)
                    except BlockingIOError:
                        continue
                    except (ConnectionResetError, BrokenPipeError):
                        data = b""
                    if data == b"":
                        selector.unregister(key.fileobj)
                        open_ones.discard(key.fileobj)
            assert not open_ones, f"{len(open_ones)} of {flood} idle connections were still held"
            assert most_open <= cap
            # the flood's sockets are still open on this side; a normal client is served
            r = _post(port, "/score", {"episodes": [{"turns": [{"role": "user", "text": "hi"},
                                                               {"role": "assistant", "text": "yo"}]}]})
            assert r.status_code == 200 and r.json()["errors"] == [None]
        finally:
            for s in sockets:
                s.close()


# ---- bodies -----------------------------------------------------------------------------------------


def test_json_depth_ignores_brackets_inside_strings():
    assert json_depth("1") == 0
    assert json_depth('{"a": "[[[\\"[{{", "b": [[1]]}') == 3
    assert json_depth("[" * 50 + "]" * 50) == 50
    assert json_depth("[" * 3_000_000, stop_above=10) == 1 << 20  # stops after the first 1 MiB slice
    with pytest.raises(JSONBodyError, match="nests arrays/objects more than 4 deep"):
        loads_bounded(b"[[[[[1]]]]]", 4)
    with pytest.raises(JSONBodyError, match="not UTF-8"):
        loads_bounded(b"\xff\xfe[", 4)
    with pytest.raises(JSONBodyError, match="malformed JSON"):
        loads_bounded(b'{"a": ', 4)
    assert loads_bounded(b'{"t": "' + b"[" * 1000 + b'"}', 4) == {"t": "[" * 1000}


def test_deep_json_gets_400_before_parsing(scorer):
    with running(scorer) as (port, _):
        r = _post(port, "/score", b"[" * 200_000 + b"]" * 200_000)
        assert r.status_code == 400 and "more than 32 deep" in r.json()["error"], r.text
        r = _post(port, "/score", b'{"episodes": ' + b"[" * 100 + b"]" * 100 + b"}")
        assert r.status_code == 400, r.text
        deep_label = "{" + '"a": [' * 200_000 + "]" * 200_000 + "}"
        r = _post(port, "/get_reward", {"query": ["q a"], "prompts": ["q"], "labels": [deep_label]})
        assert r.status_code == 422 and "labels[0]" in r.json()["error"] and "deep" in r.json()["error"], r.text
        text = "[" * 5000  # brackets inside a string are not nesting
        r = _post(port, "/score", {"episodes": [{"turns": [{"role": "user", "text": text},
                                                           {"role": "assistant", "text": "ok"}]}]})
        assert r.status_code == 200, r.text


def test_a_request_larger_than_the_queue_gets_413_not_503(scorer):
    turns = [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "yo"}]
    with running(scorer, max_queue=2) as (port, _):
        r = _post(port, "/score", {"episodes": [{"turns": turns}] * 3})
        assert r.status_code == 413 and "could never be queued" in r.json()["error"], r.text
        assert "retry-after" not in r.headers
        r = _post(port, "/get_reward", {"query": ["a", "b", "c"]})
        assert r.status_code == 413 and "max_queue" in r.json()["error"], r.text
        assert _post(port, "/score", {"episodes": [{"turns": turns}] * 2}).status_code == 200


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


def test_a_disconnect_mid_body_is_one_log_line(scorer):
    records = _Records()
    with running(scorer) as (port, _):
        logger = logging.getLogger("uvicorn.error")
        logger.addHandler(records)
        try:
            for _ in range(3):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b'{"episodes"')
                time.sleep(0.2)
                sock.close()
            deadline = time.time() + SAFETY_S
            while time.time() < deadline and sum("disconnected" in r.getMessage() for r in records.records) < 3:
                time.sleep(0.05)
        finally:
            logger.removeHandler(records)
    lines = [r.getMessage() for r in records.records]
    gone = [line for line in lines if "disconnected after 11 bytes of the request body" in line]
    assert len(gone) == 3, lines
    assert all("\n" not in line for line in gone)
    assert not [r for r in records.records if r.exc_info], [r.getMessage() for r in records.records if r.exc_info]


# ---- the command ------------------------------------------------------------------------------------


def test_cli_serve_exits_cleanly_on_one_sigint_with_slow_clients_connected():
    proc, url = start_serve(["--body-timeout-s", "600", "--idle-timeout-s", "600"])
    port = int(url.rsplit(":", 1)[1])
    sockets = []
    try:
        sockets.append(socket.create_connection(("127.0.0.1", port)))  # idle
        slow = socket.create_connection(("127.0.0.1", port))  # half a body, then nothing
        slow.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b'{"episodes": [')
        sockets.append(slow)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
            signals = 1
        except subprocess.TimeoutExpired:  # what the old server needed: a second Ctrl-C
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
            signals = 2
    finally:
        for s in sockets:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert signals == 1, out
    assert proc.returncode == 0, out
    assert "Traceback" not in out and "CancelledError" not in out, out
    assert out.count("disconnected after 14 bytes of the request body") == 1, out
    assert "Application shutdown complete" in out


def test_a_second_signal_fails_the_queue_instead_of_cancelling(scorer):
    from types import SimpleNamespace

    from sdscore.models.episodes import Episode, Turn
    from sdscore.rl.batcher import BatcherClosedError
    from sdscore.rl.server import _Stopper

    batcher = RewardBatcher(scorer, worker="caller")  # nobody runs it: the request stays queued
    queued = batcher.submit(Episode((Turn("user", "hi"), Turn("assistant", "yo"))))
    server = SimpleNamespace(should_exit=False, force_exit=False)
    stop = _Stopper(server, batcher)
    stop(signal.SIGINT, None)
    assert server.should_exit and not batcher.closed and not queued.done()  # the first signal drains
    stop(signal.SIGINT, None)
    with pytest.raises(BatcherClosedError, match="closed before this request ran"):
        queued.result(SAFETY_S)
    assert not server.force_exit  # uvicorn would cancel tasks mid-request: tracebacks
    stop(signal.SIGINT, None)
    assert server.force_exit
