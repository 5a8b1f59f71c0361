"""A client of `sdscore serve`'s ``POST /score`` (and ``POST /get_reward``) for reward functions
that run in many workers.

One connection pool per process (sync, thread-safe) and one per event loop (async), kept alive
between calls (httpx keeps idle connections 5 s, under the server's 15 s idle timeout); rebuilt
after a fork. Environment proxies are not used: the reward server is an internal service.

What a call gives back, per episode: ``(score, None)``, or ``(None, reason)`` when that episode is
bad — the server scored it as failed (200 with an error) or refused the request describing it
(400/403/413/422). What is not the episode's fault raises `RewardServerError` with the URL, after
``retries`` more tries for what can pass (the connection failed or broke, 408/429/502/503/504,
honouring Retry-After): the server cannot be reached, refuses the token (401), is not sdscore
serve (404/405), or stays overloaded.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
import httpx

from sdscore.errors import SdscoreError

#: statuses (and broken connections) that another try may get past
RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
#: statuses that name a problem of the request, i.e. of its episode
EPISODE_STATUSES = frozenset({400, 403, 413, 422})


class RewardServerError(SdscoreError):
    """`sdscore serve` cannot be used: unreachable, wrong token, not sdscore serve, or overloaded."""


@dataclass(frozen=True)
class ServeClientConfig:
    """Where the server is and how long to wait. `timeout_s` bounds one request (the server's own
    --timeout-s, 120 s by default, answers 504 first); `retries`: tries after the first."""

    url: str
    token: str | None = field(default=None, repr=False)
    timeout_s: float = 150.0
    connect_timeout_s: float = 10.0
    retries: int = 3
    max_connections: int = 64

    @property
    def score_url(self) -> str:
        return self.url.rstrip("/") + "/score"

    @property
    def reward_url(self) -> str:
        return self.url.rstrip("/") + "/get_reward"

    def client_options(self) -> dict:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        limits = httpx.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections)
        return {"headers": headers, "limits": limits, "trust_env": False,
                "timeout": httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s)}


class _Retry(Exception):
    def __init__(self, problem: str, wait_s: float | None = None):
        super().__init__(problem)
        self.problem, self.wait_s = problem, wait_s


_lock = threading.Lock()
_pid = os.getpid()
_clients: dict[ServeClientConfig, httpx.Client] = {}
_async_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> {config: AsyncClient}


def _client(config: ServeClientConfig) -> httpx.Client:
    global _pid
    with _lock:
        if os.getpid() != _pid:  # forked: the parent's sockets are not ours
            _clients.clear()
            _async_clients.clear()
            _pid = os.getpid()
        client = _clients.get(config)
        if client is None or client.is_closed:
            client = _clients[config] = httpx.Client(**config.client_options())
        return client


def _async_client(config: ServeClientConfig) -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    with _lock:
        per_loop = _async_clients.setdefault(loop, {})
        client = per_loop.get(config)
        if client is None or client.is_closed:
            client = per_loop[config] = httpx.AsyncClient(**config.client_options())
        return client


def close_clients() -> None:
    """Close this process's sync connection pools (tests, shutdown hooks); async pools go with their loop."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def score_episode(config: ServeClientConfig, episode: dict) -> tuple[float | None, str | None]:
    """One episode's ``(score, None)`` or ``(None, reason)`` from the server (blocking)."""
    client = _client(config)
    body = {"episodes": [episode]}
    attempt = 0
    while True:
        try:
            try:
                response = client.post(config.score_url, json=body)
            except httpx.TransportError as exc:
                raise _Retry(_transport_problem(exc)) from None
            return _result(config, response)
        except _Retry as retry:
            if attempt == config.retries:
                raise _gave_up(config, retry, attempt + 1) from None
            time.sleep(_backoff(retry, attempt))
            attempt += 1


async def ascore_episode(config: ServeClientConfig, episode: dict) -> tuple[float | None, str | None]:
    """One episode's ``(score, None)`` or ``(None, reason)`` from the server (on the running loop)."""
    return await _apost(config, config.score_url, {"episodes": [episode]}, _result)


