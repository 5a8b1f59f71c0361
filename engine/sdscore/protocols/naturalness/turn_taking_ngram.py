"""The model-free turn-taking baseline: an n-gram model of the joint two-speaker voice-activity state,
fitted on the human dialogues of the corpus being scored, and per answer the mean surprisal of the
answer window's states given everything before them.

- States (dialogue_activity.py): one a frame at FRAME_HZ, 0 both silent, 1 asker only, 2 answerer
  only, 3 both, from the protocol's own VAD segments (silero, as latency uses them).
- Fit: the question clips are the corpus's human two-speaker dialogue (context + question, both
  channels); each distinct clip (question_key) once, its states counted as ORDER-grams (the ORDER - 1
  states before a frame, states before the clip's start taken as silence, and the frame's state).
- Probabilities with add-k smoothing: P(s | h) = (c(h, s) + ADD_K) / (c(h) + 4 x ADD_K).
- Leave one conversation out: an answer is scored by the counts of every other conversation's clips
  (the total minus its own conversation's), so a human answer, which a later dialogue's context may
  hold, is never scored by a model fitted on it; a row without conversation_id is its own
  conversation (its question_key).
- Score (``turn_taking_ngram``): the mean over the answer window's frames of -ln P(state | the
  ORDER - 1 states before it) on the reconstructed dialogue (the question clip with this answer in
  the answerer's place) — nats per frame; lower is more typical of the corpus's turn-taking.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from sdscore.protocols.naturalness.dialogue_activity import (
    N_STATES,
    dialogue_frames,
    pairs,
    question_frames,
)

FRAME_HZ = 10.0
ORDER = 5
ADD_K = 0.5
#: the results columns the baseline reads
ACTIVITY_COLUMNS = ("question_duration_s", "question_va_asker", "question_va_answerer", "answer_va",
                    "answer_offset_s")
NOTE = "turn-taking"
#: the largest |duration or offset| in seconds a results row may give (a day: the frames of a larger one
#: would not fit in memory)
MAX_SECONDS = 86400.0


def histories(states: np.ndarray, order: int) -> np.ndarray:
    """Per frame, the code of the order - 1 states before it (base 4, the nearest last; silence before
    the start)."""
    states = np.asarray(states, dtype=np.int64)
    code = np.zeros(len(states), dtype=np.int64)
    for lag in range(order - 1, 0, -1):
        previous = np.zeros(len(states), dtype=np.int64)
        if lag < len(states):
            previous[lag:] = states[:-lag]
        code = code * N_STATES + previous
    return code


def counts(states: np.ndarray, order: int) -> np.ndarray:
    """[history code, state] counts of one state sequence."""
    table = np.zeros((N_STATES ** (order - 1), N_STATES), dtype=np.int64)
    states = np.asarray(states, dtype=np.int64)
    np.add.at(table, (histories(states, order), states), 1)
    return table


@dataclass(frozen=True)
class Scored:
    """One answer's surprisal (nats per frame) or why it has none."""

    value: float | None
    reason: str | None = None


class NgramModel:
    """Counts per conversation; ``score`` leaves the answer's own conversation out."""

    def __init__(self, order: int = ORDER, k: float = ADD_K):
        if order < 1 or k <= 0:
            raise ValueError(f"an n-gram needs order >= 1 and k > 0, got order {order}, k {k}")
        self.order, self.k = order, k
        self.by_conversation: dict[str, np.ndarray] = {}
        self.total = np.zeros((N_STATES ** (order - 1), N_STATES), dtype=np.int64)

    def add(self, conversation: str, states: np.ndarray) -> None:
        table = counts(states, self.order)
        self.by_conversation[conversation] = self.by_conversation.get(conversation, 0) + table
        self.total += table

    def score(self, states: np.ndarray, window: tuple[int, int], conversation: str | None) -> Scored:
        """Mean -ln P over the window's frames, by the counts of every other conversation."""
        table = self.total - self.by_conversation.get(conversation, 0)
        if table.sum() == 0:
            return Scored(None, "no question clip of another conversation to fit the n-gram on")
        start, end = window
        if end <= start:
            return Scored(None, "the answer window holds no frame")
        states = np.asarray(states, dtype=np.int64)
        h = histories(states, self.order)[start:end]
        s = states[start:end]
        p = (table[h, s] + self.k) / (table[h].sum(axis=1) + N_STATES * self.k)
        return Scored(float(-np.log(p).mean()))

    def scores(self, items: Iterable[tuple[np.ndarray, tuple[int, int], str | None]]) -> list[Scored]:
        """score() of many (states, window, conversation) at once."""
        return [self.score(*item) for item in items]


