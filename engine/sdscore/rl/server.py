"""`sdscore serve`: the reward model behind HTTP, every request going through one RewardBatcher.

Endpoints (JSON; errors are ``{"error": message}`` with a 4xx/5xx status):

- ``POST /score`` — ``{"episodes": [{"turns": [{"role", "text"?, "audio"?}], "criterion"?, "id"?}]}``
  → ``{"scores": [float | null], "errors": [str | null]}``. Audio: ``{"base64"}`` (WAV/FLAC/OGG
  bytes), or a server-local path / ``{"path"}`` when the server allows paths under some folders
  (`ServerLimits.allow_paths`; none by default). A request that does not describe episodes (bad
  JSON, unknown fields, bad base64, undecodable or missing audio) gets 4xx and nothing is scored;
  a path outside the allowed folders gets 403; an episode that fails while scoring gets null and
  its error (HTTP 200).
- ``POST /get_reward`` — OpenRLHF's remote reward format: ``{"query": [str], "prompts"?: [str],
  "labels"?: [...]}`` → ``{"rewards", "scores", "extra_logs", "errors"}``; each query is prompt +
  response text (special tokens stripped, a truncated prompt detected, labels carrying audio:
  sdscore.rl.openrlhf_format). OpenRLHF needs a number per sample: a sample that fails (a query
  that does not start with its prompt, audio that cannot be read or decoded, a bad label, a
  scoring failure) answers 422 naming it, unless the server was started with an
  ``error_reward``: then that sample gets it (200), flagged in ``extra_logs`` with its reason in
  ``errors``.
- ``GET /healthz`` (no token needed) and ``GET /metrics`` (Prometheus text format).

Safety (clients are not trusted): binds 127.0.0.1 unless told otherwise; an optional bearer token
(read from an environment variable by the CLI; compared in constant time; never logged or
echoed); no server-local path is read unless folders are allowed, and then only under them,
checked after symlinks are resolved; a body-size cap enforced while reading (chunked bodies
too); a deadline for the whole body (408); a JSON nesting cap checked before parsing (400); at
most `max_connections` connections, each closed when idle (sdscore.rl.connection_guard); a
per-request timeout (504; a request still queued is withdrawn); a full queue answers 503 with
Retry-After, and a request that could never fit in the queue 413. A client that disconnects
mid-request is one log line. Shutdown (SIGINT/SIGTERM) stops accepting, drops requests whose
body is still arriving, lets the requests already read finish and drains the batcher; a second
signal fails the requests still queued (503) instead of waiting for them.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from fastapi import (  # the `serve` extra; FastAPI resolves these annotations by name
    FastAPI,
    Request,
)
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.requests import ClientDisconnect

from sdscore.errors import SdscoreError
from sdscore.models.episodes import Episode
from sdscore.rl.audio_paths import AudioPathMissing, AudioPathPolicy, AudioPathRefused
from sdscore.rl.batcher import BatcherClosedError, QueueFullError, RewardBatcher
from sdscore.rl.bounded_json import JSONBodyError, loads_bounded
from sdscore.rl.episode_specs import (
    DEFAULT_MAX_AUDIO_BYTES,
    EpisodeSpecError,
    episode_from_messages,
    episode_from_spec,
)
from sdscore.rl.openrlhf_format import PromptMismatch, RewardFormat, read_label, reward_reply, sample_messages
from sdscore.runtime.compute_budget import cores

log = logging.getLogger(__name__)
http_log = logging.getLogger("uvicorn.error")  # what the operator sees next to uvicorn's own lines

TOKEN_ENV = "SDSCORE_SERVE_TOKEN"
_PATHS = ("/score", "/get_reward", "/healthz", "/metrics")
#: request bodies up to this size are turned into episodes on the event loop, larger ones on threads
INLINE_DECODE_BYTES = 1 << 20


class ServerConfigError(SdscoreError):
    """A server limit that cannot work (a non-positive timeout, ...)."""


@dataclass(frozen=True)
class ServerLimits:
    """What one client may ask of the server. `allow_paths`: folders under which server-local
    audio paths may be read (empty: none); `body_timeout_s`: the whole body must arrive within
    it (408); `idle_timeout_s`: a connection with no request in progress is closed after it;
    `max_connections`: connections open at once (more are closed as they arrive);
    `max_json_depth`: nesting of a JSON body (400 beyond)."""

    max_body_bytes: int = 32 * 1024 * 1024
    max_episodes: int = 1024
    request_timeout_s: float = 120.0
    max_audio_bytes: int = DEFAULT_MAX_AUDIO_BYTES
    allow_paths: tuple[str | os.PathLike, ...] = ()
    error_reward: float | None = None
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 15.0
    max_connections: int = 1024
    max_json_depth: int = 32

    def __post_init__(self) -> None:
        if isinstance(self.allow_paths, (bool, str, os.PathLike)):
            raise ServerConfigError(f"allow_paths takes a list of folders, got {self.allow_paths!r} "
                                    f"(no path is read unless its folder is listed)")
        object.__setattr__(self, "allow_paths", tuple(self.allow_paths))
        if self.error_reward is not None and (isinstance(self.error_reward, bool) or not isinstance(
                self.error_reward, (int, float)) or not math.isfinite(self.error_reward)):
            raise ServerConfigError(f"error_reward must be a finite number, got {self.error_reward!r}")
        for name in ("request_timeout_s", "body_timeout_s", "idle_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ServerConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("max_body_bytes", "max_episodes", "max_audio_bytes", "max_connections", "max_json_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ServerConfigError(f"{name} must be a positive integer, got {value!r}")


class HTTPProblem(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def create_app(batcher: RewardBatcher, *, token: str | None = None, limits: ServerLimits = ServerLimits(),
               close_batcher: bool = True, reward_format: RewardFormat = RewardFormat()):
    """The ASGI app (FastAPI) over `batcher`; `close_batcher`: drain and close it at shutdown;
    `reward_format`: how /get_reward reads queries and reports scores."""
    http_counts: Counter = Counter()
    sample_rate = int(batcher.scorer.model.sample_rate)
    max_seconds = float(getattr(batcher.scorer, "max_audio_seconds", 0.0) or 0.0)
    # paths pass the spec parser as strings and are checked (after symlinks) by the policy
    audio_options = {"max_seconds": max_seconds, "max_bytes": limits.max_audio_bytes, "allow_paths": True}
    paths = AudioPathPolicy.allowing(limits.allow_paths)
    # a request with more episodes than the queue holds would get 503 "retry later" for ever
    most_episodes = min(limits.max_episodes, batcher.max_queue)
    too_many = (f"the limit of {limits.max_episodes} per request" if limits.max_episodes <= batcher.max_queue else
                f"the reward queue's capacity of {batcher.max_queue} (the server's max_queue): "
                f"such a request could never be queued; split it")

    # Turning a request into episodes (base64 → WAV decode → resample) runs on the event loop for
    # small bodies — a thread hop costs more than the work (measured: 250 vs 210 requests/s on 2
    # cores) — and on a few threads of its own for large ones, so one big body does not stall the
    # loop (the core's decoder drops the GIL). As many threads as the compute budget's cores(), and
    # at least two, so one large body never waits behind another.
    decoder = ThreadPoolExecutor(max(2, cores()), thread_name_prefix="sdscore-decode")

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

    async def parsed_body(request: Request) -> tuple[Any, int]:
        raw = await _read_body(request, limits.max_body_bytes, limits.body_timeout_s)
        return await decoded(len(raw), _parse_json, raw, limits.max_json_depth), len(raw)

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
            body, size = await parsed_body(request)
            episodes_in = _fields(body, required={"episodes"}, optional=set())["episodes"]
            if not isinstance(episodes_in, list) or not episodes_in:
                raise HTTPProblem(422, "'episodes' must be a non-empty list")
            if len(episodes_in) > most_episodes:
                raise HTTPProblem(413, f"{len(episodes_in)} episodes exceed {too_many}")
            episodes = await decoded(size, _episodes, episodes_in, sample_rate, audio_options, paths)
            future = _submit(batcher, episodes)
        results = await _scored(future, limits.request_timeout_s)
        return {"scores": [s for s, _ in results], "errors": [e for _, e in results]}

    @app.post("/get_reward")
    async def get_reward(request: Request):
        with batcher.arriving():
            body, size = await parsed_body(request)
            fields = _fields(body, required={"query"}, optional={"prompts", "labels"})
            items, truncated = await decoded(size, _openrlhf_episodes, fields, sample_rate, audio_options, paths,
                                             most_episodes, too_many, limits.max_json_depth,
                                             limits.error_reward is not None, reward_format)
            future = _submit(batcher, items)
        results = [(s, e if e is None or e.startswith(f"query[{i}]") else f"query[{i}]: {e}")
                   for i, (s, e) in enumerate(await _scored(future, limits.request_timeout_s))]
        failed = [e for _, e in results if e is not None]
        if failed and limits.error_reward is None:
            raise HTTPProblem(422, f"{len(failed)} of {len(results)} samples could not be scored: "
                                   + "; ".join(failed[:5]))
        return reward_reply(results, truncated, limits.error_reward, reward_format)

    return app


class _ClientGone(Exception):
    """The client disconnected before its request body had arrived: nobody to answer."""

    def __init__(self, received: int):
        super().__init__(f"the client disconnected after {received} bytes of the request body")
        self.received = received


#: the status a request whose client disconnected is counted under (nginx's "client closed request")
CLIENT_CLOSED = 499


class _Guard:
    """Pure ASGI middleware (no per-request task or stream, unlike Starlette's BaseHTTPMiddleware):
    the bearer token for every path but /healthz, response counts by path and status, and a
    client that disconnected mid-request logged as one line."""

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
        except _ClientGone as gone:
            status[0] = CLIENT_CLOSED
            client = "%s:%d - " % tuple(scope["client"][:2]) if scope.get("client") else ""
            http_log.info('%s"%s %s": %s', client, scope["method"], scope["path"], gone)
        finally:
            self.counts[(path, status[0])] += 1


def _check_token(header: str | None, token: str) -> None:
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise HTTPProblem(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})


async def _read_body(request, limit: int, timeout_s: float) -> bytes:
    """The whole body, at most `limit` bytes, arrived within `timeout_s` (408 otherwise)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            declared_bytes = int(declared)
        except ValueError:
            raise HTTPProblem(400, f"bad Content-Length {declared!r}") from None
        if declared_bytes > limit:
            raise HTTPProblem(413, f"request body of {declared_bytes} bytes exceeds the limit of {limit} bytes")
    chunks, size = [], 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPProblem(413, f"request body exceeds the limit of {limit} bytes")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), timeout_s)
    except asyncio.TimeoutError:
        raise HTTPProblem(408, f"the request body did not arrive within {timeout_s:g} s ({size} bytes came)",
                          {"Connection": "close"}) from None
    except ClientDisconnect:
        raise _ClientGone(size) from None
    return b"".join(chunks)


