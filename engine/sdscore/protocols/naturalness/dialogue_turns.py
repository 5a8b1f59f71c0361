"""SPEARBench's dialogue rules on timed utterances: pure functions, no audio, no I/O.

Two rules (``turn_rule``), both on one conversation's utterances ordered as the authors sort them
(start, end, speaker, text):

- ``"released"`` (the default): the authors' released selection (SPEAR-benchmark-code,
  bin/prepare_data_from_seamless.py, get_end_with_question, commit 08ddcbf5). It works on
  utterances, not merged turns. Utterance i is a question iff its text ends with '?' and utterance
  i+1 is by the other speaker. The answer is utterances i+1, i+2, ... up to the asker's next
  utterance, whatever its length (no backchannel exception; silences never end it). The context
  is the ``max_context_segments`` (4) utterances before the question, of either speaker (none when
  the question opens the conversation). The clip starts at the first context utterance's start (the
  question's without context) and ends at the latest end among context, question and answer; the
  answer lasts from its first start to that end and must last ``min_answer_seconds`` (1.0).
- ``"paper"``: SPEARBench III.A — a turn is one speaker's utterances until the other speaker
  takes the floor with an utterance longer than ``backchannel_max`` (0.5 s); silences never end a
  turn, so consecutive turns alternate speakers. The other speaker's utterances up to
  ``backchannel_max`` are backchannels (in no turn and no context) when they end inside the
  holder's speech so far or when the holder speaks again before the other speaker's next longer
  utterance; otherwise they open the other speaker's turn. A dialogue is K >= 3 consecutive turns
  whose second-to-last ends with '?': context (>= 1 turn; its last ``max_context_segments``
  utterances), question turn, answer turn (>= ``min_answer_seconds``, first start to latest end).

Dialogues of a conversation are numbered 0, 1, ... in order among the kept ones, and named as the
authors name them: ``<conversation>_<spk1>_<spk2>_<n>``, speakers in dyad order (the order their
first rows have in the table). The released rule compares the answer's duration exactly as the
authors' code does (an answer from 3.6 to 4.6 s lasts 0.9999999999999996 s there, and is dropped);
the paper rule within 1 ns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sdscore.errors import ManifestError

_EPS = 1e-9
RELEASED = "released"
PAPER = "paper"
TURN_RULES = (RELEASED, PAPER)
TurnRule = Literal["released", "paper"]


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
    """A valid dialogue: context utterances, the question, the answer, and the clip's bounds.

    ``start``: the clip's start (the first context utterance's, else the question's);
    ``answer_end``: the answer's end (released rule: the latest end of context, question and
    answer). ``speakers``: the conversation's speakers in dyad order; ``index``: its number among
    the conversation's kept dialogues."""

    conversation_id: str
    index: int
    speakers: tuple[str, str]
    context: tuple[Segment, ...]
    question: Turn
    answer: Turn
    start: float
    answer_end: float

    @property
    def item_id(self) -> str:
        """The authors' name: <conversation>_<spk1>_<spk2>_<n>."""
        return f"{self.conversation_id}_{self.speakers[0]}_{self.speakers[1]}_{self.index}"

    @property
    def asker(self) -> str:
        return self.question.speaker

    @property
    def answerer(self) -> str:
        return self.answer.speaker

    @property
    def context_end(self) -> float:
        """Where the context ends as metadata.csv's context_end_time has it: the question's start."""
        return self.question.start

    @property
    def answer_duration(self) -> float:
        return self.answer_end - self.answer.start


def speakers_of(segments: Sequence[Segment]) -> list[str]:
    """The conversation's speakers in the order of their first rows (its dyad order); ManifestError
    naming the third speaker's first row."""
    speakers: list[str] = []
    for s in segments:
        if s.speaker not in speakers:
            if len(speakers) == 2:
                raise ManifestError(
                    f"{s.where()}: third speaker {s.speaker!r} in conversation {s.conversation_id!r} (after "
                    f"{speakers[0]!r}, {speakers[1]!r}); only two-speaker conversations are selected"
                )
            speakers.append(s.speaker)
    return speakers


def authors_order(segments: Sequence[Segment]) -> list[Segment]:
    """The utterances sorted as the authors sort them: by (start, end, speaker, text)."""
    return sorted(segments, key=lambda s: (s.start, s.end, s.speaker, s.text))


