"""Synthetic two-speaker conversations: per-speaker channel WAVs, a timed segments table, known dialogues.

Each conversation voices one dialogue of the bank (user turns by the asker, assistant turns by the
answerer), one utterance per sentence. Its recipe adds the cases that SPEARBench dialogue
selection must get right: short silences inside turns, the listener's backchannels (inside a long
utterance, or in a silence inside a turn), turns that overlap the previous one, an answer cut to a
short first sentence followed by a long silence (a silence never ends an answer: "Yeah, usually."
+ 1.2 s + the rest is one answer), and opening questions with no context. Each speaker gets one 16 kHz mono WAV (their channel); the
table has one row per utterance with its speech bounds, in seconds, exact to the sample.

The truth lists the valid dialogues of the script as placed, by the authors' released rule
(SPEAR-benchmark-code get_end_with_question: an utterance ending in '?' followed by the other
speaker's, the answer up to the asker's next utterance, the 4 utterances before as context,
answers >= 1.0 s); it is computed here on the placed utterances (in samples), never from the
segments table or with the selection code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from sdscore.errors import SdscoreError
from sdscore.synth import clips
from sdscore.synth.dialogues import DIALOGUES
from sdscore.synth.render import Renderer, Utterance
from sdscore.synth.voices import Voice, pick, pool

CONVERSATIONS_TABLE = "conversations.parquet"
MIX_RATE = 16000
LEAD_S = 0.3  # silence before the first utterance and after the last
INTRA_GAP_RANGE = (0.1, 0.3)  # silences between the sentences of a turn
TURN_GAP_RANGE = (0.25, 0.7)  # silences between turns
OVERLAP_RANGE = (0.15, 0.35)  # how early an overlapping turn starts (at most half of either utterance)
LONG_GAP_S = 1.2  # the silence that splits a turn
BETWEEN_GAP_S = 0.4  # a silence inside a turn that holds a backchannel
BACKCHANNEL_S = 0.3  # backchannel clips are cut to at most this much speech
SHORT_ANSWER_S = 0.8  # a short answer is cut to at most this much speech
BACKCHANNEL_TEXTS = ("Mm-hm.", "Yeah.", "Right.")
#: SPEARBench's selection settings (the released code's), which the truth assumes.
TRUTH_MAX_CONTEXT_SEGMENTS = 4
TRUTH_MIN_ANSWER_S = 1.0

_SCHEMA = pl.Schema({"conversation_id": pl.String, "speaker": pl.String, "start": pl.Float64, "end": pl.Float64,
                     "text": pl.String, "audio_path": pl.String, "channel": pl.Int64})


@dataclass(frozen=True)
class Recipe:
    """A dialogue of the bank and, by turn index, where its selection cases go."""

    dialogue_id: str
    overlaps: tuple[int, ...] = ()  # turns that start before the previous turn ends
    backchannel_inside: int | None = None  # turn whose longest utterance holds a listener backchannel
    backchannel_between: int | None = None  # turn with a silence that holds a listener backchannel
    short_answer: int | None = None  # turn cut to its first sentence; the rest follows after LONG_GAP_S


RECIPES: tuple[Recipe, ...] = (
    Recipe("travel-airport", overlaps=(3,), backchannel_inside=1),
    Recipe("travel-lost-luggage", backchannel_between=1, short_answer=3),
    Recipe("health-headache", overlaps=(2, 5), backchannel_inside=3),
    Recipe("cooking-rice", overlaps=(1,), backchannel_between=0),
)


@dataclass(frozen=True, eq=False)
class _Placed:
    """An utterance on the timeline: speaker 0 (asker) or 1 (answerer), its 16 kHz clip (speech
    padded by PAD_S), and the sample where its speech starts."""

    speaker: int
    text: str
    relpath: str
    clip: np.ndarray
    at: int

    @property
    def end(self) -> int:
        return self.at + len(self.clip) - 2 * _pad()


@dataclass(frozen=True)
class _Turn:
    """A planned turn: one speaker's utterances."""

    speaker: int
    utterances: tuple[_Placed, ...]

    @property
    def text(self) -> str:
        return " ".join(u.text for u in self.utterances)


