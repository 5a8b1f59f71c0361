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

import torch

from sdscore.checkpoint_files import read_config_json
from sdscore.errors import ModelError
from sdscore.models.base import RewardModel
from sdscore.models.head_only_files import (
    HEAD_ONLY_CONFIG,
    HEAD_ONLY_WEIGHTS,
    read_head_only,
)
from sdscore.models.heads import Pooler, pooling_name

#: adapter classes by kind, imported lazily (transformers is an optional extra)
ADAPTERS = {
    "compact": ("sdscore.models.compact", "CompactRewardModel"),
    "sdiareward-qwen-omni": ("sdscore.models.sdiareward_qwen", "SDiaRewardQwenOmni"),
    "trl-seqcls": ("sdscore.models.trl_seqcls", "TrlSequenceClassifier"),
}

#: head-only folders may stack (each one's base another's folder) at most this deep
MAX_HEAD_CHAIN = 8
#: poolings without weights: a head-only folder may use one its base model does not pool with
PARAMETER_FREE = ("mean", "last")


def adapter_class(kind: str) -> type[RewardModel]:
    """The adapter class for a kind; ModelError for an unknown one."""
    if kind not in ADAPTERS:
        raise ModelError(f"unknown reward model kind {kind!r}; expected one of {sorted(ADAPTERS)}")
    module, name = ADAPTERS[kind]
    return getattr(importlib.import_module(module), name)


def detect_kind(path: str | os.PathLike) -> str:
    """The kind of checkpoint a directory holds; ModelError saying what was looked for (or what is
    wrong with a config.json that is there: invalid JSON at file:line:col, or a wrong type)."""
    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"{folder}: not a directory (a reward model is a local checkpoint directory)")
    read_config_json(folder)
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
    return _load(Path(path), kind, options, ())


def load_head_only(path: str | os.PathLike, **options: Any) -> RewardModel:
    """The base model named in sdscore_head.json (via load_reward_model) with this head loaded over it."""
    return _load_head_only(Path(path), options, ())


def _load(folder: Path, kind: str | None, options: dict[str, Any], chain: tuple[Path, ...]) -> RewardModel:
    if (folder / HEAD_ONLY_CONFIG).is_file():
        return _load_head_only(folder, options, chain)
    cls = adapter_class(kind or detect_kind(folder))
    return cls.from_dir(folder, **options)


def _load_head_only(folder: Path, options: dict[str, Any], chain: tuple[Path, ...]) -> RewardModel:
    """load_head_only; `chain`: the head-only folders whose base this one is, outermost first."""
    chain = (*chain, folder)
    meta, state = read_head_only(folder)
    base_dir = Path(meta["base_model"])
    if not base_dir.is_absolute():
        base_dir = folder / base_dir
    if not base_dir.is_dir():
        raise ModelError(f"{folder / HEAD_ONLY_CONFIG}: base model {meta['base_model']!r} is not a directory ({base_dir})")
    if base_dir.resolve() == folder.resolve():
        raise ModelError(f"{folder / HEAD_ONLY_CONFIG}: base_model points at the head-only folder itself")
    seen = [f.resolve() for f in chain]
    if base_dir.resolve() in seen:
        loop = " -> ".join(str(f) for f in (*chain[seen.index(base_dir.resolve()):], base_dir))
        raise ModelError(f"{folder / HEAD_ONLY_CONFIG}: head-only folders name each other as base_model in a cycle "
                         f"({loop}); the chain must end at a full model")
    if len(chain) >= MAX_HEAD_CHAIN and (base_dir / HEAD_ONLY_CONFIG).is_file():
        raise ModelError(f"{folder / HEAD_ONLY_CONFIG}: more than {MAX_HEAD_CHAIN} head-only folders in a row "
                         f"({' -> '.join(str(f) for f in (*chain, base_dir))}); base_model must lead to a full model")
    model = _load(base_dir, meta["kind"], options, chain)
    if model.kind != meta["kind"]:
        raise ModelError(f"{folder}: head was fitted for a {meta['kind']!r} model, {base_dir} holds {model.kind!r}")
    if int(meta["hidden_size"]) != model.hidden_size:
        raise ModelError(f"{folder}: head has hidden_size {meta['hidden_size']}, base model {base_dir} has {model.hidden_size}")
    try:
        pooling = pooling_name(meta["pooling"])
    except ValueError as error:
        raise ModelError(f"{folder / HEAD_ONLY_CONFIG}: {error}") from error
    if pooling != model.pooler.kind:
        if pooling not in PARAMETER_FREE:
            raise ModelError(f"{folder}: head uses {pooling!r} pooling but base model {base_dir} pools with "
                             f"{model.pooler.kind!r}, so there are no {pooling!r} pooler weights to use")
        device = model.score_head.weight.device
        model.pooler = Pooler(pooling, model.hidden_size).to(device)
    full = model.head_state()
    unknown = sorted(set(state) - set(full))
    if unknown:
        raise ModelError(f"{folder / HEAD_ONLY_WEIGHTS}: weights {unknown} do not fit a {model.kind} head ({sorted(full)})")
    full.update({k: torch.zeros_like(v) for k, v in full.items() if k.startswith("score_head.") and k not in state})
    full.update(state)
    model.load_head(full)
    return model
