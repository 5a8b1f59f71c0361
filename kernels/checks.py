"""Argument checks shared by the kernel ops; each failure is a ValueError quoting the sizes involved."""

from __future__ import annotations

import torch


def check_rows(x: torch.Tensor, name: str, ndim: int = 2) -> None:
    """Raise unless `x` is a floating tensor with `ndim` dimensions."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor, got {x.dtype}")


def check_same_device(**tensors: torch.Tensor | None) -> None:
    """Raise unless every given tensor lives on one device."""
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"tensors must share one device, got {listed}")


def check_offsets(offsets: torch.Tensor, n_rows: int, rows_name: str) -> None:
    """Raise unless `offsets` [B+1] is int64, starts at 0, never decreases and ends at `n_rows`.

    The value checks cost one device-to-host sync of a single flag.
    """
    if not isinstance(offsets, torch.Tensor):
        raise ValueError(f"offsets must be a torch.Tensor, got {type(offsets).__name__}")
    if offsets.ndim != 1 or offsets.numel() == 0:
        raise ValueError(f"offsets must be 1-D with at least one entry, got shape {tuple(offsets.shape)}")
    if offsets.dtype != torch.int64:
        raise ValueError(f"offsets must be int64, got {offsets.dtype}")
    if offsets.device.type == "cpu":  # read in place on the host: three numpy reductions, not six torch ops
        bounds = offsets.numpy()
        bad = bounds[0] != 0 or bounds[-1] != n_rows or bool((bounds[1:] < bounds[:-1]).any())
    else:
        bad = bool((offsets[0] != 0) | (offsets[-1] != n_rows) | (offsets[1:] < offsets[:-1]).any())
    if bad:
        first, last = int(offsets[0]), int(offsets[-1])
        if first != 0:
            raise ValueError(f"offsets must start at 0, got {first}")
        if last != n_rows:
            raise ValueError(f"offsets end at {last} but {rows_name} has {n_rows} rows")
        raise ValueError("offsets must be non-decreasing")


def check_last_dim(x: torch.Tensor, name: str, size: int, other: str) -> None:
    """Raise unless the last dimension of `x` equals `size` (the last dimension of `other`)."""
    if x.shape[-1] != size:
        raise ValueError(f"{name} has last dimension {x.shape[-1]} but {other} has {size}")
