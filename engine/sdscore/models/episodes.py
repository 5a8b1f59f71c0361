"""Episodes: the unit a reward model scores — turns of (role, text, audio), plus the criterion.

Audio is a path (loaded by the scorer in batches with sdscore.audio.load_many) or a waveform
already in memory, which is what an RL rollout loop passes: float mono samples as a numpy array,
a torch tensor on any device, or any DLPack array (cupy, jax, ...), at the model's sample rate
unless the turn's `sample_rate` says otherwise (the scorer then resamples it: numpy on the host
by the core, tensors on their device; see sdscore.audio.dlpack_waveforms).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from sdscore.corpus.schemas import CRITERIA, TURN_ROLES

AudioLike = str | os.PathLike | np.ndarray | Any  # Any: a torch.Tensor or a DLPack array (kept lazy)


@dataclass(frozen=True)
class Turn:
    """One turn: role in {"user", "assistant", "system"}, its text and/or its audio.

    sample_rate: the rate of an in-memory waveform when it is not the model's (None: the model's);
    a path's rate comes from its file."""

    role: str
    text: str | None = None
    audio: AudioLike | None = None
    sample_rate: int | None = None

    def __post_init__(self) -> None:
        if self.role not in TURN_ROLES:
            raise ValueError(f"turn role must be one of {TURN_ROLES}, got {self.role!r}")
        if self.text is None and self.audio is None:
            raise ValueError(f"a {self.role} turn needs text or audio (both are missing)")
        if self.sample_rate is not None:
            rate = self.sample_rate
            if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not 1 <= rate <= 1_000_000:
                raise ValueError(f"turn sample_rate must be an integer number of Hz in 1..1000000, got {rate!r}")
            if self.audio is None or isinstance(self.audio, (str, os.PathLike)):
                raise ValueError("turn sample_rate is for an in-memory waveform (a file's rate comes from the file)")


@dataclass(frozen=True)
class Episode:
    """A multi-turn spoken dialogue; the last turn is the candidate the reward judges.

    criterion ("modality" | "colloquialness" | None) selects the instruction a criterion-
    conditioned model is given; `id` only labels errors and outputs.
    """

    turns: tuple[Turn, ...]
    criterion: str | None = None
    id: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", tuple(self.turns))
        if not self.turns:
            raise ValueError(f"episode {self.id or '?'}: has no turns")
        if self.criterion is not None and self.criterion not in CRITERIA:
            raise ValueError(f"episode {self.id or '?'}: criterion must be one of {CRITERIA}, got {self.criterion!r}")

    def audio_paths(self) -> list[str]:
        """The paths among this episode's audio, in turn order (in-memory waveforms excluded)."""
        return [os.fspath(t.audio) for t in self.turns if isinstance(t.audio, (str, os.PathLike))]

    @staticmethod
    def from_messages(messages: list[dict], criterion: str | None = None, id: str = "") -> Episode:
        """An episode from SDiaReward/OpenAI-style messages: {"role", "content": str | [items]}.

        Items are {"type": "text", "text"} or {"type": "audio", "audio": path-or-array}; texts of
        one turn are joined with a space, a turn holds one audio item at most.
        """
        turns = []
        for n, m in enumerate(messages):
            content = m.get("content")
            if isinstance(content, str) or content is None:
                turns.append(Turn(m["role"], content, m.get("audio")))
                continue
            texts = [c["text"] for c in content if c.get("type") == "text" and c.get("text") is not None]
            audio = [c.get("audio") for c in content if c.get("type") == "audio"]
            if len(audio) > 1:
                raise ValueError(f"episode {id or '?'} turn {n}: {len(audio)} audio items (at most one per turn)")
            turns.append(Turn(m["role"], " ".join(texts) if texts else None, audio[0] if audio else None))
        return Episode(tuple(turns), criterion, id)


def _turns(structs: list[dict] | None) -> tuple[Turn, ...]:
    return tuple(Turn(t["role"], t.get("text"), t.get("audio_path")) for t in structs or ())


def episodes_from_pairs(pairs: pl.DataFrame) -> tuple[list[Episode], list[Episode]]:
    """Chosen and rejected episodes of validated REWARD_PAIRS rows (audio paths already resolved)."""
    chosen, rejected = [], []
    for row in pairs.select("pair_id", "criterion", "chosen", "rejected").iter_rows(named=True):
        pid = row["pair_id"]
        chosen.append(Episode(_turns(row["chosen"]), row["criterion"], f"{pid}/chosen"))
        rejected.append(Episode(_turns(row["rejected"]), row["criterion"], f"{pid}/rejected"))
    return chosen, rejected
