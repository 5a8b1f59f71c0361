"""A fake audio-LLM (LALM) judge on 127.0.0.1 for the consistency tests: a real HTTP chat server
(tests/judge_server.ChatServer) whose answers depend on the request.

It reads the prompt family from the request's text (our bundled prompts' wording), labels every
input_audio part by the text before it ("Turn 3", "Option B", or the reference), decodes each clip
and measures its pitch (the tests' "speakers" are sine tones). Policies:
- "tone": answers as a judge that hears pitch: same speaker iff pitches are within 10 %;
- "first": always picks the first option shown (ranking: the order shown) — a pure position bias;
- "last": always the last option;
- "canned": fixed answers per family (YES, "Turn 2", "B", "B > A > C");
- "malformed": a reply no parser accepts;
- "chatty": the tone judge's answer wrapped in markdown and explanations.
delay_s makes every answer slow (deadline tests).
"""

from __future__ import annotations

import base64
import io
import re
import threading

import numpy as np
import soundfile as sf

from judge_server import ChatServer, Reply, audio_parts, completion

SAME_RATIO = 1.1
_LABEL = re.compile(r"Turn (\d+)|Option ([A-Z])|(sample of|anchor)")


def family_of(text: str) -> str:
    """The prompt family of a request, from the bundled prompts' wording."""
    if "second clip" in text:
        return "per_turn"
    if "several recordings" in text:
        return "per_turn_ranking" if "joined by" in text else "per_turn_discrimination"
    if "left out" in text:
        return "ranking" if "joined by" in text else "discrimination"
    if "turn numbers only" in text:
        return "localization"
    if "YES or NO" in text:
        return "detection"
    return "unknown"


def pitch_hz(wav_b64: str) -> float:
    """The dominant frequency of a base64 WAV clip."""
    samples, rate = sf.read(io.BytesIO(base64.b64decode(wav_b64)), dtype="float32")
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.fft.rfftfreq(samples.size, 1 / rate)[int(np.argmax(spectrum))])


def labelled_clips(body: dict) -> tuple[str, list[tuple[str, float, dict]]]:
    """(all text of the user message, [(label, pitch, audio part)]) in order: label "turn N", "option X"
    or "reference" from the last label in the text before the clip."""
    text, parts = audio_parts(body)
    clips = []
    for before, part in parts:
        matches = list(_LABEL.finditer(before))
        last = matches[-1] if matches else None
        if last is None or last.group(3):
            label = "reference"
        elif last.group(1):
            label = f"turn {last.group(1)}"
        else:
            label = f"option {last.group(2)}"
        clips.append((label, pitch_hz(part["input_audio"]["data"]), part))
    return text, clips


def _same(a: float, b: float) -> bool:
    return max(a, b) / min(a, b) < SAME_RATIO


def tone_answer(family: str, clips: list[tuple[str, float, dict]]) -> str:
    """What a judge that hears pitch answers."""
    reference = [hz for label, hz, _ in clips if label == "reference"]
    turns = [(int(label.split()[1]), hz) for label, hz, _ in clips if label.startswith("turn")]
    options = [(label.split()[1], hz) for label, hz, _ in clips if label.startswith("option")]
    anchor = reference[0] if reference else float(np.median([hz for _, hz in turns]))
    if family == "per_turn":
        return "YES" if _same(anchor, clips[-1][1]) else "NO"
    if family == "detection":
        return "YES" if all(_same(anchor, hz) for _, hz in turns) else "NO"
    if family == "localization":
        odd = [n for n, hz in turns if not _same(anchor, hz)]
        return ", ".join(f"Turn {n}" for n in odd) if odd else "None"
    by_distance = sorted(options, key=lambda o: abs(np.log(o[1] / anchor)))
    if family.endswith("ranking"):
        return " > ".join(letter for letter, _ in by_distance)
    return by_distance[0][0]


CANNED = {"detection": "YES", "per_turn": "YES", "localization": "Turn 2", "discrimination": "B",
          "per_turn_discrimination": "B", "ranking": "B > A > C", "per_turn_ranking": "B > A > C"}


def answer(policy: str, body: dict) -> str:
    text, clips = labelled_clips(body)
    family = family_of(text)
    options = [label.split()[1] for label, _, _ in clips if label.startswith("option")]
    if policy == "malformed":
        return "I am unable to judge these recordings."
    if policy == "canned":
        return CANNED[family]
    if policy in ("first", "last") and options:
        shown = options if policy == "first" else options[::-1]
        return " > ".join(shown) if family.endswith("ranking") else shown[0]
    reply = tone_answer(family, clips)
    if policy == "chatty":
        return f"After listening carefully:\n\n**Answer:** {reply}\n\nThe timbre was the deciding cue."
    return reply


class LalmServer(ChatServer):
    """A ChatServer answering with `policy`; `families` records each request's prompt family."""

    def __init__(self, policy: str = "tone", delay_s: float = 0.0):
        self.policy, self.families = policy, []
        self._families_lock = threading.Lock()

        def respond(index: int, body: dict, headers: dict) -> Reply:
            text, _ = labelled_clips(body)
            with self._families_lock:
                self.families.append(family_of(text))
            reply = completion(answer(self.policy, body), prompt_tokens=500, completion_tokens=3, audio_tokens=400)
            reply.delay_s = delay_s
            return reply

        super().__init__(respond)
