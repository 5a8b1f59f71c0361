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
    """What the server answers: status, a JSON-able body, raw text or a list of byte chunks (sent in
    turn, so a huge body can repeat one chunk), headers, and a delay first. trickle_s sends the answer
    one byte at a time, this far apart (from the status line on, or only the body when trickle_body);
    tick, a function, trickles it too and is called before each trickled byte (a test moves its clock
    there, so the trickle runs on the test's time, not wall time). content_length=False leaves out
    Content-Length (the body ends when the connection closes). stall, an Event, sends the answer's
    first byte (a trickled answer: its first stall_after trickled bytes) and then waits for the event
    before the rest (a server that stalls mid-answer until the test lets it go: no race on wall time)."""

    status: int = 200
    body: object = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    trickle_s: float = 0.0
    trickle_body: bool = False
    content_length: bool = True
    stall: threading.Event | None = None
    stall_after: int = 1
    tick: Callable[[], None] | None = None


def completion(content: str, prompt_tokens: int = 100, completion_tokens: int = 20, audio_tokens: int = 0) -> Reply:
    """A 200 chat-completions answer whose message content is `content`."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    if audio_tokens:
        usage["prompt_tokens_details"] = {"audio_tokens": audio_tokens}
    return Reply(body={"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}], "usage": usage})


def audio_parts(body: dict) -> tuple[str, list[tuple[str, dict]]]:
    """(all text of the request's user message, [(the text just before the clip, the audio part)]) in
    order: how the fake judges find which clip is which (each labels it from that text)."""
    content = body["messages"][-1]["content"]
    text, clips, before = "", [], ""
    for part in content if isinstance(content, list) else [{"type": "text", "text": content}]:
        if part["type"] == "text":
            text += part["text"] + "\n"
            before = part["text"]
            continue
        clips.append((before, part))
        before = ""
    return text, clips


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
                    self._answer(reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, reply: Reply) -> None:
                if isinstance(reply.body, list):
                    chunks = reply.body
                else:
                    data = reply.body if isinstance(reply.body, (str, bytes)) else json.dumps(reply.body)
                    chunks = [data.encode() if isinstance(data, str) else data]
                headers = {"Content-Type": "application/json", **reply.headers}
                if reply.content_length:
                    headers["Content-Length"] = str(sum(len(chunk) for chunk in chunks))
                head = f"HTTP/1.0 {reply.status} {self.responses.get(reply.status, ('',))[0]}\r\n"
                head += "".join(f"{key}: {value}\r\n" for key, value in headers.items()) + "\r\n"
                if not reply.trickle_s and reply.tick is None:
                    if reply.stall is not None:
                        self.wfile.write(head[:1].encode())
                        reply.stall.wait(60)  # never holds a thread past the test
                        head = head[1:]
                    self.wfile.write(head.encode())
                    for chunk in chunks:
                        self.wfile.write(chunk)
                    return
                if reply.trickle_body:
                    self.wfile.write(head.encode())
                else:
                    chunks = [head.encode(), *chunks]
                sent = 0
                for chunk in chunks:
                    for i in range(len(chunk)):
                        if reply.stall is not None and sent == reply.stall_after:
                            reply.stall.wait(60)  # never holds a thread past the test
                        if reply.tick is not None:
                            reply.tick()
                        self.wfile.write(chunk[i : i + 1])
                        sent += 1
                        time.sleep(reply.trickle_s)

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
