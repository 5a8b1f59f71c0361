"""An httpx transport that holds each request to a wall-clock deadline, not just each socket operation.

httpx's timeouts bound every connect, read and write on its own, so a server that trickles one
byte every few seconds holds a request for as long as it likes. Here every socket operation's
timeout is cut to what is left of the calling thread's deadline (set with
``transport.deadline(seconds)`` around a request and the reading of its body), and an operation
that starts past it raises the matching httpx timeout. Connections come from an httpcore pool over
the standard socket backend; the proxy for the endpoint's scheme is read from the environment
(HTTPS_PROXY / HTTP_PROXY / ALL_PROXY, NO_PROXY) as httpx would.
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

_WRITE_SLICE = 65536  # a write is sliced so that each slice is held to the deadline


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's socket backend whose streams honour the calling thread's deadline."""

    def __init__(self, backend: httpcore.NetworkBackend | None = None):
        self._backend = backend or httpcore.SyncBackend()
        self._local = threading.local()

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Hold this thread's socket operations to ``seconds`` from now (nested: the inner one holds)."""
        outer = getattr(self._local, "at", None)
        self._local.at = time.monotonic() + seconds
        try:
            yield
        finally:
            self._local.at = outer

    def left(self, timeout: float | None, expired: type[Exception]) -> float | None:
        """The timeout for one operation: ``timeout`` cut to what is left of the deadline; ``expired`` once past it."""
        at = getattr(self._local, "at", None)
        if at is None:
            return timeout
        left = at - time.monotonic()
        if left <= 0:
            raise expired("the deadline passed")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(host, port, self.left(timeout, httpcore.ConnectTimeout),
                                           local_address, socket_options)
        return DeadlineStream(stream, self)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        stream = self._backend.connect_unix_socket(path, self.left(timeout, httpcore.ConnectTimeout), socket_options)
        return DeadlineStream(stream, self)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose reads, writes and TLS handshake end by the deadline."""

    def __init__(self, stream: httpcore.NetworkStream, backend: DeadlineBackend):
        self._stream = stream
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._backend.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        view = memoryview(buffer)
        for start in range(0, len(view), _WRITE_SLICE):
            self._stream.write(bytes(view[start : start + _WRITE_SLICE]),
                               self._backend.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        timeout = self._backend.left(timeout, httpcore.ConnectTimeout)
        stream = self._stream.start_tls(ssl_context, server_hostname, timeout)
        return DeadlineStream(stream, self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    """httpcore's exceptions as the httpx ones of the same name (timeouts stay timeouts)."""
    try:
        yield
    except httpcore.TimeoutException as error:
        raise getattr(httpx, type(error).__name__, httpx.TimeoutException)(str(error)) from error
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError, httpcore.UnsupportedProtocol) as error:
        raise getattr(httpx, type(error).__name__, httpx.TransportError)(str(error)) from error


class _ResponseStream(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]):
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _as_httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            with _as_httpx_errors():
                close()


def environment_proxy(url: str) -> str | None:
    """The proxy URL the environment sets for ``url`` (None when there is none or NO_PROXY covers its host)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


class DeadlineTransport(httpx.BaseTransport):
    """An httpx transport for one endpoint, over a pool of ``max_connections``, that honours ``deadline``."""

    def __init__(self, url: str, max_connections: int, keepalive_expiry: float = 5.0):
        self.backend = DeadlineBackend()
        proxy = environment_proxy(url)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=self.backend,
            **({"proxy": httpcore.Proxy(proxy)} if proxy else {}),
        )

    def deadline(self, seconds: float) -> contextlib.AbstractContextManager[None]:
        """Within this block, this thread's requests through the transport end ``seconds`` from now."""
        return self.backend.deadline(seconds)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                             target=request.url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _as_httpx_errors():
            response = self._pool.handle_request(core_request)
        return httpx.Response(status_code=response.status, headers=response.headers,
                              stream=_ResponseStream(response.stream), extensions=response.extensions)

    def close(self) -> None:
        self._pool.close()
