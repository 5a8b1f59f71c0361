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


def batch_to(batch: dict[str, Any], device: torch.device | str, dtype: torch.dtype | None = None,
             non_blocking: bool = True) -> dict[str, Any]:
    """A collated batch on `device`: tensors moved (floating ones cast to `dtype` when given),
    objects with a .to(device, non_blocking) method (an adapter's index plan) moved by it, plain
    values (ints) kept."""
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[key] = value.to(device, dtype=dtype if dtype is not None and value.is_floating_point() else None,
                                non_blocking=non_blocking)
        elif hasattr(value, "to"):
            out[key] = value.to(device, non_blocking=non_blocking)
        else:
            out[key] = value
    return out


def batch_pinned(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch with its host tensors (and plans) in page-locked memory, for asynchronous copies."""
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[key] = value if value.device.type != "cpu" else value.pin_memory()
        elif hasattr(value, "pin_memory"):
            out[key] = value.pin_memory()
        else:
            out[key] = value
    return out


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
    #: True for causal backbones that implement shared_prefix + collate_groups (pair-prefix sharing)
    supports_prefix_sharing: ClassVar[bool] = False
    #: True when prepare/prepare_many take an in-memory waveform as a float32 torch tensor on the
    #: model's device (its front end runs there); False: the scorer hands numpy arrays (a tensor on
    #: the CPU as a view of its memory, one elsewhere copied to the host)
    takes_device_waveforms: ClassVar[bool] = False

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
        """Pad prepared items into one batch of CPU tensors (padding on `padding_side`); a value may
        also be an index plan with .to()/.pin_memory() or a plain int (see batch_to)."""

    def shared_prefix(self, a: Prepared, b: Prepared) -> int:
        """Leading tokens of a and b whose backbone states are the same in both (so a group may run
        them once); at most min(length) − 1. 0 unless the adapter supports prefix sharing."""
        return 0

    def collate_groups(self, groups: Sequence[tuple[Sequence[Prepared], int]]) -> dict[str, torch.Tensor]:
        """A batch of groups (members, shared prefix length) that inference_pooled() scores with each
        group's prefix run once; rows come out in member order, group after group."""
        raise NotImplementedError(f"{self.kind} does not share prefixes")

    #: True when collate_for_inference packs a batch without padding (the scorer then plans
    #: batches by their summed length, runtime.batching.plan_token_batches)
    packs_inference: ClassVar[bool] = False

    def collate_for_inference(self, items: Sequence[Prepared]) -> dict[str, Any]:
        """The batch inference_pooled() scores (eval mode, no autograd); adapters may lay it out
        for faster kernels (packed, no padding). The same as collate() by default."""
        return self.collate(items)

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
