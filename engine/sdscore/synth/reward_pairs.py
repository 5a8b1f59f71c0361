"""SDiaReward-style preference pairs: modality (natural vs robotic/degraded) and colloquialness.

Modality: one dialogue text; chosen in natural voices, rejected with the final assistant turn
(or all turns) re-voiced by a robotic voice of the same gender, or degraded (see degrade.py).
Colloquialness: the written and the spoken version of one dialogue with the same voice per
role; chosen is the spoken version.

Dialogue split: `reward_dialogues("train" | "heldout")` divides the dialogue bank so a reward
model can be trained on some dialogues and evaluated on texts it never saw (held out: every 5th
dialogue of the bank). Without a split every dialogue is used, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from sdscore.corpus.schemas import REWARD_PAIRS
from sdscore.synth.degrade import DEGRADATIONS, degrade_job, degraded_relpath
from sdscore.synth.dialogues import DIALOGUES, Dialogue
from sdscore.synth.render import Renderer, Utterance
from sdscore.synth.voices import Voice, pick, pool

SOURCE = "sdscore-synth"
SUBSET_ROBOTIC = "synthetic-natural-vs-robotic"
SUBSET_DEGRADED = "synthetic-degraded"
SUBSET_COLLOQUIAL = "colloquial"

#: every HELDOUT_EVERY-th dialogue of the bank (0, 5, 10, ...) is held out of the "train" split
HELDOUT_EVERY = 5
REWARD_SPLITS = ("train", "heldout")


def reward_dialogues(split: str | None) -> tuple[Dialogue, ...]:
    """The dialogues of a split: "train", "heldout" (every 5th dialogue), or None (all of them)."""
    if split is None:
        return DIALOGUES
    if split not in REWARD_SPLITS:
        raise ValueError(f"unknown reward dialogue split {split!r}; expected one of {REWARD_SPLITS} or None")
    held = split == "heldout"
    return tuple(d for i, d in enumerate(DIALOGUES) if (i % HELDOUT_EVERY == 0) == held)


@dataclass(frozen=True)
class _Plan:
    """One pair before rendering: its labels, both episodes and the turns to degrade."""

    pair_id: str
    criterion: str
    subset: str
    category: str | None
    roles: tuple[str, ...]
    chosen: tuple[Utterance, ...]
    rejected: tuple[Utterance, ...]
    degraded_turns: tuple[int, ...]  # rejected turns replaced by a degraded copy of the chosen one
    degradation: str | None


def _dialogue_stream(rng: np.random.Generator, dialogues: tuple[Dialogue, ...] = DIALOGUES):
    """Dialogues in seeded random order, reshuffled after every full pass."""
    while True:
        for i in rng.permutation(len(dialogues)):
            yield dialogues[int(i)]


def _role_voices(rng: np.random.Generator, voices: tuple[Voice, ...]) -> dict[str, Voice]:
    """A user voice and an assistant voice of different speakers."""
    user = pick(rng, voices)
    return {"user": user, "assistant": pick(rng, voices, not_identity=[user.identity])}


def _say(d: Dialogue, texts: tuple[str, ...], voices: dict[str, Voice]) -> tuple[Utterance, ...]:
    """Each turn's text in its role's voice."""
    return tuple(Utterance(voices[role], text) for role, text in zip(d.roles(), texts))


def _plan_modality(rng: np.random.Generator, i: int, d: Dialogue) -> _Plan:
    """A natural-voiced episode against its robotic or degraded version (final turn or all)."""
    texts = d.spoken if rng.random() < 0.75 else d.written
    voices = _role_voices(rng, pool(quality="natural"))
    chosen = _say(d, texts, voices)
    scope = "final-turn" if rng.random() < 0.65 else "all-turns"
    affected = (len(texts) - 1,) if scope == "final-turn" else tuple(range(len(texts)))
    if rng.random() < 0.4:
        robotic = {role: pick(rng, pool(gender=v.gender, quality="robotic")) for role, v in voices.items()}
        if robotic["user"].identity == robotic["assistant"].identity:
            robotic["assistant"] = pick(
                rng, pool(gender=voices["assistant"].gender, quality="robotic"),
                not_identity=[robotic["user"].identity],
            )
        rejected = tuple(
            Utterance(robotic[role], u.text) if t in affected else u
            for t, (role, u) in enumerate(zip(d.roles(), chosen))
        )
        return _Plan(f"modality-{i:05d}", "modality", SUBSET_ROBOTIC, f"robotic-voice/{scope}",
                     d.roles(), chosen, rejected, (), None)
    kind = str(rng.choice(DEGRADATIONS))
    return _Plan(f"modality-{i:05d}", "modality", SUBSET_DEGRADED, f"{kind}/{scope}",
                 d.roles(), chosen, chosen, affected, kind)


def _plan_colloquial(rng: np.random.Generator, i: int, d: Dialogue) -> _Plan:
    """Spoken-style against written-style text of one dialogue, same voices."""
    voices = _role_voices(rng, pool(quality="natural") if rng.random() < 0.75 else pool())
    return _Plan(f"colloquial-{i:05d}", "colloquialness", SUBSET_COLLOQUIAL, d.domain, d.roles(),
                 _say(d, d.spoken, voices), _say(d, d.written, voices), (), None)


def build_reward_pairs(
    renderer: Renderer, rng: np.random.Generator, n_modality: int, n_colloquial: int,
    split: str | None = None,
) -> tuple[pl.DataFrame, dict]:
    """The REWARD_PAIRS frame and a summary of what was built (split: see reward_dialogues)."""
    bank = reward_dialogues(split)
    dialogues = _dialogue_stream(rng, bank)
    plans = [_plan_modality(rng, i, next(dialogues)) for i in range(n_modality)]
    plans += [_plan_colloquial(rng, i, next(dialogues)) for i in range(n_colloquial)]
    renderer.render([u for p in plans for u in p.chosen + p.rejected], "reward: tts")

    jobs = [degrade_job(renderer, p.chosen[t], p.degradation) for p in plans for t in p.degraded_turns]
    renderer.derive(jobs, "reward: degrade")

    rows = [
        {
            "pair_id": p.pair_id, "criterion": p.criterion, "subset": p.subset,
            "category": p.category, "source": SOURCE,
            "chosen": _turns(p.roles, p.chosen, (), None),
            "rejected": _turns(p.roles, p.rejected, p.degraded_turns, p.degradation),
            "margin": None,
        }
        for p in plans
    ]
    frame = pl.DataFrame(rows, schema=REWARD_PAIRS)
    summary = {
        "subsets": dict(sorted(frame.group_by("subset").len().iter_rows())),
        "categories": dict(sorted(frame.group_by("category").len().iter_rows())),
    }
    if split is not None:
        summary["dialogue_split"] = {"split": split, "dialogues": [d.dialogue_id for d in bank]}
    return frame, summary


def _turns(
    roles: tuple[str, ...], utterances: tuple[Utterance, ...], degraded: tuple[int, ...], kind: str | None
) -> list[dict]:
    """TURN structs; the turns listed in `degraded` point at their degraded copies."""
    return [
        {"role": role, "text": u.text,
         "audio_path": degraded_relpath(u.relpath, kind) if t in degraded else u.relpath}
        for t, (role, u) in enumerate(zip(roles, utterances))
    ]
