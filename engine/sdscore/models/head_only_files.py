"""The files of a head-only directory (`sdscore train reward --head-only`), and reading them.

`sdscore_head.json` ({"base_model", "kind", "pooling", "hidden_size", ...}) names the base model
directory; `head.safetensors` holds the score head. head_only.py writes them; loading.py reads
them and loads the base with this head over it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from sdscore.checkpoint_files import (
    check_finite,
    check_floats,
    read_json,
    read_safetensors,
)
from sdscore.errors import ModelError

HEAD_ONLY_CONFIG = "sdscore_head.json"
HEAD_ONLY_WEIGHTS = "head.safetensors"


def read_head_only(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(sdscore_head.json, head weights) of a head-only folder; ModelError saying what is wrong."""
    folder = Path(path)
    config_file, weights_file = folder / HEAD_ONLY_CONFIG, folder / HEAD_ONLY_WEIGHTS
    if not config_file.is_file():
        raise ModelError(f"{folder}: {HEAD_ONLY_CONFIG} is missing")
    meta = read_json(config_file)
    needed = ("base_model", "kind", "pooling", "hidden_size")
    if not isinstance(meta, dict) or any(k not in meta for k in needed):
        raise ModelError(f"{config_file}: needs the keys {list(needed)}")
    for key in ("base_model", "kind", "pooling"):
        if not isinstance(meta[key], str):
            raise ModelError(f"{config_file}: {key} must be a string, got {meta[key]!r}")
    size = meta["hidden_size"]
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise ModelError(f"{config_file}: hidden_size must be a positive integer, got {size!r}")
    state = read_safetensors(weights_file)
    check_floats(state.items(), weights_file)
    check_finite(state.items(), weights_file)
    return meta, state