def _parse_json(raw: bytes, max_depth: int) -> Any:
    try:
        return loads_bounded(raw, max_depth)
    except JSONBodyError as exc:
        raise HTTPProblem(400, str(exc)) from None


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


def _episodes(specs: list, sample_rate: int, audio_options: dict, paths: AudioPathPolicy) -> list[Episode]:
    try:
        episodes = [episode_from_spec(s, sample_rate, f"episodes[{i}]", **audio_options) for i, s in enumerate(specs)]
        return [_with_allowed_paths(e, paths, e.id) for e in episodes]
    except AudioPathRefused as exc:
        raise HTTPProblem(403, str(exc)) from None
    except (EpisodeSpecError, AudioPathMissing) as exc:
        raise HTTPProblem(422, str(exc)) from None


def _with_allowed_paths(episode: Episode, paths: AudioPathPolicy, where: str) -> Episode:
    """`episode` with each audio path replaced by the real path the policy allows (or its error)."""
    turns = list(episode.turns)
    for k, turn in enumerate(turns):
        if isinstance(turn.audio, (str, os.PathLike)):
            turns[k] = replace(turn, audio=paths.resolve(turn.audio, f"{where}.turns[{k}].audio"))
    return replace(episode, turns=tuple(turns))


def _openrlhf_episodes(fields: dict, sample_rate: int, audio_options: dict, paths: AudioPathPolicy,
                       most_episodes: int, too_many: str, max_depth: int, per_sample_errors: bool,
                       reward_format: RewardFormat) -> tuple[list[Episode | str], list[bool]]:
    """The episodes of a /get_reward request (sdscore.rl.openrlhf_format says what a sample means)
    and which samples' prompts were cut; with `per_sample_errors`, a sample that cannot be an
    episode becomes its error text (scored as failed) instead of failing the request."""
    queries = fields["query"]
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise HTTPProblem(422, "'query' must be a non-empty list of strings")
    if len(queries) > most_episodes:
        raise HTTPProblem(413, f"{len(queries)} queries exceed {too_many}")
    prompts, labels = fields.get("prompts"), fields.get("labels")
    for name, values in (("prompts", prompts), ("labels", labels)):
        if values is not None and (not isinstance(values, list) or len(values) != len(queries)):
            raise HTTPProblem(422, f"'{name}' must be a list as long as 'query' ({len(queries)})")
    if prompts is not None and not all(p is None or isinstance(p, str) for p in prompts):
        raise HTTPProblem(422, "'prompts' must be a list of strings (or nulls)")
    episodes, truncated = [], []
    for i, query in enumerate(queries):
        where = f"query[{i}]"
        cut = False
        try:
            label = read_label(labels[i] if labels is not None else None, f"labels[{i}]", max_depth)
            messages = sample_messages(query, prompts[i] if prompts is not None else None, label, where, reward_format)
            episode = episode_from_messages(messages, sample_rate, where, **audio_options)
            episodes.append(_with_allowed_paths(episode, paths, where))
        except (EpisodeSpecError, AudioPathRefused, AudioPathMissing) as exc:
            cut = isinstance(exc, PromptMismatch) and exc.truncated
            if not per_sample_errors:
                raise HTTPProblem(403 if isinstance(exc, AudioPathRefused) else 422, str(exc)) from None
            http_log.info("/get_reward %s", exc)  # the operator's record of why it got error_reward
            episodes.append(str(exc) if str(exc).startswith(where) else f"{where}: {exc}")
        truncated.append(cut)
    return episodes, truncated


