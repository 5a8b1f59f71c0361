"""A fake audio-LLM arena judge on 127.0.0.1 for the arena judge tests: a real HTTP chat server
(tests/judge_server.ChatServer) whose verdicts depend on the request.

It labels every input_audio part by the text before it (the bundled prompt's "First answer",
"Second answer", or the request) and measures each answer clip's RMS loudness. Policies:
- "loud": the louder answer wins ("First" / "Second"); "Tie" when within 5 % and ties are allowed;
- "first": always "First" — a pure position bias;
- "chatty": the loud judge's verdict inside markdown and explanations;
- "malformed": a reply no parser accepts.
"""

from __future__ import annotations

import base64
import io
import re
import threading

import numpy as np
import soundfile as sf
from judge_server import ChatServer, Reply, audio_parts, completion

TIE_RATIO = 1.05


def rms(wav_b64: str) -> float:
    """The RMS level of a base64 WAV clip."""
    samples, _ = sf.read(io.BytesIO(base64.b64decode(wav_b64)), dtype="float32")
    return float(np.sqrt(np.mean(np.square(samples))))


def labelled_clips(body: dict) -> tuple[str, list[tuple[str, float]]]:
    """(all text of the user message, [(label, rms)]) in order: "first", "second" or "question"."""
    text, parts = audio_parts(body)
    clips = []
    for before, part in parts:
        found = re.findall(r"(First|Second) answer", before)
        clips.append((found[-1].lower() if found else "question", rms(part["input_audio"]["data"])))
    return text, clips


def loud_answer(text: str, clips: list[tuple[str, float]]) -> str:
    levels = dict(clips)
    first, second = levels["first"], levels["second"]
    if "Tie" in text and max(first, second) / min(first, second) < TIE_RATIO:
        return "Tie"
    return "First" if first > second else "Second"


def answer(policy: str, body: dict) -> str:
    text, clips = labelled_clips(body)
    if policy == "malformed":
        return "I am unable to compare these recordings."
    if policy == "first":
        return "First"
    verdict = loud_answer(text, clips)
    if policy == "chatty":
        return f"After listening to both:\n\n**Verdict:** {verdict} answer\n\nLoudness and clarity decided it."
    return verdict


class ArenaJudgeServer(ChatServer):
    """A ChatServer answering with `policy`; `labels` records each request's clip labels in order."""

    def __init__(self, policy: str = "loud"):
        self.policy, self.labels = policy, []
        self._labels_lock = threading.Lock()

        def respond(index: int, body: dict, headers: dict) -> Reply:
            _, clips = labelled_clips(body)
            with self._labels_lock:
                self.labels.append([label for label, _ in clips])
            return completion(answer(self.policy, body), prompt_tokens=600, completion_tokens=2, audio_tokens=500)

        super().__init__(respond)
