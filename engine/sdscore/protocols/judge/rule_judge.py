"""RuleBaselineJudge: a transparent, offline BASELINE judge over two response blueprints.

It is not TRACE and not a model of human judgement: it applies fixed, documented thresholds and
says which ones decided, so that an LLM judge has a floor to beat. Each dimension follows HCoT's
procedure — decide whether each response is acceptable; exactly one acceptable → it wins; none →
both_bad; both → the higher score wins when it leads by more than the dimension's margin, else
both_good. Signals (RuleThresholds holds every number):

- content: the transcript must be non-empty and, when the instruction is known, similar enough to
  it (MiniLM cosine ≥ 0.25, or word Jaccard ≥ 0.05 when MiniLM cannot load); score = similarity.
  This checks relevance only — it cannot tell a right answer from a wrong one on the same topic.
- voice_quality: DNSMOS OVRL ≥ 2.5 (personalized, as TRACE's blueprint) and P.808 ≥ 2.7, each when
  present; score = OVRL, else P.808.
- paralinguistics: demands read from the instruction's words (slow/fast, high/low pitch,
  loud/quiet, expressive/monotone, and emotions); each is checked against speech rate, mean pitch,
  loudness, pitch std or the emotion classifier's scores; an emotion demand without a classifier
  is left unchecked and said so. With no checkable demand, the response must not be monotone
  (pitch std ≥ 10 Hz). A missing signal fails the demand when the other response has it.
  Score = mean normalised distance past each threshold.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sdscore.errors import JudgeError
from sdscore.protocols.judge import blueprint_view as bv
from sdscore.protocols.judge.interface import (
    JudgeItem,
    Progress,
    Verdict,
    check_instruction_source,
    instruction_of,
)
from sdscore.protocols.judge.text_similarity import (
    JaccardSimilarity,
    MiniLMSimilarity,
    load_text_similarity,
)


@dataclass(frozen=True)
class RuleThresholds:
    """Every threshold of the rule baseline (words/min, Hz, LUFS/LU): round values read off the synthetic
    TTS corpus and common speech norms (conversation ≈ 150–170 words/min), not fitted."""

    min_dnsmos_ovrl: float = 2.5
    min_p808: float = 2.7
    quality_margin: float = 0.5
    slow_max_wpm: float = 150.0
    fast_min_wpm: float = 200.0
    high_min_hz: float = 180.0
    low_max_hz: float = 140.0
    loud_min_lufs: float = -18.0
    quiet_max_lufs: float = -30.0
    expressive_min_pitch_std_hz: float = 25.0
    monotone_max_pitch_std_hz: float = 12.0
    lively_min_pitch_std_hz: float = 10.0
    min_emotion_score: float = 0.3
    style_margin: float = 0.2


#: instruction word → paralinguistic demand
DEMAND_WORDS: dict[str, str] = {
    **dict.fromkeys(("slow", "slowly", "slower", "deliberate", "deliberately", "leisurely"), "slow"),
    **dict.fromkeys(("fast", "faster", "quick", "quickly", "rapid", "rapidly", "hurriedly"), "fast"),
    **dict.fromkeys(("high", "higher", "squeaky", "shrill"), "high"),
    **dict.fromkeys(("low", "lower", "deep", "deeper", "bass", "baritone"), "low"),
    **dict.fromkeys(("loud", "loudly", "louder", "shout", "shouting", "yell", "yelling"), "loud"),
    **dict.fromkeys(("whisper", "whispering", "quiet", "quietly", "soft", "softly", "hushed"), "quiet"),
    **dict.fromkeys(
        ("dramatic", "dramatically", "excited", "excitedly", "energetic", "enthusiastic", "lively", "animated"),
        "expressive",
    ),
    **dict.fromkeys(("monotone", "monotonous", "flat", "robotic"), "monotone"),
    **dict.fromkeys(("happy", "happily", "cheerful", "cheerfully", "joyful", "joyfully", "glad"), "emotion:happy"),
    **dict.fromkeys(("sad", "sadly", "gloomy", "sorrowful", "melancholy", "crying"), "emotion:sad"),
    **dict.fromkeys(("angry", "angrily", "furious", "furiously", "mad"), "emotion:angry"),
    **dict.fromkeys(("scared", "fearful", "afraid", "frightened", "nervous", "nervously"), "emotion:fearful"),
    **dict.fromkeys(("surprised", "amazed", "astonished"), "emotion:surprised"),
    **dict.fromkeys(("disgusted", "disgust"), "emotion:disgusted"),
    **dict.fromkeys(("calm", "calmly", "neutral"), "emotion:neutral"),
}
_WORD = re.compile(r"[a-z]+")

#: demand → (blueprint field, +1: must reach the threshold / -1: must stay at or under it,
#: RuleThresholds field, scale of the normalised distance (None: the threshold itself), unit)
SIGNAL_DEMANDS: dict[str, tuple[str, int, str, float | None, str]] = {
    "slow": ("speech_rate_wpm", -1, "slow_max_wpm", None, "wpm"),
    "fast": ("speech_rate_wpm", +1, "fast_min_wpm", None, "wpm"),
    "high": ("pitch_mean_hz", +1, "high_min_hz", None, "Hz"),
    "low": ("pitch_mean_hz", -1, "low_max_hz", None, "Hz"),
    "loud": ("loudness_lufs", +1, "loud_min_lufs", 10.0, "LUFS"),
    "quiet": ("loudness_lufs", -1, "quiet_max_lufs", 10.0, "LUFS"),
    "expressive": ("pitch_std_hz", +1, "expressive_min_pitch_std_hz", None, "Hz pitch std"),
    "monotone": ("pitch_std_hz", -1, "monotone_max_pitch_std_hz", None, "Hz pitch std"),
    "lively": ("pitch_std_hz", +1, "lively_min_pitch_std_hz", None, "Hz pitch std"),
}


def instruction_demands(instruction: str | None) -> list[str]:
    """The paralinguistic demands an instruction's words state, in order of first mention."""
    if not instruction:
        return []
    found = [DEMAND_WORDS[w] for w in _WORD.findall(instruction.lower()) if w in DEMAND_WORDS]
    return list(dict.fromkeys(found))


