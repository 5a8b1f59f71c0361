"""Find the adapter whose on-disk layout a directory holds, and load it (local files only).

Layouts: compact (`sdscore_reward.json`), SDiaReward Qwen2.5-Omni thinker checkpoints, TRL
sequence-classification checkpoints, and head-only directories (`sdscore_head.json` naming a
base model directory plus `head.safetensors`, written by `sdscore train reward --head-only`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from sdscore.errors import ModelError
from sdscore.models.base import RewardModel

#: adapter classes by kind, imported lazily (transformers is an optional extra)
ADAPTERS = {
    "compact": ("sdscore.models.compact", "CompactRewardModel"),
    "sdiareward-qwen-omni": ("sdscore.models.sdiareward_qwen", "SDiaRewardQwenOmni"),
    "trl-seqcls": ("sdscore.models.trl_seqcls", "TrlSequenceClassifier"),
}

HEAD_ONLY_CONFIG = "sdscore_head.json"
HEAD_ONLY_WEIGHTS = "head.safetensors"


def adapter_class(kind: str) -> type[RewardModel]:
    """The adapter class for a kind; ModelError for an unknown one."""
    if kind not in ADAPTERS:
        raise ModelError(f"unknown reward model kind {kind!r}; expected one of {sorted(ADAPTERS)}")
    module, name = ADAPTERS[kind]
    return getattr(importlib.import_module(module), name)


def detect_kind(path: str | os.PathLike) -> str:
    """The kind of checkpoint a directory holds; ModelError saying what was looked for."""
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"{folder}: not a directory (a reward model is a local checkpoint directory)")
    for kind in ADAPTERS:
        try:
            cls = adapter_class(kind)
        except ImportError:
            continue
        if cls.claims(folder):
            return kind
    raise ModelError(
        f"{folder}: no reward model layout recognised (looked for sdscore_reward.json, an SDiaReward "
        f"Qwen2.5-Omni thinker checkpoint with score_head, a *ForSequenceClassification config.json, "
        f"or {HEAD_ONLY_CONFIG})"
    )


def load_reward_model(path: str | os.PathLike, kind: str | None = None, **options: Any) -> RewardModel:
    """Load a reward model directory (head-only directories load their base, then the head)."""
    folder = Path(path)
    if (folder / HEAD_ONLY_CONFIG).is_file():
        from sdscore.models.head_only import load_head_only

        return load_head_only(folder, **options)
    cls = adapter_class(kind or detect_kind(folder))
    return cls.from_dir(folder, **options)