def build_conversations(renderer: Renderer, rng: np.random.Generator, n: int) -> tuple[pl.DataFrame, dict]:
    """The segments table (audio paths relative to the corpus folder) and the truth: valid dialogues."""
    by_id = {d.dialogue_id: d for d in DIALOGUES}
    plans = []
    for i in range(n):
        recipe = RECIPES[i % len(RECIPES)]
        asker = pick(rng, pool(quality="natural"))
        answerer = pick(rng, pool(quality="natural"), not_identity=[asker.identity])
        plans.append((f"conversation-{i:02d}", recipe, (asker, answerer), by_id[recipe.dialogue_id].spoken))
    renderer.render([u for _, recipe, voices, turns in plans for u in _utterances(recipe, voices, turns)],
                    "conversations: tts")
    layouts = [_layout(renderer, rng, *plan) for plan in plans]
    paths = renderer.map(lambda job: _write_channels(renderer, *job), list(zip(plans, layouts)), "conversations: mix")

    rows, dialogues = [], []
    for (cid, _, voices, _), (turns, backchannels), channel_paths in zip(plans, layouts, paths):
        placed = sorted([u for t in turns for u in t.utterances] + backchannels, key=lambda u: (u.at, u.end))
        rows += [{"conversation_id": cid, "speaker": voices[u.speaker].id, "start": u.at / MIX_RATE,
                  "end": u.end / MIX_RATE, "text": u.text, "audio_path": channel_paths[u.speaker], "channel": None}
                 for u in placed]
        dialogues += _truth(cid, voices, placed)
    truth = {
        "table": CONVERSATIONS_TABLE,
        "settings": {"turn_rule": "released", "max_context_segments": TRUTH_MAX_CONTEXT_SEGMENTS,
                     "min_answer_seconds": TRUTH_MIN_ANSWER_S},
        "conversations": [cid for cid, *_ in plans],
        "dialogues": dialogues,
    }
    return pl.DataFrame(rows, schema=_SCHEMA), truth


def sentences(text: str) -> list[str]:
    """A turn's sentences (split after '.', '?' or '!' and a space)."""
    return [s for s in re.split(r"(?<=[.?!])\s+", text.strip()) if s]


def _utterances(recipe: Recipe, voices: tuple[Voice, Voice], turns: tuple[str, ...]) -> list[Utterance]:
    """Every render the conversation needs: its sentences and its backchannels."""
    out = [Utterance(voices[k % 2], s) for k, text in enumerate(turns) for s in sentences(text)]
    for k in (recipe.backchannel_inside, recipe.backchannel_between):
        if k is not None:
            out.append(Utterance(voices[1 - k % 2], _backchannel_text(recipe, k)))
    return out


def _backchannel_text(recipe: Recipe, turn: int) -> str:
    return BACKCHANNEL_TEXTS[(len(recipe.dialogue_id) + turn) % len(BACKCHANNEL_TEXTS)]


def _pad() -> int:
    return round(clips.PAD_S * MIX_RATE)


def _clip(renderer: Renderer, u: Utterance, cap_s: float | None = None) -> np.ndarray:
    """A render at 16 kHz; with cap_s, its speech cut to at most that long (20 ms fade-out)."""
    sr = u.voice.sample_rate
    x = clips.resample(clips.read(renderer.path(u.relpath), sr), sr, MIX_RATE)
    pad, cap = _pad(), round((cap_s or 0) * MIX_RATE)
    if cap_s is None or len(x) - 2 * pad <= cap:
        return x
    speech = x[pad: pad + cap].copy()
    fade = round(0.02 * MIX_RATE)
    speech[-fade:] *= np.linspace(1.0, 0.0, fade)
    return np.concatenate([np.zeros(pad), speech, np.zeros(pad)])