def hcot_decision(ok1: bool, ok2: bool, score1: float, score2: float, margin: float) -> str:
    """HCoT's acceptability-then-comparison rule for one dimension."""
    if ok1 != ok2:
        return "1" if ok1 else "2"
    if not ok1:
        return "both_bad"
    if abs(score1 - score2) > margin:
        return "1" if score1 > score2 else "2"
    return "both_good"


@dataclass(frozen=True)
class _Check:
    """One response on one signal: acceptable?, score, and what was measured (for the reasoning)."""

    ok: bool
    score: float
    shown: str


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


class RuleBaselineJudge:
    """Rule-based BASELINE judge: thresholds over two blueprints (see the module doc); name ``rule``."""

    name = "rule"
    needs_blueprints = True

    def __init__(
        self,
        thresholds: RuleThresholds | None = None,
        text_similarity: str | JaccardSimilarity | MiniLMSimilarity = "auto",
        instruction_source: str = "text",
    ):
        self.thresholds = thresholds or RuleThresholds()
        self.instruction_source = check_instruction_source(instruction_source)
        self.needs_instruction_blueprint = instruction_source == "asr"
        if isinstance(text_similarity, str):
            self.similarity, self.similarity_note = load_text_similarity(text_similarity)
        else:
            self.similarity, self.similarity_note = text_similarity, None

    def __repr__(self) -> str:
        return f"RuleBaselineJudge(text_similarity={self.similarity.name!r})"

    def judge_many(self, items: Sequence[JudgeItem], progress: Progress | None = None) -> list[Verdict | JudgeError]:
        """Judge every item; an item without usable blueprints gets its JudgeError."""
        instructions: list[str | None | JudgeError] = []
        for item in items:
            try:
                instructions.append(instruction_of(item, self.instruction_source))
            except JudgeError as error:
                instructions.append(error)
        similarities = self._similarities(items, instructions)
        out: list[Verdict | JudgeError] = []
        for index, (item, instruction) in enumerate(zip(items, instructions)):
            if isinstance(instruction, JudgeError):
                out.append(instruction)
                continue
            try:
                out.append(self._judge(item, instruction, similarities.get(index)))
            except JudgeError as error:
                out.append(error)
        if progress is not None:
            progress("judge: rule baseline", len(items), len(items))
        return out

    def _similarities(self, items: Sequence[JudgeItem], instructions: list) -> dict[int, tuple[float, float]]:
        """Instruction–transcript similarity of both responses, batched over all items."""
        rows = [
            i
            for i, (item, text) in enumerate(zip(items, instructions))
            if isinstance(text, str) and item.blueprint1 is not None and item.blueprint2 is not None
        ]
        first: list[str] = []
        second: list[str] = []
        for i in rows:
            for blueprint in (items[i].blueprint1, items[i].blueprint2):
                first.append(instructions[i])
                second.append(bv.transcript_of(blueprint))
        values = self.similarity.similarity(first, second)
        return {i: (float(values[2 * k]), float(values[2 * k + 1])) for k, i in enumerate(rows)}

    def _judge(self, item: JudgeItem, instruction: str | None, similarity: tuple[float, float] | None) -> Verdict:
        if item.blueprint1 is None or item.blueprint2 is None:
            raise JudgeError(f"item {item.item_id}: the rule baseline needs both responses' blueprints")
        blueprints = (item.blueprint1, item.blueprint2)
        content, content_why = self._content(blueprints, similarity)
        quality, quality_why = self._quality(item.item_id, blueprints)
        para, para_why = self._paralinguistics(blueprints, instruction_demands(instruction))
        reasoning = f"[rule baseline] content: {content_why}; voice_quality: {quality_why}; paralinguistics: {para_why}"
        if self.similarity_note:
            reasoning += f"; note: {self.similarity_note}"
        return Verdict(content, quality, para, reasoning, cost=0.0)

    def _content(self, blueprints, similarity: tuple[float, float] | None) -> tuple[str, str]:
        words = [len(bv.transcript_of(b).split()) for b in blueprints]
        sim = self.similarity
        if similarity is None:
            checks = [_Check(n > 0, 0.0, f"{n} words") for n in words]
            rule = "no instruction text: a non-empty transcript is acceptable"
        else:
            checks = [_Check(n > 0 and s >= sim.relevance_threshold, s, f"{s:.2f}") for n, s in zip(words, similarity)]
            rule = f"{sim.name} similarity to the instruction, acceptable >= {sim.relevance_threshold}, tie within {sim.margin}"
        label = hcot_decision(checks[0].ok, checks[1].ok, checks[0].score, checks[1].score, sim.margin)
        return label, f"{rule}: {checks[0].shown} vs {checks[1].shown} -> {label}"

    def _quality(self, item_id: str, blueprints) -> tuple[str, str]:
        t = self.thresholds
        checks = []
        for position, blueprint in enumerate(blueprints, start=1):
            ovrl, p808 = bv.number(blueprint, "dnsmos_ovrl"), bv.number(blueprint, "p808_mos")
            if ovrl is None and p808 is None:
                raise JudgeError(f"item {item_id}: response {position}'s blueprint has no DNSMOS OVRL or P.808 score")
            ok = (ovrl is None or ovrl >= t.min_dnsmos_ovrl) and (p808 is None or p808 >= t.min_p808)
            checks.append(_Check(ok, ovrl if ovrl is not None else p808, f"OVRL {_fmt(ovrl)} / P.808 {_fmt(p808)}"))
        label = hcot_decision(checks[0].ok, checks[1].ok, checks[0].score, checks[1].score, t.quality_margin)
        rule = f"acceptable if OVRL >= {t.min_dnsmos_ovrl} and P.808 >= {t.min_p808}, tie within {t.quality_margin}"
        return label, f"{rule}: {checks[0].shown} vs {checks[1].shown} -> {label}"

    def _demand_check(self, demand: str, blueprint) -> _Check | None:
        """One response on one demand; None when the blueprint lacks the signal."""
        t = self.thresholds
        if demand.startswith("emotion:"):
            target = demand.split(":", 1)[1]
            scores = bv.scores_of(blueprint, "emotion")
            if scores is None:
                return None
            matched = max((v for k, v in scores.items() if target in k.lower().split("/")), default=0.0)
            top = max(scores, key=scores.get)
            ok = target in top.lower().split("/") or matched >= t.min_emotion_score
            return _Check(ok, matched, f"{target} {matched:.2f}")
        field, direction, threshold_name, scale, unit = SIGNAL_DEMANDS[demand]
        value = bv.number(blueprint, field)
        if value is None:
            return None
        threshold = getattr(t, threshold_name)
        score = direction * (value - threshold) / (scale or abs(threshold))
        return _Check(score >= 0, score, f"{value:.1f} {unit}")

    def _paralinguistics(self, blueprints, demands: list[str]) -> tuple[str, str]:
        measured = {d: [self._demand_check(d, b) for b in blueprints] for d in demands}
        unchecked = [d for d, checks in measured.items() if all(c is None for c in checks)]
        measured = {d: checks for d, checks in measured.items() if d not in unchecked}
        requested = f"requested {', '.join(demands)}" if demands else "no demand stated"
        if unchecked:
            requested += f" (unchecked, no signal: {', '.join(unchecked)})"
        if not measured:
            requested += "; must not be monotone"
            measured = {"lively": [self._demand_check("lively", b) for b in blueprints]}
            if all(c is None for c in measured["lively"]):
                return "both_good", f"{requested}: no pitch measured -> both_good"
        filled = {d: [c or _Check(False, -1.0, "n/a") for c in checks] for d, checks in measured.items()}
        ok = [all(checks[i].ok for checks in filled.values()) for i in (0, 1)]
        score = [sum(checks[i].score for checks in filled.values()) / len(filled) for i in (0, 1)]
        margin = self.thresholds.style_margin
        label = hcot_decision(ok[0], ok[1], score[0], score[1], margin)
        shown = "; ".join(f"{d}: {c[0].shown} vs {c[1].shown}" for d, c in filled.items())
        return label, f"{requested}: {shown}; tie within {margin} -> {label}"