def _conversation(row: dict) -> str:
    return row.get("conversation_id") if row.get("conversation_id") is not None else f"key:{row.get('question_key')}"


def _has_activity(row: dict) -> bool:
    return all(row.get(c) is not None for c in ACTIVITY_COLUMNS) and row.get("answer_duration_s") is not None


def _row_frames(row: dict, fps: float):
    return dialogue_frames(row["question_va_asker"], row["question_va_answerer"], row["answer_va"],
                           question_duration_s=row["question_duration_s"], answer_offset_s=row["answer_offset_s"],
                           answer_duration_s=row["answer_duration_s"], fps=fps)


def fit(rows: Sequence[dict], *, fps: float = FRAME_HZ, order: int = ORDER, k: float = ADD_K) -> NgramModel:
    """The n-gram of the distinct question clips among `rows` (rows without an error and with activity)."""
    model = NgramModel(order, k)
    seen: set[str] = set()
    for row in rows:
        key = row.get("question_key")
        if row.get("error") is not None or not _has_activity(row) or key is None or key in seen:
            continue
        seen.add(key)
        model.add(_conversation(row), question_frames(row["question_va_asker"], row["question_va_answerer"],
                                                      row["question_duration_s"], fps))
    return model


def _checked(row: dict) -> dict:
    """The row with its activity checked (ValueError naming the row for malformed segments)."""
    for column in ("question_va_asker", "question_va_answerer", "answer_va"):
        try:
            pairs(row[column])
        except ValueError as error:
            raise ValueError(f"results row {row.get('item_id')!r}: {column}: {error}") from None
    for column in ("question_duration_s", "answer_offset_s", "answer_duration_s"):
        if not math.isfinite(row[column]):
            raise ValueError(f"results row {row.get('item_id')!r}: {column} is not finite ({row[column]})")
        if abs(row[column]) > MAX_SECONDS:  # its frames would not fit in memory
            raise ValueError(f"results row {row.get('item_id')!r}: {column} {row[column]:g} s is beyond "
                             f"{MAX_SECONDS:g} s (a day); not a clip's time")
    return row


def with_ngram_scores(frame: pl.DataFrame, absent: set[str], *, fps: float = FRAME_HZ, order: int = ORDER,
                      k: float = ADD_K) -> pl.DataFrame:
    """`frame` (typed results, every system) with ``turn_taking_ngram`` per scored row; a scored row
    left null gets a "turn-taking: why" note in ``unavailable`` (the scorer's note when the row has no
    activity columns). ValueError naming the row for malformed activity columns."""
    rows = frame.to_dicts()
    missing = [c for c in ACTIVITY_COLUMNS if c in absent]
    values: list[float | None] = [None] * len(rows)
    notes: list[str | None] = [row.get("unavailable") for row in rows]
    if missing:
        why = (f"{NOTE}: the results lack {', '.join(missing)} (scored before sdscore kept the voice activity: "
               "score them again)")
        notes = [n if row.get("error") is not None else "; ".join(filter(None, [n, why]))
                 for n, row in zip(notes, rows)]
    else:
        usable = [_checked(row) if row.get("error") is None and _has_activity(row) else None for row in rows]
        model = fit([row for row in usable if row is not None], fps=fps, order=order, k=k)
        for i, row in enumerate(usable):
            if row is None:
                continue
            built = _row_frames(row, fps)
            scored = model.score(built.states, built.window, _conversation(row))
            values[i] = scored.value
            if scored.reason:
                notes[i] = "; ".join(filter(None, [notes[i], f"{NOTE}: {scored.reason}"]))
    return frame.with_columns(pl.Series("turn_taking_ngram", values, dtype=pl.Float64),
                              pl.Series("unavailable", notes, dtype=pl.String))


DEFINITION = (f"turn_taking_ngram: nats per frame ({FRAME_HZ:g} Hz frames), the mean surprisal -ln P(state | the "
              f"{ORDER - 1} states before) over the answer window of the joint asker/answerer voice-activity state "
              f"(silero VAD) of the question clip with the answer in the answerer's place; a {ORDER}-gram with "
              f"add-{ADD_K:g} smoothing fitted on the corpus's question clips (human two-channel dialogue), leaving "
              "out the answer's own conversation; lower is more typical")
