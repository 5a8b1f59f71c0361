"""onnxruntime backend: score collated batches with an exported reward model (or head).

`OnnxRewardSession(path)` loads `<name>.onnx` with its sidecar (written by onnx_export), checks
each batch against the sidecar — names, ranks, dtypes, fixed sizes, one batch size and one size
per named axis — with errors that name the input, and returns rewards as float32 [B].
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sdscore.errors import ModelError
from sdscore.runtime.compute_budget import library_threads
from sdscore.runtime.reward.onnx_sidecar import OUTPUT_NAME, dtype_name, read_sidecar


def default_providers() -> list[str]:
    """CUDA first when this onnxruntime build has it, then CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    return (["CUDAExecutionProvider"] if "CUDAExecutionProvider" in available else []) + ["CPUExecutionProvider"]


def validate_batch(specs: Sequence[dict[str, Any]], batch: Mapping[str, Any],
                   where: str) -> tuple[dict[str, torch.Tensor | np.ndarray], int, torch.device]:
    """The inputs `specs` names, taken from `batch` and checked; also the batch size and the device of
    the first torch input (CPU if none). Extra keys are ignored. ModelError names the bad input."""
    if not isinstance(batch, Mapping):
        raise ModelError(f"{where}: a batch is a dict of tensors, got {type(batch).__name__}")
    names = [s["name"] for s in specs]
    missing = [n for n in names if n not in batch]
    if missing:
        raise ModelError(f"{where}: batch is missing input(s) {missing} (the model takes {names}, got {sorted(batch)})")
    picked: dict[str, torch.Tensor | np.ndarray] = {}
    axes: dict[str, tuple[str, int]] = {}
    device = None
    for spec in specs:
        name, value = spec["name"], batch[spec["name"]]
        if isinstance(value, torch.Tensor):
            device = device or value.device
        elif not isinstance(value, np.ndarray):
            raise ModelError(f"{where}: input {name!r} must be a torch.Tensor or numpy array, got {type(value).__name__}")
        shape = tuple(value.shape)
        if len(shape) != spec["rank"]:
            raise ModelError(f"{where}: input {name!r} has shape {shape} (rank {len(shape)}); the model takes rank "
                             f"{spec['rank']} {spec['shape']}")
        if dtype_name(value.dtype) != spec["dtype"]:
            raise ModelError(f"{where}: input {name!r} has dtype {dtype_name(value.dtype)}; the model takes {spec['dtype']}")
        for dim, (size, axis) in enumerate(zip(shape, spec["shape"])):
            if isinstance(axis, int) and size != axis:
                raise ModelError(f"{where}: input {name!r} has size {size} in dim {dim}; the model takes {axis} "
                                 f"(shape {spec['shape']})")
            if isinstance(axis, str):
                seen = axes.setdefault(axis, (name, size))
                if seen[1] != size:
                    raise ModelError(f"{where}: inputs disagree on {axis!r}: {seen[0]!r} has {seen[1]}, {name!r} has {size}")
        picked[name] = value
    n = axes.get("batch", (None, int(next(iter(picked.values())).shape[0])))[1]
    return picked, n, device or torch.device("cpu")


def _numpy(value: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().contiguous().numpy()
    return np.ascontiguousarray(value)


class OnnxRewardSession:
    """An exported reward model (or head) on onnxruntime: `run(batch) -> float32 [B]`.

    `batch` maps input names (the model.collate_dense keys, or hidden/attention_mask for a head) to torch
    tensors or numpy arrays with exactly the sidecar's dtypes; the rewards come back on the
    device of the first torch input. `providers` defaults to CUDA when available, then CPU;
    `intra_op_threads` caps onnxruntime's threads per call (None: the compute budget's cores(), or
    onnxruntime's default while this process has the whole machine).
    """

    def __init__(self, path: str | os.PathLike, providers: Sequence[str] | None = None,
                 intra_op_threads: int | None = None):
        import onnxruntime as ort

        self.path = Path(path)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: ONNX file not found")
        self.sidecar = read_sidecar(self.path)
        options = ort.SessionOptions()
        if intra_op_threads is not None:
            if not isinstance(intra_op_threads, int) or intra_op_threads < 1:
                raise ValueError(f"intra_op_threads must be a positive int, got {intra_op_threads!r}")
            options.intra_op_num_threads = intra_op_threads
        else:
            options.intra_op_num_threads = library_threads()  # the compute budget's share
        self.providers = list(providers) if providers else default_providers()
        unknown = sorted(set(self.providers) - set(ort.get_available_providers()))
        if unknown:
            raise ModelError(f"onnxruntime has no provider(s) {unknown}; this build has {ort.get_available_providers()}")
        try:
            self.session = ort.InferenceSession(str(self.path), sess_options=options, providers=self.providers)
        except Exception as error:  # onnxruntime's errors share no public base class
            raise ModelError(f"{self.path}: onnxruntime cannot load it ({error})") from error
        self.inputs: list[dict[str, Any]] = self.sidecar["inputs"]
        graph = sorted(i.name for i in self.session.get_inputs())
        if graph != sorted(s["name"] for s in self.inputs):
            raise ModelError(f"{self.path}: the graph takes {graph} but its sidecar lists "
                             f"{sorted(s['name'] for s in self.inputs)}; export again")

    @property
    def input_names(self) -> list[str]:
        return [s["name"] for s in self.inputs]

    def run(self, batch: Mapping[str, torch.Tensor | np.ndarray]) -> torch.Tensor:
        """Rewards float32 [B] for a collated batch."""
        picked, n, device = validate_batch(self.inputs, batch, str(self.path))
        if n == 0:
            return torch.zeros(0, dtype=torch.float32, device=device)
        try:
            (out,) = self.session.run([OUTPUT_NAME], {k: _numpy(v) for k, v in picked.items()})
        except Exception as error:
            raise ModelError(f"{self.path}: onnxruntime failed on a batch of {n}: {error}") from error
        return torch.from_numpy(np.asarray(out, dtype=np.float32)).to(device)

    __call__ = run
