"""Latency and interruption of one answer from VAD segments (definitions in results.py).

Pure functions of the segments silero's get_speech_timestamps gives (seconds, 30 ms speech pad
included, as the authors' call has it), the question clip's duration and the manifest's
answer_start_time (the answer file's start relative to the end of the question input).
"""

from __future__ import annotations

import math


def onset_latency_ms(answer_segments: list | None) -> float:
    """1000 × the first speech onset in the answer clip; 0 when it has none (the authors' code)."""
    return 1000.0 * float(answer_segments[0][0]) if answer_segments else 0.0


def leading_silence(segments: list | None) -> float | None:
    """Seconds before the first speech segment (None without speech)."""
    return float(segments[0][0]) if segments else None


def trailing_silence(segments: list | None, duration: float) -> float | None:
    """Seconds after the last speech segment's end (None without speech)."""
    return max(0.0, duration - float(segments[-1][1])) if segments else None


def _speech_gap_ms(question_trailing: float | None, answer_leading: float | None,
                   answer_start_time: float | None) -> float | None:
    if question_trailing is None or answer_leading is None or answer_start_time is None:
        return None
    if not math.isfinite(answer_start_time):
        return None
    return 1000.0 * (question_trailing + answer_leading + answer_start_time)


def released_latency_ms(question_trailing: float | None, answer_leading: float | None,
                        answer_start_time: float | None) -> float | None:
    """The authors' newest definition: 1000 × (question trailing silence + answer leading silence +
    max(answer_start_time, 0)) — an answer file that starts before the question ends counts from the
    question's end. None when a clip has no speech or the start time is unknown."""
    start = None if answer_start_time is None else max(answer_start_time, 0.0)
    return _speech_gap_ms(question_trailing, answer_leading, start)


def paper_latency_ms(question_trailing: float | None, answer_leading: float | None,
                     answer_start_time: float | None) -> float | None:
    """The paper's: from the end of the question's speech to the start of the answer's, 1000 ×
    (question trailing silence + answer leading silence + answer_start_time); None for an interrupted
    answer (answer_start_time < 0: "not counted toward the latency"), a clip without speech or an
    unknown start time."""
    if answer_start_time is not None and answer_start_time < 0:
        return None
    return _speech_gap_ms(question_trailing, answer_leading, answer_start_time)


def interruption(answer_start_time: float | None) -> tuple[bool | None, float | None]:
    """(interrupted, interrupted_ms): the answer file starts before the question input ends."""
    if answer_start_time is None or not math.isfinite(answer_start_time):
        return None, None
    if answer_start_time < 0:
        return True, -1000.0 * answer_start_time
    return False, 0.0