def select_conversation(
    segments: Sequence[Segment], *, turn_rule: TurnRule = RELEASED, max_context_segments: int = 4,
    min_answer_seconds: float = 1.0, backchannel_max: float = 0.5,
) -> list[Dialogue]:
    """Every valid dialogue of one conversation's utterances under `turn_rule` (module docstring)."""
    if turn_rule not in TURN_RULES:
        raise ValueError(f"turn_rule must be one of {', '.join(TURN_RULES)}, got {turn_rule!r}")
    speakers = speakers_of(segments)
    if len(speakers) < 2:
        return []  # nobody to answer
    if turn_rule == RELEASED:
        return released_dialogues(segments, max_context_segments=max_context_segments,
                                  min_answer_seconds=min_answer_seconds)
    return find_dialogues(merge_turns(segments, backchannel_max=backchannel_max), (speakers[0], speakers[1]),
                          max_context_segments=max_context_segments, min_answer_seconds=min_answer_seconds)


def released_dialogues(
    segments: Sequence[Segment], *, max_context_segments: int = 4, min_answer_seconds: float = 1.0
) -> list[Dialogue]:
    """The released rule (module docstring) on one conversation's utterances (ManifestError for a
    third speaker)."""
    speakers = speakers_of(segments)
    if len(speakers) < 2:
        return []
    ordered = authors_order(segments)
    found: list[Dialogue] = []
    for i, question in enumerate(ordered[:-1]):
        if not question.text.strip().endswith("?") or ordered[i + 1].speaker == question.speaker:
            continue
        stop = i + 1
        while stop < len(ordered) and ordered[stop].speaker != question.speaker:
            stop += 1
        first = max(0, i - max_context_segments)
        answer = tuple(ordered[i + 1:stop])
        end = max(s.end for s in ordered[first:stop])
        if end - answer[0].start < min_answer_seconds:  # exactly as theirs (no rounding allowance)
            continue
        found.append(Dialogue(question.conversation_id, len(found), (speakers[0], speakers[1]), tuple(ordered[first:i]),
                              Turn(question.speaker, (question,)), Turn(answer[0].speaker, answer),
                              ordered[first].start, end))
    return found


def merge_turns(segments: Sequence[Segment], *, backchannel_max: float = 0.5) -> list[Turn]:
    """The paper's turns (module docstring) of one conversation's utterances; ManifestError if it
    has more than two speakers (naming the third speaker's first row)."""
    ordered = authors_order(segments)
    speakers_of(ordered)
    turns: list[Turn] = []
    pending: list[Segment] = []  # the other speaker's short utterances since the holder last spoke

    def short(s: Segment) -> bool:
        return s.duration <= backchannel_max + _EPS

    for s in ordered:
        if not turns:
            turns.append(Turn(s.speaker, (s,)))
            continue
        holder = turns[-1]
        if s.speaker == holder.speaker:  # the holder goes on: the other speaker's short ones were backchannels
            turns[-1] = Turn(holder.speaker, (*holder.segments, s), (*holder.backchannels, *pending))
            pending = []
        elif short(s) and s.end <= holder.end + _EPS:  # a short one inside the holder's speech so far
            turns[-1] = Turn(holder.speaker, holder.segments, (*holder.backchannels, s))
        elif short(s):
            pending.append(s)
        else:  # the other speaker takes the floor (with their short utterances just before)
            turns.append(Turn(s.speaker, (*pending, s)))
            pending = []
    if pending:  # the conversation ends on the other speaker's short utterances: their turn
        turns.append(Turn(pending[0].speaker, tuple(pending)))
    return turns


def find_dialogues(
    turns: Sequence[Turn], speakers: tuple[str, str], *, max_context_segments: int = 4,
    min_answer_seconds: float = 1.0,
) -> list[Dialogue]:
    """Every valid dialogue of one conversation's paper turns (module docstring), in turn order."""
    found: list[Dialogue] = []
    for j in range(1, len(turns) - 1):
        question, answer = turns[j], turns[j + 1]
        if not question.text.strip().endswith("?") or answer.speaker == question.speaker:
            continue
        if answer.duration < min_answer_seconds - _EPS:
            continue
        context = tuple(s for t in turns[:j] for s in t.segments)[-max_context_segments:]
        found.append(Dialogue(question.segments[0].conversation_id, len(found), speakers, context, question,
                              answer, min(s.start for s in context), answer.end))
    return found