def _submit(batcher: RewardBatcher, items: list[Episode | str]):
    """`items`: episodes, or (from /get_reward) error texts of samples that already failed."""
    try:
        return batcher.submit_prepared(items)
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


def server_config(app, *, host: str = "127.0.0.1", port: int = 8000, limits: ServerLimits = ServerLimits(),
                  log_level: str = "info"):
    """The uvicorn.Config `serve` runs `app` with: its HTTP protocol enforces `limits`'
    connection cap and idle timeout (sdscore.rl.connection_guard)."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from sdscore.rl.connection_guard import guarded_protocol

    protocol = guarded_protocol(AutoHTTPProtocol, max_connections=limits.max_connections,
                                idle_timeout_s=limits.idle_timeout_s)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=None,
                          limit_concurrency=None, access_log=False, http=protocol,
                          timeout_keep_alive=limits.idle_timeout_s)


def _raise_open_file_limit(connections: int) -> None:
    """Each connection is a file descriptor: lift the soft limit toward the hard one if
    `connections` (plus the model's files and some slack) would not fit, or warn."""
    try:
        import resource
    except ImportError:  # not POSIX
        return
    need = connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
        if soft < need:
            log.warning("the open-file limit (%d) is below max_connections + 256 (%d): connections past it "
                        "are not accepted until others close", soft, need)


class _Stopper:
    """SIGINT/SIGTERM while `serve` runs HTTP on a thread: the first stops accepting and lets the
    requests already read finish; the second also fails the ones still queued (503) rather than
    waiting for them; only a third forces uvicorn out (which cancels what is left)."""

    def __init__(self, server, batcher: RewardBatcher):
        self.server, self.batcher, self.signals = server, batcher, 0

    def __call__(self, signum, frame) -> None:
        self.signals += 1
        if self.signals == 2:
            http_log.info("second signal: failing the queued requests (503) instead of waiting for them")
            # not here: this handler runs on the main thread, inside batcher.run()
            threading.Thread(target=self.batcher.close, kwargs={"drain": False, "timeout": 0},
                             name="sdscore-abort", daemon=True).start()
        elif self.signals > 2:
            self.server.force_exit = True
        self.server.should_exit = True


def serve(batcher: RewardBatcher, *, host: str = "127.0.0.1", port: int = 8000, token: str | None = None,
          limits: ServerLimits = ServerLimits(), log_level: str = "info",
          reward_format: RewardFormat = RewardFormat()) -> bool:
    """Run the server until SIGINT/SIGTERM; in-flight requests finish and the batcher drains.

    With a batcher made with worker="caller", HTTP runs on a thread and the batcher scores on this
    (the main) thread, where torch's CPU thread team is fastest. Returns False when the server
    could not start (e.g. the port is taken; uvicorn has logged why)."""
    import uvicorn

    app = create_app(batcher, token=token, limits=limits, reward_format=reward_format)
    _raise_open_file_limit(limits.max_connections)
    server = uvicorn.Server(server_config(app, host=host, port=port, limits=limits, log_level=log_level))
    if not batcher.owns_worker_loop:
        server.run()
        return server.started

    def http() -> None:
        try:
            server.run()
        finally:
            batcher.close(drain=True)  # ends batcher.run() below (the lifespan normally did already)

    stop = _Stopper(server, batcher)
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
