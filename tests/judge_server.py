"""A scripted OpenAI-compatible chat server on 127.0.0.1 for the judge tests (a real HTTP server).

The test gives a responder(index, body, headers) -> Reply; the server records every request and
counts requests in flight.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Reply:
    """What the server answers: status, a JSON-able body or raw text, headers, and a delay first."""

    status: int = 200
    body: object = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def completion(content: str, prompt_tokens: int = 100, completion_tokens: int = 20, audio_tokens: int = 0) -> Reply:
    """A 200 chat-completions answer whose message content is `content`."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    if audio_tokens:
        usage["prompt_tokens_details"] = {"audio_tokens": audio_tokens}
    return Reply(body={"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}], "usage": usage})


def labels_json(content="1", voice_quality="both_good", paralinguistics="2", reasoning="ok") -> str:
    return json.dumps(
        {"reasoning": reasoning, "content": content, "voice_quality": voice_quality, "paralinguistics": paralinguistics}
    )


Responder = Callable[[int, dict, dict], Reply]


class ChatServer:
    """ThreadingHTTPServer on 127.0.0.1, port 0, serving POST <base>/chat/completions in a thread."""

    def __init__(self, responder: Responder):
        self.responder = responder
        self.requests: list[tuple[dict, dict]] = []  # (headers, body)
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                return None

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with server._lock:
                    index = len(server.requests)
                    server.requests.append((headers, body))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if self.path != "/v1/chat/completions":
                        reply = Reply(404, {"error": f"no route {self.path}"})
                    else:
                        reply = server.responder(index, body, headers)
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                    data = reply.body if isinstance(reply.body, (str, bytes)) else json.dumps(reply.body)
                    data = data.encode() if isinstance(data, str) else data
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)
                finally:
                    with server._lock:
                        server.in_flight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
