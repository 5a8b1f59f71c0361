"""`sdscore serve`'s app on a real loopback uvicorn server: /score and /get_reward under many
concurrent clients equal direct batched scores; bad requests get 4xx; the token guards; the
metrics parse as Prometheus text; a timeout withdraws; shutdown drains in-flight requests."""

from __future__ import annotations

import base64
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
from sdscore.models.episodes import Episode, Turn
from sdscore.rl.batcher import RewardBatcher
from sdscore.rl.server import ServerLimits, create_app

from rl_episodes import SR, compact_scorer, wav_bytes, wave
from serve_process import free_port, server_on_thread, start_serve

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")

TOKEN = "s3cret-token-value-never-logged"


@pytest.fixture(scope="module")
def scorer():
    return compact_scorer()


@pytest.fixture(scope="module")
def clips():
    rng = np.random.default_rng(11)
    return [(wave(rng, 0.6), wave(rng, rng.uniform(0.3, 1.0))) for _ in range(40)]


@contextmanager
def running(app):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info", access_log=True))
    with server_on_thread(server, join_s=20):
        yield f"http://127.0.0.1:{port}", server


def _wait_until(condition, what: str) -> None:
    """Poll `condition` until it holds; the deadline is a hang guard, never what a passing run waits for."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after 120 s"
        time.sleep(0.005)


def _accepts(url: str) -> bool:
    """True while the server at url accepts connections (it stops when its shutdown begins)."""
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        return True
    except OSError:
        return False


def _episode_json(q, a, i, as_path=None):
    audio = {"path": as_path} if as_path else {"base64": base64.b64encode(wav_bytes(a)).decode()}
    return {"id": f"ep{i}", "turns": [{"role": "user", "text": "how are you?",
                                       "audio": {"base64": base64.b64encode(wav_bytes(q)).decode()}},
                                      {"role": "assistant", "text": f"reply {i}", "audio": audio}]}


def _expected(scorer, clips, paths=None):
    from sdscore.rl.episode_specs import audio_from_spec

    episodes = []
    for i, (q, a) in enumerate(clips):
        qq = audio_from_spec({"bytes": wav_bytes(q)}, SR, "q")
        aa = paths[i] if paths else audio_from_spec({"bytes": wav_bytes(a)}, SR, "a")
        episodes.append(Episode((Turn("user", "how are you?", qq), Turn("assistant", f"reply {i}", aa))))
    return scorer.score(episodes).numpy()


def test_score_under_concurrent_clients_equals_batched(scorer, clips, tmp_path):
    paths = []
    for i, (_, a) in enumerate(clips):
        p = tmp_path / f"a{i}.wav"
        p.write_bytes(wav_bytes(a))
        paths.append(str(p))
    want_b64, want_path = _expected(scorer, clips), _expected(scorer, clips, paths)
    batcher = RewardBatcher(scorer, max_batch=16, max_wait_ms=10)
    app = create_app(batcher, limits=ServerLimits(allow_paths=(tmp_path,)))
    with running(app) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        def one(i):
            body = {"episodes": [_episode_json(*clips[i], i, as_path=paths[i] if i % 2 else None)]}
            r = client.post("/score", json=body)
            assert r.status_code == 200, r.text
            return r.json()

        with ThreadPoolExecutor(32) as pool:
            replies = list(pool.map(one, range(len(clips))))
        metrics = client.get("/metrics").text
    got = np.array([r["scores"][0] for r in replies])
    want = np.where(np.arange(len(clips)) % 2 == 1, want_path, want_b64)
    assert all(r["errors"] == [None] for r in replies)
    assert np.abs(got - want).max() <= 1e-5
    assert batcher.stats.batches < len(clips)  # concurrent requests shared batches
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    assert families["sdscore_requests"].samples[0].value == len(clips)
    assert families["sdscore_episodes"].samples[0].value == len(clips)
    quantiles = [s for s in families["sdscore_request_latency_seconds"].samples if "quantile" in s.labels]
    assert {s.labels["quantile"] for s in quantiles} == {"0.5", "0.9", "0.99"}
    responses = {(s.labels["path"], s.labels["code"]): s.value for s in families["sdscore_http_responses"].samples}
    assert responses[("/score", "200")] == len(clips)


def test_get_reward_in_openrlhf_format(scorer, clips):
    q, a = clips[0]
    batcher = RewardBatcher(scorer, max_wait_ms=1)
    labels = [{"audio": {"base64": base64.b64encode(wav_bytes(a)).decode()}},
              '{"context": [{"role": "user", "content": "how are you?"}]}', "a plain reference answer"]
    body = {"query": ["how are you? reply 0", "how are you? reply 1", "how are you? reply 2"],
            "prompts": ["how are you?"] * 3, "labels": labels}
    with running(create_app(batcher)) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/get_reward", json=body)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert set(reply) == {"rewards", "scores", "extra_logs", "errors"} and reply["rewards"] == reply["scores"]
    assert reply["errors"] == [None] * 3
    from sdscore.rl.episode_specs import audio_from_spec

    a16 = audio_from_spec({"bytes": wav_bytes(a)}, SR, "a")
    want = scorer.score([Episode((Turn("user", "how are you?"), Turn("assistant", " reply 0", a16))),
                         Episode((Turn("user", "how are you?"), Turn("assistant", " reply 1"))),
                         Episode((Turn("user", "how are you?"), Turn("assistant", " reply 2")))]).numpy()
    assert np.abs(np.array(reply["rewards"]) - want).max() <= 1e-5


@pytest.mark.parametrize("body,status,message", [
    (b"{not json", 400, "malformed JSON"),
    (b"[1, 2]", 422, "expected a JSON object"),
    (b'{"episodes": [], "extra": 1}', 422, "unknown field"),
    (b'{"episodes": []}', 422, "non-empty list"),
    (b'{"episodes": [{"turns": [{"role": "user", "text": "hi", "colour": 1}]}]}', 422, "unknown field"),
    (b'{"episodes": [{"turns": [{"role": "robot", "text": "hi"}]}]}', 422, "role"),
    (b'{"episodes": [{"turns": [{"role": "user", "audio": {"base64": "@@@"}}]}]}', 422, "not valid base64"),
    (b'{"episodes": [{"turns": [{"role": "user", "audio": {"base64": "UklGRg=="}}]}]}', 422, "episodes\\[0\\]"),
    (b'{"episodes": [{"turns": [{"role": "user", "audio": "/no/such/file.wav"}]}]}', 403,
     "reads no server-local audio paths"),
])
def test_bad_requests_get_4xx_with_a_message(scorer, body, status, message):
    with running(create_app(RewardBatcher(scorer))) as (url, _), httpx.Client(base_url=url) as client:
        r = client.post("/score", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
        assert message.replace("\\", "") in r.json()["error"] or __import__("re").search(message, r.json()["error"])
        assert client.get("/healthz").json()["status"] == "ok"  # and the server is still up


def test_oversize_bodies_declared_or_chunked_get_413(scorer):
    app = create_app(RewardBatcher(scorer), limits=ServerLimits(max_body_bytes=1000))
    with running(app) as (url, _), httpx.Client(base_url=url) as client:
        r = client.post("/score", content=b"x" * 5000)
        assert r.status_code == 413 and "limit of 1000 bytes" in r.json()["error"]

        def chunks():
            for _ in range(10):
                yield b"y" * 500

        r = client.post("/score", content=chunks())  # no Content-Length: counted while reading
        assert r.status_code == 413
        r = client.post("/get_reward", json={"query": ["a"] * 2000})
        assert r.status_code == 413


def test_token_required_and_never_logged(scorer, caplog):
    caplog.set_level(logging.DEBUG)
    app = create_app(RewardBatcher(scorer), token=TOKEN)
    body = {"episodes": [{"turns": [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "hello"}]}]}
    with running(app) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/score", json=body).status_code == 401
        wrong = client.post("/score", json=body, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert client.get("/metrics").status_code == 401
        assert client.get("/healthz").status_code == 200  # liveness needs no token
        ok = client.post("/score", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["errors"] == [None]
        bad = client.post("/score", content=b"{", headers={"Authorization": f"Bearer {TOKEN}"})
        assert TOKEN not in bad.text
    assert TOKEN not in caplog.text


def test_full_queue_503_and_timeout_504(scorer):
    gate = threading.Event()

    class Stuck:
        model = scorer.model

        def score_detailed(self, episodes):
            gate.wait(20)
            return scorer.score_detailed(episodes)

    body = {"episodes": [{"turns": [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "yo"}]}]}

    def stuck_and_queued(request_timeout_s):
        """A server whose worker is stuck on the first request (until the gate opens) and whose one queue
        place holds the second: (client, first and second replies as futures, batcher)."""
        batcher = RewardBatcher(Stuck(), max_batch=1, max_wait_ms=0, max_queue=1)
        with running(create_app(batcher, limits=ServerLimits(request_timeout_s=request_timeout_s))) as (url, _), \
                httpx.Client(base_url=url, timeout=60) as client, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, "/score", json=body)  # taken by the worker, stuck
            _wait_until(lambda: batcher.in_flight > 0, "the first request taken")
            second = pool.submit(client.post, "/score", json=body)  # queued (queue now full)
            yield client, first, second, batcher

    try:
        # a full queue: the deadline (600 s) cannot end the queued request first, whatever the machine's speed
        for client, first, second, batcher in stuck_and_queued(600.0):
            _wait_until(lambda: batcher.queue_depth == 1, "the second request queued")
            third = client.post("/score", json=body)
            assert third.status_code == 503 and third.headers["retry-after"] == "1"
            assert "queue is full" in third.json()["error"]
            gate.set()
            assert first.result().status_code == second.result().status_code == 200
        # deadlines: the worker stays stuck until both replies are in, so each ends at its 0.5-s deadline
        gate.clear()
        for _, first, second, _ in stuck_and_queued(0.5):
            assert second.result().status_code == 504  # timed out while queued: withdrawn
            assert first.result().status_code == 504
            gate.set()
    finally:
        gate.set()


def test_shutdown_finishes_in_flight_requests(scorer, clips):
    gate = threading.Event()

    class Held:
        model = scorer.model

        def score_detailed(self, episodes):
            gate.wait(120)
            return scorer.score_detailed(episodes)

    batcher = RewardBatcher(Held(), max_batch=4, max_wait_ms=0)
    try:
        with running(create_app(batcher)) as (url, server), httpx.Client(base_url=url, timeout=120) as client:
            with ThreadPoolExecutor(8) as pool:
                futures = [pool.submit(client.post, "/score", json={"episodes": [_episode_json(*clips[i], i)]})
                           for i in range(8)]
                # every request is in (scored or queued) before the shutdown, and none is scored until the
                # shutdown has begun (the server has stopped accepting): no sleep decides either
                _wait_until(lambda: batcher.stats.requests == 8, "eight requests in")
                server.should_exit = True  # what SIGTERM does
                _wait_until(lambda: not _accepts(url), "the shutdown begun")
                gate.set()
                codes = [f.result().status_code for f in futures]
    finally:
        gate.set()
    assert codes == [200] * 8
    assert batcher.closed  # the lifespan drained and closed it


def test_cli_serve_answers_then_stops_cleanly_on_sigterm():
    import signal

    proc, url = start_serve(["--max-wait-ms", "2"], env={"SDSCORE_SERVE_TOKEN": TOKEN})
    try:
        body = {"episodes": [{"turns": [{"role": "user", "text": "hi"}, {"role": "assistant", "text": "hello"}]}]}
        assert httpx.post(f"{url}/score", json=body).status_code == 401
        r = httpx.post(f"{url}/score", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert r.status_code == 200 and isinstance(r.json()["scores"][0], float)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    # uvicorn shuts down gracefully, then re-raises the signal it caught: the exit status says SIGTERM
    assert proc.returncode in (0, -signal.SIGTERM), out
    assert "Application shutdown complete" in out
    assert "bearer token from $SDSCORE_SERVE_TOKEN" in out and TOKEN not in out


def test_cli_serve_on_a_taken_port_exits_with_a_clear_error():
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "sdscore.cli", "serve", "--port", str(port)],
                              capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert f"could not start on 127.0.0.1:{port}" in out and "Traceback" not in out


def test_cli_serve_refuses_a_bad_port():
    from sdscore.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--port", "99999"])
    assert exit_info.value.code == 2
