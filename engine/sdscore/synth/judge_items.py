"""TRACE/SpeakBench-style judge items: a spoken instruction and two responses from pseudo-systems.

Each response is good or bad on three dimensions, drawn from its system's profile and then
realised in audio: content (correct vs wrong answer text), voice quality (natural voice vs a
robotic voice or a degraded rendering) and paralinguistics (the requested slow/fast/high/low
style vs the voice's default prosody). A dimension's label is "1"/"2" when only that response
is good, "both_good" or "both_bad" otherwise; overall is their `speakbench` fusion (metrics.fusion).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from sdscore.corpus.schemas import JUDGE_ITEMS
from sdscore.metrics.fusion import fuse
from sdscore.synth.degrade import degrade_job, degraded_relpath
from sdscore.synth.render import Renderer, Utterance
from sdscore.synth.texts import JUDGE_TASKS, JudgeTask
from sdscore.synth.voices import VOICES_BY_ID, pick, pool

DATASET = "synthetic-speakbench"
#: Degradations that spoil voice quality without changing prosody.
VQ_DEGRADATIONS = ("noisy", "clipped", "band-limited", "dropout")


@dataclass(frozen=True)
class JudgeSystem:
    """A pseudo speech-to-speech system: house voice and P(good) per dimension."""

    name: str
    voice: str
    p_content: float
    p_voice: float  # P(natural, undamaged audio); a robotic house voice is never good
    p_para: float


JUDGE_SYSTEMS: tuple[JudgeSystem, ...] = (
    JudgeSystem("cascade-hq", "flite-slt", 0.9, 0.95, 0.15),
    JudgeSystem("expressive-e2e", "flite-awb", 0.7, 0.85, 0.8),
    JudgeSystem("robotic-tts", "espeak-f3", 0.85, 0.0, 0.6),
    JudgeSystem("noisy-codec", "flite-slt-bright", 0.75, 0.1, 0.5),
    JudgeSystem("small-omni", "flite-awb-deep", 0.35, 0.7, 0.3),
)


def dimension_label(good1: bool, good2: bool) -> str:
    """Pairwise label of one dimension from whether each response is good on it."""
    if good1 and good2:
        return "both_good"
    if not good1 and not good2:
        return "both_bad"
    return "1" if good1 else "2"


@dataclass(frozen=True)
class _Response:
    """One response: its render, what is good about it, and its degradation if any."""

    utterance: Utterance
    content_ok: bool
    voice_ok: bool
    para_ok: bool
    degradation: str | None

    @property
    def relpath(self) -> str:
        """The audio file of the response (the degraded copy when degraded)."""
        if self.degradation is None:
            return self.utterance.relpath
        return degraded_relpath(self.utterance.relpath, self.degradation)


def _respond(rng: np.random.Generator, system: JudgeSystem, task: JudgeTask) -> _Response:
    """Draw a response's good/bad dimensions from the system profile and realise them."""
    content_ok = bool(rng.random() < system.p_content)
    voice_ok = bool(rng.random() < system.p_voice)
    para_ok = bool(rng.random() < system.p_para)
    voice = VOICES_BY_ID[system.voice]
    if para_ok:
        voice = voice.styled(task.style)
    utterance = Utterance(voice, task.correct if content_ok else task.wrong)
    degradation = None
    if not voice_ok and voice.quality == "natural":
        degradation = str(rng.choice(VQ_DEGRADATIONS))
    return _Response(utterance, content_ok, voice_ok and voice.quality == "natural", para_ok, degradation)


@dataclass(frozen=True)
class _Item:
    """An instruction and the two systems' responses to it."""

    index: int
    task: JudgeTask
    system1: JudgeSystem
    system2: JudgeSystem
    instruction: Utterance
    response1: _Response
    response2: _Response


def build_judge_items(renderer: Renderer, rng: np.random.Generator, n_items: int) -> tuple[pl.DataFrame, dict]:
    """The JUDGE_ITEMS frame with synthetic labels, and the systems' profiles."""
    plans = []
    order: list[int] = []
    for i in range(n_items):
        if not order:
            order = [int(j) for j in rng.permutation(len(JUDGE_TASKS))]
        task = JUDGE_TASKS[order.pop()]
        a, b = (JUDGE_SYSTEMS[int(j)] for j in rng.choice(len(JUDGE_SYSTEMS), 2, replace=False))
        asker = pick(rng, pool(quality="natural"), not_identity=[VOICES_BY_ID[s.voice].identity for s in (a, b)])
        plans.append(_Item(i, task, a, b, Utterance(asker, task.instruction),
                           _respond(rng, a, task), _respond(rng, b, task)))
    renderer.render(
        [u for p in plans for u in (p.instruction, p.response1.utterance, p.response2.utterance)], "judge: tts"
    )

    responses = [r for p in plans for r in (p.response1, p.response2) if r.degradation]
    renderer.derive([degrade_job(renderer, r.utterance, r.degradation) for r in responses], "judge: degrade")

    rows = []
    for p in plans:
        r1, r2 = p.response1, p.response2
        content = dimension_label(r1.content_ok, r2.content_ok)
        vq = dimension_label(r1.voice_ok, r2.voice_ok)
        para = dimension_label(r1.para_ok, r2.para_ok)
        rows.append({
            "item_id": f"judge-{p.index:05d}", "dataset": DATASET, "instruction_id": p.task.task_id,
            "instruction_text": p.task.instruction, "instruction_path": p.instruction.relpath,
            "model_a": p.system1.name, "model_b": p.system2.name,
            "audio1_path": r1.relpath, "audio2_path": r2.relpath,
            "content": content, "voice_quality": vq, "paralinguistics": para,
            "overall": fuse(content, vq, para, rule="speakbench"),
        })
    frame = pl.DataFrame(rows, schema=JUDGE_ITEMS)
    summary = {
        "systems": {s.name: {"voice": s.voice, "p_content": s.p_content, "p_voice": s.p_voice,
                             "p_para": s.p_para} for s in JUDGE_SYSTEMS},
        "overall": dict(sorted(frame.group_by("overall").len().iter_rows())),
    }
    return frame, summary
