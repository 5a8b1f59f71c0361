"""SPEARBench-style question/answer items with known turn-taking gaps and answer latencies.

From a dialogue, turn K-2 (context, said by the answerer), K-1 (a user question ending in '?',
said by the asker) and K (the answer). The question file is context + pause + question (16 kHz
mono) and ends where the question's speech ends (question_end_time). The answer file starts
with a known leading silence (its latency). As in SPEARBench, answer_start_time is where the
answer *file* starts relative to the end of the question input (negative: it overlaps, an
interruption); the answer's speech starts `latency` later, so the speech-to-speech gap is
answer_start_time + latency (truth: speech_gap_s). In the two-channel dialogue file (channel 0
asker, channel 1 answerer) the answer's speech begins exactly that gap after the question's ends.

Every question is answered twice, by two systems: SYSTEMS[0] is the original human answer (a
natural voice whose answer file starts HUMAN_START_RANGE after the question's end, negative
values being interruptions) and SYSTEMS[1] a half-duplex model (a robotic voice whose answer file
starts MODEL_START_RANGE after it, never before); both answers of a question share its question
file, so evaluation can pair them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from sdscore.corpus.schemas import NATURALNESS_ITEMS
from sdscore.synth import clips
from sdscore.synth.dialogues import DIALOGUES
from sdscore.synth.render import Renderer, Utterance
from sdscore.synth.voices import pick, pool

MIX_RATE = 16000
HUMAN_START_RANGE = (-1.0, 2.0)
MODEL_START_RANGE = (0.05, 1.3)
LATENCY_RANGE = (0.1, 1.2)
SYSTEMS = ("human", "halfduplex-robot")
#: the synthetic items' relationship (one per dialogue, in turn) and conversation_prompt (from the
#: dialogue's domain and topic): made up, so that the emotional-naturalness input has both parts
RELATIONSHIPS = ("friends", "colleagues", "strangers", "family")


@dataclass(frozen=True)
class _Exchange:
    """Context (or None), question and answer text of one dialogue."""

    conversation_id: str
    context: str | None
    question: str
    answer: str
    relationship: str
    prompt: str


def exchanges() -> list[_Exchange]:
    """Every (context, question, answer) triple whose question is a user turn ending in '?'."""
    out = []
    for n, d in enumerate(DIALOGUES):
        topic = d.dialogue_id.removeprefix(f"{d.domain}-").replace("-", " ")
        prompt = f"Talk with the other person about {topic} ({d.domain})."
        for k, (role, text) in enumerate(zip(d.roles(), d.spoken)):
            if role == "user" and text.endswith("?") and k + 1 < len(d.spoken):
                out.append(_Exchange(d.dialogue_id, d.spoken[k - 1] if k else None, text, d.spoken[k + 1],
                                     RELATIONSHIPS[n % len(RELATIONSHIPS)], prompt))
    return out


@dataclass(frozen=True)
class _Item:
    """One item: the exchange, its voices and its drawn pause, gap and latency."""

    item_id: str
    system: str
    exchange: _Exchange
    context: Utterance | None
    question: Utterance
    answer: Utterance
    pause: float
    gap: float
    latency: float

    def path(self, kind: str) -> str:
        """Content-addressed path of the item's question, answer or dialogue file (the question
        file depends on the context, question and pause only, so both systems share it)."""
        parts = [self.context and self.context.relpath, self.question.relpath, self.pause]
        if kind != "question":
            parts += [self.answer.relpath, self.gap, self.latency]
        return f"audio/naturalness/{kind}/{clips.content_key(kind, *parts)}.wav"


def build_naturalness(renderer: Renderer, rng: np.random.Generator, n_items: int) -> tuple[pl.DataFrame, dict]:
    """The NATURALNESS_ITEMS frame (n_items rows: each question answered by both SYSTEMS); the
    summary holds each item's answer latency and speech-to-speech gap."""
    pool_ex = exchanges()
    items = []
    order: list[int] = []
    for q in range((n_items + 1) // 2):
        if not order:
            order = [int(j) for j in rng.permutation(len(pool_ex))]
        ex = pool_ex[order.pop()]
        asker = pick(rng, pool(quality="natural"))
        human = pick(rng, pool(quality="natural"), not_identity=[asker.identity])
        robot = pick(rng, pool(quality="robotic"), not_identity=[asker.identity])
        context = Utterance(human, ex.context) if ex.context else None
        pause = round(float(rng.uniform(0.3, 0.8)), 3)
        for system, voice in ((SYSTEMS[0], human), (SYSTEMS[1], robot)):
            if len(items) == n_items:
                break
            latency = round(float(rng.uniform(*LATENCY_RANGE)), 3)
            # where the answer file starts: the human's may overlap the question (an interruption),
            # the model's starts after it; the answer's speech starts `latency` later
            starts = HUMAN_START_RANGE if system == SYSTEMS[0] else MODEL_START_RANGE
            gap = float(rng.uniform(*starts)) + latency
            items.append(_Item(
                f"naturalness-{len(items):05d}", system, ex, context,
                Utterance(asker, ex.question), Utterance(voice, ex.answer), pause=pause, gap=gap, latency=latency,
            ))
    renderer.render([u for it in items for u in (it.context, it.question, it.answer) if u], "naturalness: tts")
    layouts = renderer.map(lambda it: _write_item(renderer, it), items, "naturalness: mix")

    rows = []
    for it, (context_end, question_end, gap, answer_duration) in zip(items, layouts):
        rows.append({
            "item_id": it.item_id, "conversation_id": it.exchange.conversation_id,
            "audio_path": it.path("question"), "answer_audio_path": it.path("answer"),
            "dialogue_path": it.path("dialogue"), "context_end_time": context_end,
            "question_end_time": question_end, "answer_start_time": round(gap - it.latency, 3),
            "answer_duration": answer_duration, "speakers": f"{it.question.voice.id},{it.answer.voice.id}",
            "transcript_question": it.exchange.question, "transcript_answer": it.exchange.answer,
            "finish_reason": "stop", "system": it.system, "relationship": it.exchange.relationship,
            "conversation_prompt": it.exchange.prompt,
        })
    frame = pl.DataFrame(rows, schema=NATURALNESS_ITEMS)
    summary = {"answer_latency_s": {it.item_id: it.latency for it in items},
               "speech_gap_s": {it.item_id: gap for it, (_, _, gap, _) in zip(items, layouts)}}
    return frame, summary


def _read16(renderer: Renderer, u: Utterance) -> np.ndarray:
    """A render resampled to the mixing rate."""
    sr = u.voice.sample_rate
    return clips.resample(clips.read(renderer.path(u.relpath), sr), sr, MIX_RATE)


def _write_item(renderer: Renderer, it: _Item) -> tuple[float, float, float, float]:
    """Write question, answer and dialogue files; returns (question start, question end, gap, answer s)."""
    pad = round(clips.PAD_S * MIX_RATE)
    question = _read16(renderer, it.question)
    context = _read16(renderer, it.context) if it.context else np.zeros(0)
    q_at = len(context) - 2 * pad + round(it.pause * MIX_RATE) if len(context) else 0
    question_end = q_at + len(question) - pad
    # An interruption may not start before the asker has said a fifth of the question.
    gap = round(max(it.gap, -0.8 * (len(question) - 2 * pad) / MIX_RATE), 3)

    sr = it.answer.voice.sample_rate
    x = clips.read(renderer.path(it.answer.relpath), sr)
    answer = np.concatenate([clips.silence(it.latency - clips.PAD_S, sr), x])
    answer16 = clips.resample(answer, sr, MIX_RATE)
    a_at = question_end + round((gap - it.latency) * MIX_RATE)
    if a_at < 0:
        answer16, a_at = answer16[-a_at:], 0

    total = max(q_at + len(question), a_at + len(answer16))
    dialogue = np.zeros((total, 2))
    dialogue[q_at: q_at + len(question), 0] = question
    dialogue[: len(context), 1] = context
    dialogue[a_at: a_at + len(answer16), 1] += answer16
    # The model's input ends where the question's speech ends, so gaps count from the file end.
    mono = np.zeros(q_at + len(question))
    mono[: len(context)] = context
    mono[q_at:] += question
    mono = mono[:question_end]

    clips.write(renderer.path(it.path("question")), mono, MIX_RATE)
    clips.write(renderer.path(it.path("answer")), answer, sr)
    clips.write(renderer.path(it.path("dialogue")), dialogue, MIX_RATE)
    # context_end_time as the authors' metadata has it: where the question's speech starts
    context_end = (q_at + pad) / MIX_RATE if len(context) else 0.0
    return context_end, question_end / MIX_RATE, gap, len(answer) / sr