def _layout(renderer, rng, cid, recipe, voices, texts) -> tuple[list[_Turn], list[_Placed]]:
    """Place every planned turn and backchannel on the conversation's timeline (samples at 16 kHz)."""
    sr = MIX_RATE
    turns: list[_Turn] = []
    first_of: dict[int, int] = {}  # dialogue turn -> its (first) planned turn
    between: tuple[_Placed, int] | None = None  # (utterance before the gap, gap in samples)
    for k, text in enumerate(texts):
        speaker = k % 2
        parts = [sentences(text)]
        if k == recipe.short_answer:
            parts = [parts[0][:1], parts[0][1:]]
        for p, part in enumerate(parts):
            caps = [SHORT_ANSWER_S if k == recipe.short_answer and p == 0 else None] * len(part)
            utterance_clips = [_clip(renderer, Utterance(voices[speaker], s), c) for s, c in zip(part, caps)]
            speech = [len(c) - 2 * _pad() for c in utterance_clips]
            gaps = [round(rng.uniform(*INTRA_GAP_RANGE) * sr) for _ in part[1:]]
            if k == recipe.backchannel_between:
                g = max(range(len(gaps)), key=lambda i: min(speech[i], speech[i + 1]))
                if min(speech[g], speech[g + 1]) < 0.7 * sr:
                    raise SdscoreError(f"{cid}: turn {k} has no gap between two long sentences for a backchannel")
                gaps[g] = round(BETWEEN_GAP_S * sr)
            if not turns:
                at = round(LEAD_S * sr)
            else:
                previous = turns[-1].utterances[-1]
                end = max(u.end for u in turns[-1].utterances)
                if p == 1:
                    at = end + round(LONG_GAP_S * sr)
                elif k in recipe.overlaps:
                    limit = 0.5 * min(speech[0], previous.end - previous.at)
                    at = end - round(min(rng.uniform(*OVERLAP_RANGE) * sr, limit))
                else:
                    at = end + round(rng.uniform(*TURN_GAP_RANGE) * sr)
            placed = []
            for i, (s, c) in enumerate(zip(part, utterance_clips)):
                placed.append(_Placed(speaker, s, Utterance(voices[speaker], s).relpath, c, at))
                at = placed[-1].end + (gaps[i] if i < len(gaps) else 0)
            if k == recipe.backchannel_between:
                between = (placed[g], gaps[g])
            first_of.setdefault(k, len(turns))
            turns.append(_Turn(speaker, tuple(placed)))

    backchannels = []
    for k, where in ((recipe.backchannel_inside, "inside"), (recipe.backchannel_between, "between")):
        if k is None:
            continue
        listener = 1 - k % 2
        u = Utterance(voices[listener], _backchannel_text(recipe, k))
        clip = _clip(renderer, u, BACKCHANNEL_S)
        n = len(clip) - 2 * _pad()
        if where == "inside":
            host = max(turns[first_of[k]].utterances, key=lambda h: h.end - h.at)
            if host.end - host.at < n + round(0.6 * sr):
                raise SdscoreError(f"{cid}: turn {k} has no utterance long enough to hold a backchannel")
            at = host.at + (host.end - host.at - n) // 2
        else:
            before, gap = between
            at = before.end + (gap - n) // 2
        backchannels.append(_Placed(listener, u.text, u.relpath, clip, at))
    return turns, backchannels


def _write_channels(renderer: Renderer, plan, layout) -> tuple[str, str]:
    """Write the two speakers' channel files (unless present); returns their corpus-relative paths."""
    cid, recipe, voices, _ = plan
    turns, backchannels = layout
    placed = [u for t in turns for u in t.utterances] + backchannels
    key = clips.content_key("conversation", cid, recipe.dialogue_id, [v.id for v in voices],
                            [(u.speaker, u.relpath, u.at, len(u.clip)) for u in placed])
    paths = tuple(f"audio/conversations/{key}/{v.id}.wav" for v in voices)
    total = max(u.at - _pad() + len(u.clip) for u in placed) + round(LEAD_S * MIX_RATE)
    for speaker, path in enumerate(paths):
        if renderer.path(path).exists():
            continue
        channel = np.zeros(total)
        for u in placed:
            if u.speaker == speaker:
                channel[u.at - _pad(): u.at - _pad() + len(u.clip)] += u.clip
        clips.write(renderer.path(path), channel, MIX_RATE)
    return paths


def _truth(cid: str, voices: tuple[Voice, Voice], placed: list[_Placed]) -> list[dict]:
    """Valid dialogues of the placed utterances (backchannels included) by the released rule: an
    utterance ending in '?' whose next utterance is the other voice's; the answer runs until the
    asker's next utterance; context: the TRUTH_MAX_CONTEXT_SEGMENTS utterances before; the clip ends
    at the latest end among them all, and the answer (its first start to that end) lasts at least
    TRUTH_MIN_ANSWER_S. Named <conversation>_<asker voice>_<answerer voice>_<n> (the table lists
    voice 0 first)."""
    order = sorted(placed, key=lambda u: (u.at, u.end, voices[u.speaker].id, u.text))
    found: list[dict] = []
    for i, question in enumerate(order[:-1]):
        if not question.text.endswith("?") or order[i + 1].speaker == question.speaker:
            continue
        stop = next((j for j in range(i + 1, len(order)) if order[j].speaker == question.speaker), len(order))
        first = max(0, i - TRUTH_MAX_CONTEXT_SEGMENTS)
        end = max(u.end for u in order[first:stop])
        answer = order[i + 1:stop]
        if end - answer[0].at < round(TRUTH_MIN_ANSWER_S * MIX_RATE):
            continue
        found.append({
            "conversation_id": cid, "item_id": f"{cid}_{voices[0].id}_{voices[1].id}_{len(found)}",
            "asker": voices[question.speaker].id, "answerer": voices[answer[0].speaker].id,
            "question": question.text, "answer": " ".join(u.text for u in answer),
            "context": [u.text for u in order[first:i]], "context_segments": i - first,
            "context_start_s": order[first].at / MIX_RATE, "question_start_s": question.at / MIX_RATE,
            "question_end_s": question.end / MIX_RATE, "answer_start_s": answer[0].at / MIX_RATE,
            "answer_end_s": end / MIX_RATE,
        })
    return found
