"""Reading checkpoint files and resolving device/dtype options, with ModelErrors that name the file.

Shared by every adapter, head-only folders, export sidecars and the scorer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from sdscore.errors import ModelError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def read_json(file: Path, what: str = "JSON") -> Any:
    """Parsed JSON of `file`; ModelError "<file>: corrupt <what> (...)" when it cannot be read."""
    try:
        return json.loads(Path(file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ModelError(f"{file}: corrupt {what} ({error})") from error


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file on the CPU; ModelError naming the file when missing or corrupt."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = Path(file)
    if not file.is_file():
        raise ModelError(f"{file.parent}: {file.name} is missing")
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise ModelError(f"{file}: corrupt safetensors file ({error})") from error


def check_state_fits(
    state: dict[str, torch.Tensor], own: dict[str, torch.Tensor], where: str, against: str = "the model"
) -> None:
    """ModelError "<where>: ..." unless `state` has exactly `own`'s names, each with its shape."""
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise ModelError(f"{where}: weights do not fit {against}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for name, value in state.items():
        if tuple(value.shape) != tuple(own[name].shape):
            raise ModelError(f"{where}: weight {name} has shape {tuple(value.shape)}, {against} needs {tuple(own[name].shape)}")


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None → CPU; "auto" → CUDA when visible, else CPU; anything else as torch.device, checked:
    ModelError for a name torch does not know or a CUDA device that is not there."""
    if device is None:
        return torch.device("cpu")
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ModelError(f"unknown device {str(device)!r}; expected auto, cpu, cuda or cuda:N") from None
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ModelError(f"device {str(device)!r}: no CUDA device is visible here (use --device cpu or auto)")
        if resolved.index is not None and resolved.index >= count:
            raise ModelError(f"device {str(device)!r}: only {count} CUDA device(s) are visible")
    return resolved


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None/"auto" → bfloat16 on CUDA, float32 elsewhere; names as in DTYPES; ModelError otherwise."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; expected auto or one of {sorted(DTYPES)}")
    return DTYPES[dtype]
