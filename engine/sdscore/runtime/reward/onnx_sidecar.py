"""The JSON sidecar of an exported model: the contract between onnx_export and the backends.

onnx_export writes `<name>.json` beside `<name>.onnx` ({"format", "version", "inputs": [{name,
dtype, rank, shape}], "output", "opset", ...}); onnx_backend and tensorrt_backend read it, and
tensorrt_backend writes `<stem>.trt.json` beside an engine (the ONNX sidecar plus the profile).
Shapes name dim 0 BATCH_AXIS and lengths LENGTH_AXIS (or "<input>_length"); the one output is
OUTPUT_NAME, float32 [batch]. Dtypes are spelled as `dtype_name` spells them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sdscore.checkpoint_files import read_json
from sdscore.errors import ModelError

SIDECAR_FORMAT = "sdscore-onnx"
SIDECAR_VERSION = 1
OUTPUT_NAME = "reward"
BATCH_AXIS = "batch"
LENGTH_AXIS = "length"


def sidecar_path(path: str | os.PathLike) -> Path:
    """The sidecar beside an exported file: `<stem>.json` (model.onnx → model.json)."""
    return Path(path).with_suffix(".json")


def read_sidecar(path: str | os.PathLike) -> dict[str, Any]:
    """The sidecar of an exported file (or the .json itself); ModelError if missing or malformed."""
    path = Path(path)
    file = path if path.suffix == ".json" else sidecar_path(path)
    if not file.is_file():
        raise ModelError(f"{file}: sidecar is missing (export writes it beside {path.name}; run `sdscore export` again)")
    meta = read_json(file, "sidecar JSON")
    if not isinstance(meta, dict) or meta.get("format") != SIDECAR_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ModelError(f"{file}: not an sdscore export sidecar (format {found!r}, expected {SIDECAR_FORMAT!r})")
    version = meta.get("version")
    if not isinstance(version, int) or version > SIDECAR_VERSION:
        raise ModelError(f"{file}: sidecar version {version!r} is not supported (this sdscore reads <= {SIDECAR_VERSION})")
    inputs = meta.get("inputs")
    good = isinstance(inputs, list) and inputs and all(
        isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("dtype"), str)
        and isinstance(s.get("shape"), list) and s.get("rank") == len(s["shape"])
        for s in inputs
    )
    if not good:
        raise ModelError(f"{file}: 'inputs' must be a non-empty list of {{name, dtype, rank, shape}}")
    return meta


def dtype_name(dtype: torch.dtype | np.dtype) -> str:
    """"float32", "int64", "bool", ... for a torch or numpy dtype (the sidecar's spelling)."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    return np.dtype(dtype).name
