"""SPEARBench's turn and dialogue rules on timed utterances: pure functions, no audio, no I/O.

Turns (SPEARBench III.A, made exact; utterances of one conversation, ordered by start, end, row):

1. Holds: per speaker, the utterances lasting at least ``backchannel_max``, merged while the
   silence from one's end to the next one's start is shorter than ``max_turn_gap``.
2. Backchannels: utterances shorter than ``backchannel_max`` that lie wholly inside a hold of the
   other speaker (start and end within it). They belong to no turn and are no context segment.
3. Turns: every other utterance joins the current turn iff it is by the same speaker and starts
   less than ``max_turn_gap`` after the turn's latest end; otherwise it opens a new turn. So a
   longer utterance of the other speaker ends a turn, and so does a silence of ``max_turn_gap`` or
   more (which leaves two consecutive turns by one speaker).

Dialogues: turn j is a question iff its text (its utterances' texts joined by spaces, stripped)
ends with '?', j >= 1 (some context), and turn j+1 is by the other speaker and lasts at least
``min_answer_seconds`` (its first start to its latest end). The context is the last
``max_context_segments`` utterances of turns 0..j-1. Times are compared within 1 ns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sdscore.errors import ManifestError

#: Durations and gaps are compared to the settings within this many seconds (float rounding:
#: 4.6 - 3.6 is 0.9999999999999996, and that answer lasts 1.0 s).
_EPS = 1e-9


@dataclass(frozen=True)
class Segment:
    """One utterance of a segments table; ``label`` names its table row in messages."""

    conversation_id: str
    speaker: str
    start: float
    end: float
    text: str = ""
    audio_path: str = ""
    channel: int | None = None
    label: str = ""

    @property
    def duration(self) -> float:
        return self.end - self.start

    def where(self) -> str:
        """The row label, or the segment's speaker and times for hand-built segments."""
        return self.label or f"segment {self.speaker!r} {self.start:g}-{self.end:g} s"


@dataclass(frozen=True)
class Turn:
    """One speaker's consecutive utterances, with the other speaker's backchannels inside them."""

    speaker: str
    segments: tuple[Segment, ...]
    backchannels: tuple[Segment, ...] = ()

    @property
    def start(self) -> float:
        return self.segments[0].start

    @property
    def end(self) -> float:
        return max(s.end for s in self.segments)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.segments if s.text.strip())


@dataclass(frozen=True)
class Dialogue:
    """A valid dialogue: context segments, the question turn (index ``question_turn``), the answer."""

    conversation_id: str
    question_turn: int
    context: tuple[Segment, ...]
    question: Turn
    answer: Turn

    @property
    def item_id(self) -> str:
        return f"{self.conversation_id}-q{self.question_turn:03d}"

    @property
    def context_start(self) -> float:
        return min(s.start for s in self.context)

    @property
    def context_end(self) -> float:
        return max(s.end for s in self.context)


def merge_turns(segments: Sequence[Segment], *, max_turn_gap: float = 0.5, backchannel_max: float = 0.5) -> list[Turn]:
    """Turns of one conversation's utterances by the module's turn rule; ManifestError if the
    conversation has more than two speakers (naming the third speaker's first row)."""
    ordered = sorted(segments, key=lambda s: (s.start, s.end))
    speakers: list[str] = []
    for s in ordered:
        if s.speaker not in speakers:
            if len(speakers) == 2:
                raise ManifestError(
                    f"{s.where()}: third speaker {s.speaker!r} in conversation {s.conversation_id!r} (after "
                    f"{speakers[0]!r}, {speakers[1]!r}); only two-speaker conversations are selected"
                )
            speakers.append(s.speaker)
    holds = {speaker: _holds([s for s in ordered if s.speaker == speaker], max_turn_gap, backchannel_max)
             for speaker in speakers}

    def is_backchannel(s: Segment) -> bool:
        others = [h for speaker, spans in holds.items() if speaker != s.speaker for h in spans]
        return s.duration < backchannel_max - _EPS and any(a <= s.start and s.end <= b for a, b in others)

    turns: list[Turn] = []
    backchannels: list[Segment] = []
    for s in ordered:
        if is_backchannel(s):
            backchannels.append(s)
        elif turns and s.speaker == turns[-1].speaker and s.start - turns[-1].end < max_turn_gap - _EPS:
            turns[-1] = Turn(s.speaker, (*turns[-1].segments, s))
        else:
            turns.append(Turn(s.speaker, (s,)))
    for b in backchannels:  # to the latest turn of the other speaker that starts before it
        k = max((i for i, t in enumerate(turns) if t.speaker != b.speaker and t.start <= b.start), default=None)
        if k is not None:
            turns[k] = Turn(turns[k].speaker, turns[k].segments, (*turns[k].backchannels, b))
    return turns


def _holds(own: list[Segment], max_turn_gap: float, backchannel_max: float) -> list[tuple[float, float]]:
    """(start, end) spans of one speaker's utterances >= backchannel_max, merged over short silences."""
    spans: list[list[float]] = []
    for s in own:
        if s.duration < backchannel_max - _EPS:
            continue
        if spans and s.start - spans[-1][1] < max_turn_gap - _EPS:
            spans[-1][1] = max(spans[-1][1], s.end)
        else:
            spans.append([s.start, s.end])
    return [(a, b) for a, b in spans]


def find_dialogues(
    turns: Sequence[Turn], *, max_context_segments: int = 5, min_answer_seconds: float = 1.0
) -> list[Dialogue]:
    """Every valid dialogue of one conversation's turns (module docstring), in turn order."""
    found = []
    for j in range(1, len(turns) - 1):
        question, answer = turns[j], turns[j + 1]
        if not question.text.strip().endswith("?") or answer.speaker == question.speaker:
            continue
        if answer.duration < min_answer_seconds - _EPS:
            continue
        context = tuple(s for t in turns[:j] for s in t.segments)[-max_context_segments:]
        found.append(Dialogue(question.segments[0].conversation_id, j, context, question, answer))
    return found
