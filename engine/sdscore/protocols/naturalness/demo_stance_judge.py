"""A FAKE stance judge for `sdscore demo`: an OpenAI-compatible chat server on 127.0.0.1, in this
process, that answers the stance prompt from the clips' loudness — not a stance model.

The demo has no audio LLM, so its stance section runs the real client (requests, retries, reply
cache, cost) and the real parser against this server, and the report labels the ratings as a fake
judge's. Rule (deterministic, so the demo's numbers are reproducible): the question speaker is rated
polite and warm (+1) and neutral (0) elsewhere; the answer copies the question's ratings, except that
an answer at least 6 dB louder than the question is rated agitated and rude (-1 on calmness and
politeness) and one at least 10 dB quieter withdrawn and unsociable (-1 on focus and sociability).
The reply is fenced JSON, as chat models often send it.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import soundfile as sf

from sdscore.protocols.naturalness.stance_dimensions import NAMES

MODEL = "fake-stance-judge (clip loudness, not a model)"
LOUDER_DB, QUIETER_DB = 6.0, -10.0


def level_db(wav_b64: str) -> float:
    """RMS level in dBFS of a base64 WAV clip (-120 for silence)."""
    samples, _ = sf.read(io.BytesIO(base64.b64decode(wav_b64)), dtype="float32")
    rms = float(np.sqrt(np.mean(np.square(samples)))) if samples.size else 0.0
    return 20.0 * np.log10(max(rms, 1e-6))


def ratings(question_db: float, answer_db: float) -> dict[str, dict[str, int]]:
    """The fake judge's ratings of a question clip and an answer clip at these levels."""
    question = {name: 0 for name in NAMES} | {"politeness": 1, "warmth": 1}
    answer = dict(question)
    gap = answer_db - question_db
    if gap >= LOUDER_DB:
        answer.update(calmness=-1, politeness=-1)
    elif gap <= QUIETER_DB:
        answer.update(focus=-1, sociability=-1)
    return {"question": question, "answer": answer}


def reply_to(body: dict) -> str:
    """The fake judge's reply to a chat-completions request holding two input_audio parts."""
    content = body["messages"][-1]["content"]
    clips = [part["input_audio"]["data"] for part in content if part.get("type") == "input_audio"]
    if len(clips) != 2:
        return f"I was sent {len(clips)} recordings; the stance prompt sends two."
    return "```json\n" + json.dumps(ratings(level_db(clips[0]), level_db(clips[1]))) + "\n```"


class FakeStanceJudge:
    """The fake judge's server (a context manager): base_url for the stance judge's --base-url."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # the demo's output stays quiet
                return None

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": reply_to(body)}}],
                          "usage": {"prompt_tokens": 0, "completion_tokens": 0}}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="sdscore-fake-stance-judge",
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeStanceJudge:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
