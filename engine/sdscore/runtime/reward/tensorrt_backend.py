"""TensorRT backend: build an engine from an exported ONNX model, score with it on CUDA tensors.

UNVERIFIED: written against the documented TensorRT 10 Python API (Builder, create_network(0),
OnnxParser, optimization profiles, build_serialized_network, Runtime.deserialize_cuda_engine,
set_input_shape / set_tensor_address / execute_async_v3), which TensorRT 11 keeps, but never run:
the dev machine and CI have neither TensorRT nor a GPU. What is tested here: the dependency
gate, and the profile computation and checks, which are pure functions of the sidecar.
TensorRT 11 removed the weak-typing flags, so `fp16=True` works on 10.x only; on 11.x convert the
ONNX file to fp16 first (NVIDIA ModelOpt AutoCast) and build it as it is.

An engine is built with one optimization profile: each input's (min, opt, max) shape, by
default batch 1..max_batch and length 1..max_length (opt = max), other dims fixed. The engine
file `<stem>.trt.engine` gets a sidecar `<stem>.trt.json`: the ONNX sidecar plus the profile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sdscore.atomic_write import atomic_path, write_json
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.runtime.reward.onnx_backend import validate_batch
from sdscore.runtime.reward.onnx_sidecar import (
    BATCH_AXIS,
    OUTPUT_NAME,
    read_sidecar,
    sidecar_path,
)

INSTALL_HINT = "pip install 'tensorrt>=10' (on Linux with an NVIDIA GPU and a CUDA 12 driver)"

Shape = tuple[int, ...]
Profiles = dict[str, tuple[Shape, Shape, Shape]]


def require_tensorrt() -> Any:
    """The `tensorrt` module (>= 10); MissingDependencyError with an install hint otherwise."""
    try:
        import tensorrt as trt
    except ImportError as error:
        raise MissingDependencyError(f"the TensorRT backend needs the tensorrt package: {INSTALL_HINT}") from error
    major = str(getattr(trt, "__version__", "0")).split(".")[0]
    if not major.isdigit() or int(major) < 10:
        raise MissingDependencyError(f"tensorrt {getattr(trt, '__version__', '?')} is too old (the backend uses the "
                                     f"TensorRT 10 API): {INSTALL_HINT}")
    return trt


def default_profiles(sidecar: Mapping[str, Any], max_batch: int, max_length: int, *,
                     opt_batch: int | None = None, opt_length: int | None = None) -> Profiles:
    """{input: (min, opt, max) shape}: "batch" dims 1..max_batch, other named dims (lengths)
    1..max_length, fixed dims as they are; opt defaults to max (the shape a bucketed scorer runs most)."""
    ranges = {"batch": _axis_range("batch", max_batch, opt_batch), "length": _axis_range("length", max_length, opt_length)}
    profiles: Profiles = {}
    for spec in sidecar["inputs"]:
        lo, opt, hi = [], [], []
        for axis in spec["shape"]:
            if isinstance(axis, int):
                triple = (axis, axis, axis)
            else:
                triple = ranges["batch" if axis == BATCH_AXIS else "length"]
            for part, value in zip((lo, opt, hi), triple):
                part.append(value)
        profiles[spec["name"]] = (tuple(lo), tuple(opt), tuple(hi))
    return profiles


def _axis_range(what: str, top: int, opt: int | None) -> tuple[int, int, int]:
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"max {what} must be a positive int, got {top!r}")
    opt = top if opt is None else opt
    if not isinstance(opt, int) or not 1 <= opt <= top:
        raise ValueError(f"opt {what} must be an int in 1..{top}, got {opt!r}")
    return 1, opt, top


def check_profiles(sidecar: Mapping[str, Any], profiles: Mapping[str, Any]) -> Profiles:
    """Profiles as int tuples, checked against the sidecar: one per input, ranks, min <= opt <= max,
    fixed dims kept; ModelError naming the input otherwise."""
    specs = {s["name"]: s for s in sidecar["inputs"]}
    if set(profiles) != set(specs):
        raise ModelError(f"profiles cover {sorted(profiles)} but the model's inputs are {sorted(specs)}")
    checked: Profiles = {}
    for name, triple in profiles.items():
        spec = specs[name]
        try:
            lo, opt, hi = (tuple(int(d) for d in shape) for shape in triple)
        except (TypeError, ValueError) as error:
            raise ModelError(f"profile of {name!r} must be (min, opt, max) shapes, got {triple!r}") from error
        for label, shape in (("min", lo), ("opt", opt), ("max", hi)):
            if len(shape) != spec["rank"]:
                raise ModelError(f"profile of {name!r}: {label} shape {shape} has rank {len(shape)}, the input has "
                                 f"rank {spec['rank']} {spec['shape']}")
        for dim, (a, b, c, axis) in enumerate(zip(lo, opt, hi, spec["shape"])):
            if not 1 <= a <= b <= c:
                raise ModelError(f"profile of {name!r} dim {dim}: need 1 <= min <= opt <= max, got {a}, {b}, {c}")
            if isinstance(axis, int) and not a == b == c == axis:
                raise ModelError(f"profile of {name!r} dim {dim} is fixed at {axis}, got {a}, {b}, {c}")
        checked[name] = (lo, opt, hi)
    return checked


def build_engine(onnx_path: str | os.PathLike, engine_path: str | os.PathLike | None = None,
                 profiles: Mapping[str, Any] | None = None, *, fp16: bool = False, workspace_gb: float = 4.0,
                 max_batch: int = 64, max_length: int = 4096) -> Path:
    """Build a serialized TensorRT engine from an exported ONNX file; returns the engine's path.

    `profiles` maps every input to (min, opt, max) shapes (default: default_profiles over
    max_batch / max_length); fp16 lets TensorRT pick half-precision kernels; workspace_gb caps
    the builder's scratch memory. Written atomically with a `<stem>.json` sidecar.
    """
    trt = require_tensorrt()
    if fp16 and not hasattr(trt.BuilderFlag, "FP16"):
        raise ModelError(f"TensorRT {trt.__version__} has no fp16 builder flag (TensorRT 11 builds strongly typed "
                         "networks only): convert the ONNX file to fp16 first, e.g. with NVIDIA ModelOpt AutoCast")
    onnx_path = Path(onnx_path)
    engine_path = Path(engine_path) if engine_path is not None else onnx_path.with_name(f"{onnx_path.stem}.trt.engine")
    sidecar = read_sidecar(onnx_path)
    profiles = check_profiles(sidecar, profiles or default_profiles(sidecar, max_batch, max_length))
    if not workspace_gb > 0:
        raise ValueError(f"workspace_gb must be > 0, got {workspace_gb!r}")

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # TensorRT 10: explicit batch is the only mode
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ModelError(f"{onnx_path}: TensorRT's ONNX parser refused it: {errors}")
    network_inputs = sorted(network.get_input(i).name for i in range(network.num_inputs))
    if network_inputs != sorted(profiles):
        raise ModelError(f"{onnx_path}: the network takes {network_inputs} but the profiles cover {sorted(profiles)}")

    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gb * (1 << 30)))
    if fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for name, (lo, opt, hi) in profiles.items():
        profile.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ModelError(f"{onnx_path}: TensorRT could not build an engine (its log above says why)")
    with atomic_path(engine_path) as temp:
        temp.write_bytes(bytes(memoryview(serialized)))
    write_json(sidecar_path(engine_path), {
        **sidecar,
        "engine": {
            "onnx": onnx_path.name,
            "tensorrt_version": trt.__version__,
            "fp16": bool(fp16),
            "profiles": {name: [list(s) for s in triple] for name, triple in profiles.items()},
        },
    })
    return engine_path


def _torch_dtypes(trt: Any) -> dict[Any, torch.dtype]:
    names = {"FLOAT": torch.float32, "HALF": torch.float16, "BF16": torch.bfloat16, "INT8": torch.int8,
             "UINT8": torch.uint8, "INT32": torch.int32, "INT64": torch.int64, "BOOL": torch.bool}
    return {getattr(trt.DataType, k): v for k, v in names.items() if hasattr(trt.DataType, k)}


class TensorRTRewardSession:
    """A built engine on one CUDA device: `run(batch) -> float32 [B]` on that device.

    Inputs (torch CUDA/CPU tensors or numpy arrays, the sidecar's dtypes) are bound by address;
    the engine runs on torch's current stream, so the result is ordered like any torch op.
    """

    def __init__(self, engine_path: str | os.PathLike, device: str | torch.device | None = None):
        trt = require_tensorrt()
        self.path = Path(engine_path)
        if not self.path.is_file():
            raise ModelError(f"{self.path}: TensorRT engine not found")
        if not torch.cuda.is_available():
            raise ModelError("the TensorRT backend needs a CUDA device, and torch sees none")
        self.device = torch.device(device if device is not None else "cuda")
        self.sidecar = read_sidecar(self.path)
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        with torch.cuda.device(self.device):
            self.engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
            if self.engine is None:
                raise ModelError(f"{self.path}: TensorRT cannot deserialize it (built by another TensorRT version or GPU?)")
            self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.input_names = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        if OUTPUT_NAME not in names or sorted(self.input_names) != sorted(s["name"] for s in self.sidecar["inputs"]):
            raise ModelError(f"{self.path}: engine tensors {names} do not match its sidecar; build it again")
        dtypes = _torch_dtypes(trt)
        self._dtypes = {n: dtypes[self.engine.get_tensor_dtype(n)] for n in names}
        # [min, opt, max] shapes of profile 0 (the only one build_engine makes)
        self._ranges = {n: [tuple(s) for s in self.engine.get_tensor_profile_shape(n, 0)] for n in self.input_names}

    def run(self, batch: Mapping[str, torch.Tensor | np.ndarray]) -> torch.Tensor:
        """Rewards float32 [B] on the session's device for a collated batch."""
        picked, n, _ = validate_batch(self.sidecar["inputs"], batch, str(self.path))
        if n == 0:
            return torch.zeros(0, dtype=torch.float32, device=self.device)
        bound = []  # keeps the device copies alive until the enqueue
        for name in self.input_names:
            value = picked[name]
            tensor = torch.as_tensor(value) if isinstance(value, np.ndarray) else value
            tensor = tensor.to(self.device, self._dtypes[name], non_blocking=True).contiguous()
            lo, _, hi = self._ranges[name]
            shape = tuple(tensor.shape)
            if any(not a <= s <= b for a, s, b in zip(lo, shape, hi)):
                raise ModelError(f"{self.path}: input {name!r} has shape {shape}, outside the engine's profile "
                                 f"{lo}..{hi}; build it with a larger max_batch / max_length")
            self.context.set_input_shape(name, shape)
            self.context.set_tensor_address(name, tensor.data_ptr())
            bound.append(tensor)
        out = torch.empty(tuple(self.context.get_tensor_shape(OUTPUT_NAME)), dtype=self._dtypes[OUTPUT_NAME],
                          device=self.device)
        self.context.set_tensor_address(OUTPUT_NAME, out.data_ptr())
        stream = torch.cuda.current_stream(self.device)
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise ModelError(f"{self.path}: TensorRT execution failed on a batch of {n}")
        return out.float()

    __call__ = run
