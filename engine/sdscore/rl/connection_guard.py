"""uvicorn's HTTP protocol with the limits a server facing untrusted clients needs.

uvicorn on its own holds a connection that never sends a request for ever (its keep-alive timer
starts only after a first response, and any byte stops it), accepts any number of connections,
and at shutdown waits for a request whose body is still trickling in. `guarded_protocol` wraps
the protocol class uvicorn would pick (httptools or h11; both keep the per-request state used
here in ``self.cycle``) so that:

- at most `max_connections` are open: one more is aborted as soon as it is accepted (a warning,
  at most one every 10 s, counts them);
- a connection without a request in progress must complete its next request's headers within
  `idle_timeout_s` of being opened or of its last response, else it is closed; a request's body
  has its own deadline in the app (408), and a request being scored its `request_timeout_s`;
- at shutdown a request whose body has not fully arrived is dropped at once (its client sees the
  connection close), while requests already read finish as before.
"""

from __future__ import annotations

import logging
import math
import time

log = logging.getLogger("uvicorn.error")  # uvicorn's own log: same format and --log-level

REFUSAL_LOG_INTERVAL_S = 10.0


class _RefusalLog:
    def __init__(self, limit: int):
        self.limit, self.pending, self.last = limit, 0, -math.inf

    def note(self) -> None:
        self.pending += 1
        now = time.monotonic()
        if now - self.last >= REFUSAL_LOG_INTERVAL_S:
            log.warning("refused %d connection(s): %d are open, the limit (--max-connections)",
                        self.pending, self.limit)
            self.pending, self.last = 0, now


def guarded_protocol(base: type, *, max_connections: int, idle_timeout_s: float) -> type:
    """A subclass of uvicorn's HTTP protocol class `base` enforcing the limits above."""
    refusals = _RefusalLog(max_connections)

    class GuardedHTTPProtocol(base):
        _refused = False
        _idle_timer = None

        def connection_made(self, transport) -> None:
            if len(self.connections) >= max_connections:
                # never registered with uvicorn: abort (RST) frees the socket at once
                self._refused = True
                refusals.note()
                transport.abort()
                return
            super().connection_made(transport)
            self._arm_idle_timer()

        def connection_lost(self, exc) -> None:
            if self._refused:
                return
            self._cancel_idle_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if not self._refused:
                super().data_received(data)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_idle_timer()

        def shutdown(self) -> None:
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete and cycle.more_body:
                self._cancel_idle_timer()
                self.transport.close()  # its body is still arriving: not a request in flight yet
                return
            super().shutdown()

        def _arm_idle_timer(self) -> None:
            self._cancel_idle_timer()
            self._idle_timer = self.loop.call_later(idle_timeout_s, self._idle_expired)

        def _cancel_idle_timer(self) -> None:
            if self._idle_timer is not None:
                self._idle_timer.cancel()
                self._idle_timer = None

        def _idle_expired(self) -> None:
            self._idle_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is in progress: the body deadline and the request timeout apply
            if not self.transport.is_closing():
                client = "%s:%d " % self.client if self.client else ""
                log.debug("%sclosed: no complete request within %g s (--idle-timeout-s)", client, idle_timeout_s)
                self.transport.close()

    GuardedHTTPProtocol.__name__ = GuardedHTTPProtocol.__qualname__ = f"Guarded{base.__name__}"
    return GuardedHTTPProtocol
