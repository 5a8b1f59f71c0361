"""The two-speaker voice activity of a reconstructed dialogue: the question clip's two channels with
the answer put in the answerer's place, as frames of joint states.

The Scorer keeps, per answer, the VAD segments the protocol already computes (silero, as latency
uses them: seconds, 30 ms speech pad): the question clip's per-channel segments in dyad order turned
into the asker's and the answerer's (``question_va_asker`` / ``question_va_answerer``, seconds on
the question clip), the answer clip's (``answer_va``, seconds on the answer clip) and where the
answer clip starts on the question clip's timeline (``answer_offset_s`` = question_end_time +
answer_start_time; negative answer_start_time: it overlaps the question). Segments are stored flat,
[start0, end0, start1, end1, ...].

The dialogue as heard with this answer: the asker's channel is the question clip's asker channel
(silent after it); the answerer's channel is the question clip's answerer channel before the answer
starts, then the answer clip's activity from answer_offset_s. Frames at ``fps``: frame i is active
where a segment covers it, from round(start x fps) to round(end x fps) (exclusive), as VAP's
vad_list_to_onehot. The joint state of a frame: 0 both silent, 1 asker only, 2 answerer only,
3 both. The answer window: frames round(offset x fps) to round((offset + answer duration) x fps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: joint states: asker + 2 x answerer
N_STATES = 4


def flat(segments: list | None) -> list[float] | None:
    """[[s, e], ...] → [s, e, ...] (None stays None)."""
    if segments is None:
        return None
    return [float(v) for pair in segments for v in pair]


def pairs(values: list | None) -> list[tuple[float, float]]:
    """[s, e, ...] → [(s, e), ...]; ValueError for an odd count or a non-finite bound."""
    values = [] if values is None else list(values)
    if len(values) % 2:
        raise ValueError(f"voice-activity segments hold an odd number of bounds ({len(values)})")
    out = [(float(values[i]), float(values[i + 1])) for i in range(0, len(values), 2)]
    if not all(math.isfinite(s) and math.isfinite(e) for s, e in out):
        raise ValueError("voice-activity segments hold a non-finite bound")
    return out


def frames(segments: list[tuple[float, float]], n_frames: int, fps: float, shift: float = 0.0) -> np.ndarray:
    """A bool activity track of n_frames frames: segment (s, e) + shift covers frames round((s + shift)
    x fps) to round((e + shift) x fps), exclusive, clipped to the track."""
    track = np.zeros(n_frames, dtype=bool)
    for start, end in segments:
        a = max(0, int(round((start + shift) * fps)))
        b = min(n_frames, int(round((end + shift) * fps)))
        if b > a:
            track[a:b] = True
    return track


@dataclass(frozen=True)
class DialogueFrames:
    """asker and answerer activity tracks (bool, one value a frame) and the answer window [start, end)."""

    asker: np.ndarray
    answerer: np.ndarray
    window: tuple[int, int]

    @property
    def states(self) -> np.ndarray:
        """Joint states, int64: asker + 2 x answerer."""
        return self.asker.astype(np.int64) + 2 * self.answerer.astype(np.int64)


def question_frames(asker: list, answerer: list, duration_s: float, fps: float) -> np.ndarray:
    """The question clip's own joint states (human dialogue: context + question), one a frame."""
    n = max(0, int(round(duration_s * fps)))
    return frames(pairs(asker), n, fps).astype(np.int64) + 2 * frames(pairs(answerer), n, fps).astype(np.int64)


def dialogue_frames(asker: list, answerer: list, answer: list, *, question_duration_s: float,
                    answer_offset_s: float, answer_duration_s: float, fps: float) -> DialogueFrames:
    """The reconstructed dialogue's activity (see the module's text); a timeline that would start
    before the question clip (an answer offset below 0) starts at the answer instead."""
    origin = min(0.0, answer_offset_s)
    offset = answer_offset_s - origin
    end = max(question_duration_s - origin, offset + answer_duration_s)
    n = max(0, int(round(end * fps)))
    before = [(s, min(e, answer_offset_s)) for s, e in pairs(answerer) if s < answer_offset_s]
    asker_track = frames(pairs(asker), n, fps, -origin)
    answerer_track = frames(before, n, fps, -origin) | frames(pairs(answer), n, fps, offset)
    window = (int(round(offset * fps)), min(n, int(round((offset + answer_duration_s) * fps))))
    return DialogueFrames(asker_track, answerer_track, window)


def activity_columns(r: dict, a: dict, q: dict | None, asker_channel: int | None) -> tuple[dict[str, Any], str | None]:
    """The results columns of one answer's voice activity, or ({}, why there are none): a question
    clip with one channel per speaker (stereo, the authors' "spk1|spk2" dyad naming the asker) is
    needed to tell the two speakers apart."""
    if q is None:
        return {}, "no question clip (audio_path)"
    channels = q.get("vad_channels")
    if not channels:
        return {}, "the question clip is not stereo (one channel per speaker is needed)"
    if asker_channel is None:
        return {}, ("the asker's channel is unknown (speakers must be the dyad \"spk1|spk2\" with the asker's tag "
                    "last in transcript_question)")
    question_end = r.get("question_end_time")
    if question_end is None or not math.isfinite(question_end):
        question_end = q["duration_s"]
    start = r.get("answer_start_time")
    if start is None or not math.isfinite(start):
        return {}, "no answer_start_time"
    return {
        "question_duration_s": float(q["duration_s"]),
        "question_va_asker": flat(channels[asker_channel]),
        "question_va_answerer": flat(channels[1 - asker_channel]),
        "answer_va": flat(a.get("vad_segments") or []),
        "answer_offset_s": float(question_end) + float(start),
    }, None
