"""A fake pairwise audio-LLM judge on 127.0.0.1 for the reward judge tests (tests/judge_server.ChatServer).

It labels every input_audio part by the text before it ("Dialogue 2, turn 3 (assistant)"), decodes
each clip, and answers which dialogue is better by a measurable rule. Policies:
- "louder": the dialogue whose clips have the larger mean RMS, answered "Dialogue N";
- "longer": the dialogue with more audio seconds, answered as a bare number;
- "first": always "1" — a pure position bias;
- "chatty": the louder rule wrapped in markdown and explanations;
- "malformed": a reply no parser accepts (a tie);
- "mixed": "louder", except that requests whose dialogue 1 has a clip of `malformed_hz` get "malformed".
"""

from __future__ import annotations

import base64
import io
import re
import threading

import numpy as np
import soundfile as sf

from judge_server import ChatServer, Reply, audio_parts, completion

_LABEL = re.compile(r"Dialogue (\d+), turn (\d+) \((\w+)\)")


def decode(wav_b64: str) -> tuple[np.ndarray, int]:
    samples, rate = sf.read(io.BytesIO(base64.b64decode(wav_b64)), dtype="float32")
    return samples, rate


def labelled_clips(body: dict) -> tuple[str, list[dict]]:
    """(the user message's text, [{dialogue, turn, role, rms, seconds, hz}]) in order."""
    text, parts = audio_parts(body)
    clips = []
    for before, part in parts:
        label = list(_LABEL.finditer(before))[-1]
        samples, rate = decode(part["input_audio"]["data"])
        spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
        clips.append({"dialogue": int(label.group(1)), "turn": int(label.group(2)), "role": label.group(3),
                      "rms": float(np.sqrt(np.mean(samples**2))), "seconds": samples.size / rate,
                      "hz": float(np.fft.rfftfreq(samples.size, 1 / rate)[int(np.argmax(spectrum))])})
    return text, clips


def answer(policy: str, body: dict, malformed_hz: float | None = None) -> str:
    _, clips = labelled_clips(body)
    if policy == "first":
        return "1"
    if policy == "malformed":
        return "Both dialogues sound equally natural to me."
    if policy == "mixed" and any(c["dialogue"] == 1 and abs(c["hz"] - malformed_hz) < 5 for c in clips):
        return "I cannot decide between them."
    by = "seconds" if policy == "longer" else "rms"
    totals = {n: [c[by] for c in clips if c["dialogue"] == n] for n in (1, 2)}
    score = {n: (sum(v) if by == "seconds" else float(np.mean(v))) for n, v in totals.items()}
    better = 1 if score[1] > score[2] else 2
    if policy == "longer":
        return str(better)
    if policy == "chatty":
        return f"After listening to both:\n\n**Verdict:** Dialogue {better}\n\nIt is clearly the more lively one."
    return f"Dialogue {better}"


class RewardJudgeServer(ChatServer):
    """A ChatServer answering pair requests with `policy`; `texts` keeps each request's user text."""

    def __init__(self, policy: str = "louder", malformed_hz: float | None = None):
        self.policy, self.texts = policy, []
        self._lock_texts = threading.Lock()

        def respond(index: int, body: dict, headers: dict) -> Reply:
            text, _ = labelled_clips(body)
            with self._lock_texts:
                self.texts.append(text)
            return completion(answer(self.policy, body, malformed_hz), prompt_tokens=900, completion_tokens=3,
                              audio_tokens=800)

        super().__init__(respond)
