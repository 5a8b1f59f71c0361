"""`sdscore serve`: the reward model behind HTTP, every request going through one RewardBatcher.

Endpoints (JSON; errors are ``{"error": message}`` with a 4xx/5xx status):

- ``POST /score`` — ``{"episodes": [{"turns": [{"role", "text"?, "audio"?}], "criterion"?, "id"?}]}``
  → ``{"scores": [float | null], "errors": [str | null]}``. Audio: a server-local path (when the
  server allows paths), ``{"path"}``, ``{"base64"}`` (WAV/FLAC/OGG bytes). A request that does not
  describe episodes (bad JSON, unknown fields, bad base64, undecodable or missing audio) gets 4xx
  and nothing is scored; an episode that fails while scoring gets null and its error (HTTP 200).
- ``POST /get_reward`` — OpenRLHF's remote reward format: ``{"query": [str], "prompts"?: [str],
  "labels"?: [...]}`` → ``{"rewards", "scores", "extra_logs"}``. Each query is prompt + response
  text; the response is the query after its prompt. A label may be an object (or a JSON string)
  with ``"audio"`` (the response's audio spec) and ``"context"`` (chat messages replacing the
  prompt as context). OpenRLHF needs a number per sample: a sample that fails answers 422 naming
  it, unless the server was started with an ``error_reward``.
- ``GET /healthz`` (no token needed) and ``GET /metrics`` (Prometheus text format).

Safety: binds 127.0.0.1 unless told otherwise; an optional bearer token (read from an environment
variable by the CLI; compared in constant time; never logged or echoed); a body-size cap enforced
while reading (chunked bodies too); a per-request timeout (504; a request still queued is
withdrawn); a full queue answers 503 with Retry-After. Shutdown (SIGINT/SIGTERM) stops accepting,
lets in-flight requests finish and drains the batcher.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import (  # the `serve` extra; FastAPI resolves these annotations by name
    FastAPI,
    Request,
)
from fastapi.responses import JSONResponse, PlainTextResponse

from sdscore.models.episodes import Episode
from sdscore.rl.batcher import BatcherClosedError, QueueFullError, RewardBatcher
from sdscore.rl.episode_specs import (
    DEFAULT_MAX_AUDIO_BYTES,
    EpisodeSpecError,
    episode_from_messages,
    episode_from_spec,
)

log = logging.getLogger(__name__)

TOKEN_ENV = "SDSCORE_SERVE_TOKEN"
_PATHS = ("/score", "/get_reward", "/healthz", "/metrics")
#: request bodies up to this size are turned into episodes on the event loop, larger ones on threads
INLINE_DECODE_BYTES = 1 << 20


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int = 32 * 1024 * 1024
    max_episodes: int = 1024
    request_timeout_s: float = 120.0
    max_audio_bytes: int = DEFAULT_MAX_AUDIO_BYTES
    allow_paths: bool = True
    error_reward: float | None = None


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def create_app(batcher: RewardBatcher, *, token: str | None = None, limits: ServerLimits = ServerLimits(),
               close_batcher: bool = True):
    """The ASGI app (FastAPI) over `batcher`; `close_batcher`: drain and close it at shutdown."""
    http_counts: Counter = Counter()
    sample_rate = int(batcher.scorer.model.sample_rate)
    max_seconds = float(getattr(batcher.scorer, "max_audio_seconds", 0.0) or 0.0)
    audio_options = {"max_seconds": max_seconds, "max_bytes": limits.max_audio_bytes,
                     "allow_paths": limits.allow_paths}

    # Turning a request into episodes (base64 → WAV decode → resample) runs on the event loop for
    # small bodies — a thread hop costs more than the work (measured: 250 vs 210 requests/s on 2
    # cores) — and on a few threads of its own for large ones, so one big body does not stall the
    # loop (the core's decoder drops the GIL).
    decoder = ThreadPoolExecutor(max(2, os.cpu_count() or 1), thread_name_prefix="sdscore-decode")

    @asynccontextmanager
    async def lifespan(app):
        yield
        loop = asyncio.get_running_loop()
        if close_batcher:
            await loop.run_in_executor(None, batcher.close, True)
        decoder.shutdown(wait=False)

    app = FastAPI(title="sdscore reward server", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_middleware(_Guard, token=token, counts=http_counts)

    async def decoded(size: int, fn, *args):
        if size <= INLINE_DECODE_BYTES:
            return fn(*args)
        return await asyncio.get_running_loop().run_in_executor(decoder, fn, *args)

    @app.exception_handler(HTTPProblem)
    async def problem_handler(request: Request, problem: HTTPProblem):
        return JSONResponse({"error": problem.message}, problem.status, headers=problem.headers)

    @app.get("/healthz")
    async def healthz():
        if batcher.closed:
            return JSONResponse({"status": "shutting down"}, 503)
        return {"status": "ok", "queue_depth": batcher.queue_depth}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(prometheus_text(batcher, http_counts),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/score")
    async def score(request: Request):
        with batcher.arriving():  # a batch waits (≤ max_wait_ms) for requests still being read
            body, size = await _json_body(request, limits.max_body_bytes)
            episodes_in = _fields(body, required={"episodes"}, optional=set())["episodes"]
            if not isinstance(episodes_in, list) or not episodes_in:
                raise HTTPProblem(422, "'episodes' must be a non-empty list")
            if len(episodes_in) > limits.max_episodes:
                raise HTTPProblem(413, f"{len(episodes_in)} episodes exceed the limit of {limits.max_episodes} "
                                       f"per request")
            episodes = await decoded(size, _episodes, episodes_in, sample_rate, audio_options)
            future = _submit(batcher, episodes)
        results = await _scored(future, limits.request_timeout_s)
        return {"scores": [s for s, _ in results], "errors": [e for _, e in results]}

    @app.post("/get_reward")
    async def get_reward(request: Request):
        with batcher.arriving():
            body, size = await _json_body(request, limits.max_body_bytes)
            fields = _fields(body, required={"query"}, optional={"prompts", "labels"})
            episodes = await decoded(size, _openrlhf_episodes, fields, sample_rate, audio_options,
                                     limits.max_episodes)
            future = _submit(batcher, episodes)
        results = await _scored(future, limits.request_timeout_s)
        failed = [f"query[{i}]: {e}" for i, (_, e) in enumerate(results) if e is not None]
        if failed and limits.error_reward is None:
            raise HTTPProblem(422, f"{len(failed)} of {len(results)} samples could not be scored: "
                                   + "; ".join(failed[:5]))
        rewards = [limits.error_reward if s is None else s for s, _ in results]
        return {"rewards": rewards, "scores": rewards, "extra_logs": {"sdscore_failed": [float(e is not None)
                                                                                         for _, e in results]}}

    return app


class _Guard:
    """Pure ASGI middleware (no per-request task or stream, unlike Starlette's BaseHTTPMiddleware):
    the bearer token for every path but /healthz, and response counts by path and status."""

    def __init__(self, app, token: str | None, counts: Counter):
        self.app, self.token, self.counts = app, token, counts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"] if scope["path"] in _PATHS else "other"  # a bounded label set
        status = [500]

        async def counted_send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.token is not None and scope["path"] != "/healthz":
                _check_token(dict(scope["headers"]).get(b"authorization", b"").decode("latin-1"), self.token)
            await self.app(scope, receive, counted_send)
        except HTTPProblem as problem:
            await JSONResponse({"error": problem.message}, problem.status, headers=problem.headers)(
                scope, receive, counted_send)
        finally:
            self.counts[(path, status[0])] += 1


def _check_token(header: str | None, token: str) -> None:
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPProblem(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})


async def _json_body(request, limit: int) -> tuple[Any, int]:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_bytes = int(declared)
        except ValueError:
            raise HTTPProblem(400, f"bad Content-Length {declared!r}") from None
        if declared_bytes > limit:
            raise HTTPProblem(413, f"request body of {declared_bytes} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPProblem(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks)), size
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HTTPProblem(400, f"malformed JSON: {exc}") from None


def _fields(body: Any, *, required: set[str], optional: set[str]) -> dict:
    if not isinstance(body, dict):
        raise HTTPProblem(422, f"expected a JSON object, got {type(body).__name__}")
    unknown = set(body) - required - optional
    if unknown:
        raise HTTPProblem(422, f"unknown field(s): {', '.join(sorted(unknown))} "
                               f"(expected {', '.join(sorted(required | optional))})")
    missing = required - set(body)
    if missing:
        raise HTTPProblem(422, f"missing field(s): {', '.join(sorted(missing))}")
    return body


def _episodes(specs: list, sample_rate: int, audio_options: dict) -> list[Episode]:
    try:
        episodes = [episode_from_spec(s, sample_rate, f"episodes[{i}]", **audio_options) for i, s in enumerate(specs)]
    except EpisodeSpecError as exc:
        raise HTTPProblem(422, str(exc)) from None
    _check_paths(episodes)
    return episodes


def _check_paths(episodes: list[Episode]) -> None:
    for episode in episodes:
        for k, turn in enumerate(episode.turns):
            if isinstance(turn.audio, (str, os.PathLike)) and not os.path.isfile(turn.audio):
                raise HTTPProblem(422, f"{episode.id}.turns[{k}].audio: no such file on the server: {turn.audio}")


def _openrlhf_episodes(fields: dict, sample_rate: int, audio_options: dict, max_episodes: int) -> list[Episode]:
    queries = fields["query"]
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise HTTPProblem(422, "'query' must be a non-empty list of strings")
    if len(queries) > max_episodes:
        raise HTTPProblem(413, f"{len(queries)} queries exceed the limit of {max_episodes} per request")
    prompts, labels = fields.get("prompts"), fields.get("labels")
    for name, values in (("prompts", prompts), ("labels", labels)):
        if values is not None and (not isinstance(values, list) or len(values) != len(queries)):
            raise HTTPProblem(422, f"'{name}' must be a list as long as 'query' ({len(queries)})")
    episodes = []
    for i, query in enumerate(queries):
        where = f"query[{i}]"
        prompt = prompts[i] if prompts is not None else None
        label = labels[i] if labels is not None else None
        if isinstance(label, str) and label.lstrip().startswith("{"):
            try:
                label = json.loads(label)
            except json.JSONDecodeError as exc:
                raise HTTPProblem(422, f"labels[{i}]: malformed JSON ({exc})") from None
        if label is not None and not isinstance(label, Mapping):
            label = None  # a plain label (e.g. a reference answer) carries no audio or context
        response = query[len(prompt):] if isinstance(prompt, str) and query.startswith(prompt) else query
        context = (label or {}).get("context")
        if context is None:
            context = [] if not prompt else [{"role": "user", "content": prompt}]
        reply: dict[str, Any] = {"role": "assistant", "content": response}
        if (label or {}).get("audio") is not None:
            reply["audio"] = label["audio"]
        try:
            if not isinstance(context, list):
                raise EpisodeSpecError(f"labels[{i}].context: expected a list of messages")
            episodes.append(episode_from_messages(list(context) + [reply], sample_rate, where, **audio_options))
        except EpisodeSpecError as exc:
            raise HTTPProblem(422, str(exc)) from None
    _check_paths(episodes)
    return episodes


def _submit(batcher: RewardBatcher, episodes: list[Episode]):
    try:
        return batcher.submit_detailed(episodes)
    except QueueFullError as exc:
        raise HTTPProblem(503, str(exc), {"Retry-After": "1"}) from None
    except BatcherClosedError:
        raise HTTPProblem(503, "the server is shutting down", {"Retry-After": "5"}) from None


async def _scored(future, timeout_s: float) -> list:
    waiting = asyncio.wrap_future(future)
    try:
        return await asyncio.wait_for(waiting, timeout_s)
    except asyncio.TimeoutError:  # wait_for cancelled the wrapped future: a queued request is withdrawn
        raise HTTPProblem(504, f"not scored within {timeout_s:g} s") from None
    except BatcherClosedError:
        raise HTTPProblem(503, "the server is shutting down", {"Retry-After": "5"}) from None


def prometheus_text(batcher: RewardBatcher, http_counts: Mapping | None = None) -> str:
    """The batcher's counters, gauges and latency quantiles in Prometheus' text format (0.0.4)."""
    snap = batcher.snapshot()
    lines = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            lines.append(f"{name}{labels} {float(value):.9g}")

    metric("sdscore_requests_total", "counter", "Reward requests accepted by the batcher.", [("", snap["requests"])])
    metric("sdscore_episodes_total", "counter", "Episodes scored or failed.", [("", snap["episodes"])])
    metric("sdscore_failed_episodes_total", "counter", "Episodes that could not be scored.",
           [("", snap["failed_episodes"])])
    metric("sdscore_rejected_requests_total", "counter", "Requests refused because the queue was full.",
           [("", snap["rejected_requests"])])
    metric("sdscore_batches_total", "counter", "Batches run on the reward model.", [("", snap["batches"])])
    metric("sdscore_queue_depth", "gauge", "Episodes waiting for a batch.", [("", snap["queue_depth"])])
    metric("sdscore_in_flight_episodes", "gauge", "Episodes in the batch being scored.", [("", snap["in_flight"])])
    sizes = list(batcher.stats.batch_sizes)
    metric("sdscore_batch_size", "summary", "Episodes per batch (last 10,000 batches).",
           [("_sum", sum(sizes)), ("_count", len(sizes))])
    latencies = list(batcher.stats.latencies)
    quantiles = [(f'{{quantile="{q / 100:g}"}}', snap["latency_ms"][f"p{q}"] / 1000.0)
                 for q in (50, 90, 99) if snap["latency_ms"][f"p{q}"] is not None]
    metric("sdscore_request_latency_seconds", "summary",
           "Time from submission to result per request (last 10,000 requests).",
           quantiles + [("_sum", sum(latencies)), ("_count", len(latencies))])
    if http_counts:
        metric("sdscore_http_responses_total", "counter", "HTTP responses by path and status.",
               [(f'{{path="{_label(path)}",code="{code}"}}', n) for (path, code), n in sorted(http_counts.items())])
    metric("sdscore_up_time_seconds", "gauge", "Seconds since this process imported the server.",
           [("", time.monotonic() - _STARTED)])
    return "\n".join(lines) + "\n"


_STARTED = time.monotonic()


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def serve(batcher: RewardBatcher, *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None,
          limits: ServerLimits = ServerLimits(), log_level: str = "info") -> bool:
    """Run the server until SIGINT/SIGTERM; in-flight requests finish and the batcher drains.

    With a batcher made with worker="caller", HTTP runs on a thread and the batcher scores on this
    (the main) thread, where torch's CPU thread team is fastest. Returns False when the server
    could not start (e.g. the port is taken; uvicorn has logged why)."""
    import uvicorn

    app = create_app(batcher, token=token, limits=limits)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=None,
                            limit_concurrency=None, access_log=False)
    server = uvicorn.Server(config)
    if not batcher.owns_worker_loop:
        server.run()
        return server.started

    def http() -> None:
        try:
            server.run()
        finally:
            batcher.close(drain=True)  # ends batcher.run() below (the lifespan normally did already)

    def stop(signum, frame) -> None:
        server.force_exit = server.should_exit  # a second signal stops without waiting
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=http, name="sdscore-http")
    thread.start()
    try:
        batcher.run()
    finally:
        server.should_exit = True
        thread.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return server.started
