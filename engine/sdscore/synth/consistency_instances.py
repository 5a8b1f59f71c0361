"""SpeakerSleuth-style speaker-consistency instances from synthetic voices.

Per target speaker: n_turns turns (different sentences; five in the main set, ten in the extended
set, as in the paper) and a reference passage in the target voice.
S1 keeps every turn; S2 re-voices one turn with an opposite-gender voice; S3 re-voices the same
turn with the most similar same-gender voice of another speaker (similarity.py). A
discrimination row masks that turn and offers its S1/S2/S3 versions in seeded random order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from sdscore.corpus.schemas import CONSISTENCY_INSTANCES
from sdscore.synth.render import Renderer, Utterance
from sdscore.synth.similarity import METHOD
from sdscore.synth.texts import REFERENCE_PASSAGES, TURN_SENTENCES
from sdscore.synth.voices import VOICES, VOICES_BY_ID, Voice, opposite, pick, pool

DATASET = "synthetic-tts"
N_TURNS = 5
#: the extended set: ten turns per speaker (SpeakerSleuth's 10-turn condition)
DATASET_10TURN = "synthetic-tts-10turn"
N_TURNS_10TURN = 10


@dataclass(frozen=True)
class _Speaker:
    """One target speaker's instance: turns, reference, altered turn k and its re-voicings."""

    index: int
    target: Voice
    turns: tuple[Utterance, ...]
    reference: Utterance
    k: int
    s2: Utterance
    s3: Utterance
    order: tuple[int, ...]  # shuffled positions of the S1/S2/S3 candidates


def build_consistency(
    renderer: Renderer,
    rng: np.random.Generator,
    n_speakers: int,
    similar: dict[str, tuple[str, float]],
    *,
    n_turns: int = N_TURNS,
    dataset: str = DATASET,
    id_prefix: str = "consistency",
) -> tuple[pl.DataFrame, dict]:
    """The CONSISTENCY_INSTANCES frame (3 detection rows + 1 discrimination row per speaker), each
    speaker with n_turns turns; instance ids are "<id_prefix>-<speaker index>-<S1|S2|S3|disc>"."""
    if isinstance(n_turns, bool) or not isinstance(n_turns, int) or not 2 <= n_turns <= len(TURN_SENTENCES):
        raise ValueError(f"n_turns must be an integer in 2..{len(TURN_SENTENCES)}, got {n_turns!r}")
    plans = []
    order: list[int] = []
    for i in range(n_speakers):
        if not order:
            order = [int(j) for j in rng.permutation(len(VOICES))]
        target = VOICES[order.pop()]
        sentences = [TURN_SENTENCES[int(j)] for j in rng.choice(len(TURN_SENTENCES), n_turns, replace=False)]
        reference = REFERENCE_PASSAGES[int(rng.integers(len(REFERENCE_PASSAGES)))]
        k = int(rng.integers(n_turns))
        s2 = pick(rng, pool(gender=opposite(target.gender)))
        s3 = VOICES_BY_ID[similar[target.id][0]]
        plans.append(_Speaker(
            i, target, tuple(Utterance(target, s) for s in sentences), Utterance(target, reference), k,
            Utterance(s2, sentences[k]), Utterance(s3, sentences[k]), tuple(int(j) for j in rng.permutation(3)),
        ))
    renderer.render([u for p in plans for u in (*p.turns, p.reference, p.s2, p.s3)], f"{id_prefix}: tts")

    rows = []
    for p in plans:
        base = f"{id_prefix}-{p.index:05d}"
        turn_paths = [u.relpath for u in p.turns]
        k = p.k
        common = {"dataset": dataset, "speaker_id": p.target.id, "reference_path": p.reference.relpath,
                  "masked_turn": None, "candidate_paths": None, "candidate_scenarios": None}
        for scenario, altered in (("S1", None), ("S2", p.s2), ("S3", p.s3)):
            paths = list(turn_paths)
            if altered is not None:
                paths[k] = altered.relpath
            rows.append({"instance_id": f"{base}-{scenario}", "task": "detection", "scenario": scenario,
                         "turn_paths": paths, "true_turns": [] if altered is None else [k], **common})
        candidates = [(turn_paths[k], "S1"), (p.s2.relpath, "S2"), (p.s3.relpath, "S3")]
        shuffled = [candidates[j] for j in p.order]
        rows.append({
            **common, "instance_id": f"{base}-disc", "task": "discrimination", "scenario": None,
            "turn_paths": turn_paths[:k] + turn_paths[k + 1:], "true_turns": None, "masked_turn": k,
            "candidate_paths": [c for c, _ in shuffled], "candidate_scenarios": [s for _, s in shuffled],
        })
    frame = pl.DataFrame(rows, schema=CONSISTENCY_INSTANCES)
    summary = {
        "speakers": sorted({p.target.id for p in plans}),
        "similar_voice": {v: {"voice": s, "cosine": c} for v, (s, c) in similar.items()},
        "similarity_method": METHOD,
    }
    return frame, summary
