"""The adapter contract every reward model implements: prepare → collate → hidden → pool → head.

`prepare` runs on CPU threads (the scorer's prefetch), one episode at a time, and reports the
sequence length the backbone will see so the scorer can bucket similar lengths; `collate` pads a
bucket on the model's padding side; `hidden` runs the backbone; `self.pooler` and
`self.score_head` (heads.py) turn its last layer into rewards. Splitting pooled states from the
head is what lets a new head be fitted on stored pooled states without re-running the backbone.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from sdscore.checkpoint_files import check_state_fits
from sdscore.errors import SdscoreError
from sdscore.models.episodes import Episode
from sdscore.models.heads import score_pooled


@dataclass
class Prepared:
    """One episode as model inputs on the CPU, before padding; length = backbone sequence length."""

    length: int
    inputs: dict[str, Any]


def left_padded_ids(items: Sequence[Prepared], pad_id: int) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask int64 [B, L] of items holding inputs["input_ids"], padded on the left."""
    width = max(item.length for item in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, item in enumerate(items):
        ids[row, width - item.length:] = torch.as_tensor(item.inputs["input_ids"])
        mask[row, width - item.length:] = 1
    return {"input_ids": ids, "attention_mask": mask}


class RewardModel(nn.Module, ABC):
    """backbone → pooler → score_head; subclasses set `self.pooler` (heads.Pooler) and
    `self.score_head` (nn.Linear(H, 1)) and are found by `sdscore.models.loading`."""

    #: the layout name written to outputs and used in errors, e.g. "compact"
    kind: ClassVar[str]
    #: the rate, in Hz, the scorer loads audio at for this model
    sample_rate: int = 16000
    #: "left" or "right": where collate puts padding
    padding_side: str = "right"
    #: False for text-only models: the scorer then never loads audio (prepare gets None per turn)
    needs_audio: bool = True

    @property
    def max_clip_seconds(self) -> float | None:
        """The longest clip the model hears whole (longer clips are cut to their start); None: no cut."""
        return None

    pooler: nn.Module
    score_head: nn.Linear

    @property
    def hidden_size(self) -> int:
        """Width H of the pooled states."""
        return int(self.score_head.in_features)

    @abstractmethod
    def prepare(self, episode: Episode, audio: Sequence[np.ndarray | None]) -> Prepared:
        """CPU inputs of one episode; audio[i] is turn i's float32 waveform at sample_rate or None.

        Must be thread-safe and must not touch the accelerator.
        """

    def prepare_many(
        self, episodes: Sequence[Episode], audio: Sequence[Sequence[np.ndarray | None]], inference: bool = False,
    ) -> list[Prepared | Exception]:
        """prepare() for many episodes; a failing episode's slot holds its exception (ValueError or
        SdscoreError), the others are prepared. Adapters override it to batch their front end.
        inference=True: the items only go to collate() + inference_pooled() of this model as it is
        now (eval mode, on its current device), so an adapter may run part of the model there."""
        out: list[Prepared | Exception] = []
        for episode, waves in zip(episodes, audio):
            try:
                out.append(self.prepare(episode, waves))
            except (SdscoreError, ValueError) as error:
                out.append(error)
        return out

    @abstractmethod
    def collate(self, items: Sequence[Prepared]) -> dict[str, torch.Tensor]:
        """Pad prepared items into one batch of CPU tensors (padding on `padding_side`)."""

    def collate_dense(self, items: Sequence[Prepared]) -> dict[str, torch.Tensor]:
        """collate() with every input laid out [B, L, ...]: what an exported graph takes (its dynamic
        axes are batch and length). The same as collate() unless an adapter packs an input there."""
        return self.collate(items)

    @abstractmethod
    def hidden(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Backbone's last layer [B, L, H] and its attention mask [B, L] for a batch on the device."""

    def pooled(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """float32 [B, H]: the pooler over the backbone's last layer."""
        hidden, mask = self.hidden(batch)
        return self.pooler(hidden, mask).float()

    def inference_pooled(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """pooled() as the scorer calls it (eval mode, no autograd): adapters may route it through
        faster kernels that give the same states; the default is pooled()."""
        return self.pooled(batch)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """float32 [B] rewards from pooled states [B, H] (computed in float32)."""
        return score_pooled(pooled, self.score_head)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Rewards float32 [B] for a collated batch."""
        return self.head(self.pooled(batch))

    @classmethod
    @abstractmethod
    def claims(cls, path: str | os.PathLike) -> bool:
        """True if the directory holds a checkpoint in this adapter's on-disk layout."""

    @classmethod
    @abstractmethod
    def from_dir(cls, path: str | os.PathLike, **options: Any) -> RewardModel:
        """Load from a local directory (never the network); raise ModelError naming what is missing."""

    def head_state(self) -> dict[str, torch.Tensor]:
        """Pooler + score_head weights by state-dict name (what `--head-only` trains and saves)."""
        named = {f"pooler.{k}": v for k, v in self.pooler.state_dict().items()}
        named.update({f"score_head.{k}": v for k, v in self.score_head.state_dict().items()})
        return {k: v.detach().cpu() for k, v in named.items()}

    def load_head(self, state: dict[str, torch.Tensor]) -> None:
        """Replace pooler + score_head weights with `state` (keys as head_state())."""
        check_state_fits(state, self.head_state(), f"{self.kind} head")
        with torch.no_grad():
            module_state = {"pooler": {}, "score_head": {}}
            for name, value in state.items():
                module, key = name.split(".", 1)
                module_state[module][key] = value
            self.pooler.load_state_dict(module_state["pooler"])
            self.score_head.load_state_dict(module_state["score_head"])