async def aget_reward(config: ServeClientConfig, body: dict) -> tuple[dict | None, str | None]:
    """``POST /get_reward`` (OpenRLHF's format): ``(reply, None)``, or ``(None, reason)`` when the
    server refused the request's samples (a server started without --error-reward answers 422)."""
    return await _apost(config, config.reward_url, body, _reward_result)


async def _apost(config: ServeClientConfig, url: str, body: dict, read):
    client = _async_client(config)
    attempt = 0
    while True:
        try:
            try:
                response = await client.post(url, json=body)
            except httpx.TransportError as exc:
                raise _Retry(_transport_problem(exc)) from None
            return read(config, response)
        except _Retry as retry:
            if attempt == config.retries:
                raise _gave_up(config, retry, attempt + 1) from None
            await asyncio.sleep(_backoff(retry, attempt))
            attempt += 1


def _result(config: ServeClientConfig, response: httpx.Response) -> tuple[float | None, str | None]:
    status = response.status_code
    if status == 200:
        try:
            reply = response.json()
            score, error = reply["scores"][0], reply["errors"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise RewardServerError(f"{config.score_url} answered 200 but not with sdscore serve's "
                                    f"{{'scores', 'errors'}}: {response.text[:200]!r}") from None
        if error is None and not isinstance(score, (int, float)):
            raise RewardServerError(f"{config.score_url} answered a score of {score!r}")
        return (None, str(error)) if error is not None else (float(score), None)
    return None, _refusal(config.score_url, response)


def _reward_result(config: ServeClientConfig, response: httpx.Response) -> tuple[dict | None, str | None]:
    if response.status_code == 200:
        try:
            reply = response.json()
            ok = isinstance(reply, dict) and all(isinstance(reply.get(k), list) for k in ("rewards", "scores"))
        except ValueError:
            ok = False
        if not ok:
            raise RewardServerError(f"{config.reward_url} answered 200 but not with /get_reward's "
                                    f"{{'rewards', 'scores', ...}}: {response.text[:200]!r}")
        return reply, None
    return None, _refusal(config.reward_url, response)


def _refusal(url: str, response: httpx.Response) -> str:
    """Why the server refused the request's episodes, or raise: another try may pass (`_Retry`), or
    the server cannot be used (`RewardServerError`)."""
    status, message = response.status_code, _error_message(response)
    if status in EPISODE_STATUSES:
        return f"the server refused it ({status}): {message}"
    if status in RETRY_STATUSES:
        raise _Retry(f"answered {status} ({message})", _retry_after(response))
    if status == 401:
        raise RewardServerError(f"{url} refused the bearer token (401): give the reward workers the "
                                f"server's token in the variable named by the token_env setting "
                                f"(verl's reward_kwargs, the OpenRLHF agent's attribute; default SDSCORE_SERVE_TOKEN)")
    if status in (404, 405):
        raise RewardServerError(f"{url} answered {status}: is this sdscore serve? "
                                f"(set SDSCORE_SERVE_URL, or the url setting, to its base URL)")
    raise RewardServerError(f"{url} answered {status}: {message}")


def _error_message(response: httpx.Response) -> str:
    try:
        reply = response.json()
        if isinstance(reply, dict) and isinstance(reply.get("error"), str):
            return reply["error"]
    except ValueError:
        pass
    return response.text[:200] or response.reason_phrase


def _transport_problem(exc: httpx.TransportError) -> str:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({detail})"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer in time ({type(exc).__name__})"
    return f"the connection broke ({type(exc).__name__}: {detail})"


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def _backoff(retry: _Retry, attempt: int) -> float:
    return min(retry.wait_s if retry.wait_s is not None else 0.5 * 2 ** attempt, 30.0)


def _gave_up(config: ServeClientConfig, retry: _Retry, tries: int) -> RewardServerError:
    hint = (": start `sdscore serve` there, or point SDSCORE_SERVE_URL (or the url setting) at it"
            if retry.problem.startswith("cannot connect") else "")
    return RewardServerError(f"sdscore serve at {config.url}: {retry.problem}, {tries} "
                             f"{'try' if tries == 1 else 'tries'}{hint}")

