"""Export a reward model, or only its pooling + score head, to ONNX with a JSON sidecar.

`export_onnx` takes any RewardModel whose forward is dense tensor ops on its collate_dense output
(the compact model is built so): the batch dict becomes positional inputs in sorted key order, named
by key, dim 0 "batch" and dim 1 "length" dynamic; the one output is "reward" float32 [B].
`export_head_onnx` exports pooling + score head over any backbone's hidden states [B, L, H].
Pooling exports through the torch reference of sdscore.kernels (Triton kernels do not trace).

Two exporters: torch.export-based ("dynamo", needs the onnxscript package) and the legacy
TorchScript tracer ("torchscript": deprecated by torch, but needs nothing more). For the tracer,
this module adds an ONNX symbolic for aten::isneginf and, while exporting (process-wide: do not
run torch attention on other threads meanwhile), swaps
torch.nn.functional.multi_head_attention_forward for an equivalent that traces: the stock one
bakes the example's sequence length into a Reshape (pytorch#117209, #122321), so a model built
on nn.TransformerEncoder would only run at that length. Every export is then checked against
torch with onnxruntime, on the example and on a smaller batch (which catches baked-in sizes).

Files are written atomically: `<name>.onnx` and the sidecar `<name>.json` (input names, dtypes
and shapes, the output, opset, exporter, source model; format in onnx_sidecar), which onnx_backend
and tensorrt_backend read. Weights are stored inside the .onnx file, so a model must stay under protobuf's 2 GiB.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import inspect
import math
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import sdscore
from sdscore.atomic_write import atomic_path, write_json
from sdscore.errors import MissingDependencyError, ModelError
from sdscore.models.base import RewardModel
from sdscore.models.episodes import Episode, Turn
from sdscore.models.heads import Pooler, PoolingHead
from sdscore.models.loading import load_reward_model
from sdscore.runtime.reward.onnx_sidecar import (
    BATCH_AXIS,
    LENGTH_AXIS,
    OUTPUT_NAME,
    SIDECAR_FORMAT,
    SIDECAR_VERSION,
    dtype_name,
    sidecar_path,
)

EXPORTERS = ("auto", "dynamo", "torchscript")
FORMATS = ("onnx", "tensorrt")
WHAT = ("model", "head")
#: kinds whose forward is dense tensor ops on the collate_dense output; a class may instead set
#: `dense_exportable = True | False`
DENSE_KINDS = frozenset({"compact"})
#: the post-export check passes when |onnx - torch| <= CHECK_TOLERANCE * (1 + |torch|)
CHECK_TOLERANCE = 1e-3


# --- the example batch -----------------------------------------------------------------------


def _shapes(batch: Mapping[str, torch.Tensor]) -> dict[str, list[str | int]]:
    """Each input's shape with dim 0 "batch" and dim 1 "length" (or "<name>_length" where its size
    differs from the attention mask's, so unrelated dims are not tied), the rest fixed."""
    wide = [n for n in sorted(batch) if batch[n].ndim >= 2]
    ref = "attention_mask" if "attention_mask" in wide else (wide[0] if wide else None)
    shapes = {}
    for name in sorted(batch):
        t = batch[name]
        shape: list[str | int] = [BATCH_AXIS]
        if t.ndim >= 2:
            same = t.shape[1] == batch[ref].shape[1]
            shape.append(LENGTH_AXIS if same else f"{name}_length")
            shape.extend(int(s) for s in t.shape[2:])
        shapes[name] = shape
    return shapes


def _check_example(batch: Any) -> None:
    """TypeError unless `batch` is a non-empty dict of tensors; ValueError unless they share a batch
    size >= 2 and have length >= 2."""
    if not isinstance(batch, Mapping) or not batch:
        raise TypeError(f"the example batch must be a non-empty dict of tensors, got {type(batch).__name__}")
    sizes = {}
    for name, value in batch.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise TypeError(f"example batch entry {name!r} must be a torch.Tensor keyed by str, got {type(value).__name__}")
        if value.ndim == 0:
            raise ValueError(f"example input {name!r} is a scalar; every input needs a batch dimension")
        sizes[name] = int(value.shape[0])
        if value.shape[0] < 2 or (value.ndim >= 2 and value.shape[1] < 2):
            raise ValueError(
                f"example input {name!r} has shape {tuple(value.shape)}: export needs batch >= 2 and length >= 2 "
                "(a size-1 dim is traced as a constant and would not stay dynamic)"
            )
    if len(set(sizes.values())) > 1:
        raise ValueError(f"example inputs disagree on the batch size: {sizes}")


# --- export mode -----------------------------------------------------------------------------

_STOCK_MHA = F.multi_head_attention_forward
_MHA_SIGNATURE = inspect.signature(_STOCK_MHA)


def _mha_forward_traceable(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """F.multi_head_attention_forward with no Python sizes, so the tracer keeps L and B dynamic.

    Covers batched inference (no bias_k/v, zero-attn, static k/v, causal hint or dropout); other
    calls go to the stock function. Same math: softmax(q kᵀ / √d + masks) v, then out_proj.
    """
    bound = _MHA_SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    masks = (a["key_padding_mask"], a["attn_mask"])
    covered = (
        a["query"].dim() == 3
        and a["bias_k"] is None and a["bias_v"] is None and not a["add_zero_attn"]
        and a["static_k"] is None and a["static_v"] is None and not a["is_causal"]
        and not (a["training"] and a["dropout_p"] > 0)
        and all(m is None or m.dtype == torch.bool or m.is_floating_point() for m in masks)
    )
    if not covered:
        return _STOCK_MHA(*args, **kwargs)
    heads = int(a["num_heads"])
    head_dim = int(a["embed_dim_to_check"]) // heads
    if a["use_separate_proj_weight"]:
        w_q, w_k, w_v = a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"]
    else:
        w_q, w_k, w_v = a["in_proj_weight"].chunk(3)
    b_q = b_k = b_v = None
    if a["in_proj_bias"] is not None:
        b_q, b_k, b_v = a["in_proj_bias"].chunk(3)

    def split(x: torch.Tensor) -> torch.Tensor:  # [L, B, E] -> [B, heads, L, head_dim]
        return x.unflatten(-1, (heads, head_dim)).permute(1, 2, 0, 3)

    q = split(F.linear(a["query"], w_q, b_q))
    k = split(F.linear(a["key"], w_k, b_k))
    v = split(F.linear(a["value"], w_v, b_v))
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(head_dim))
    for mask, view in ((a["attn_mask"], "attn"), (a["key_padding_mask"], "kpm")):
        if mask is None:
            continue
        if mask.dtype == torch.bool:
            mask = torch.zeros_like(mask, dtype=scores.dtype).masked_fill(mask, float("-inf"))
        mask = mask.to(scores.dtype)
        if view == "kpm":
            mask = mask[:, None, None, :]  # [B, S] -> [B, 1, 1, S]
        elif mask.dim() == 3:
            mask = mask.unflatten(0, (-1, heads))  # [B * heads, L, S] -> [B, heads, L, S]
        scores = scores + mask
    weights = scores.softmax(-1)
    out = torch.matmul(weights, v).permute(2, 0, 1, 3).flatten(2)  # [L, B, E]
    out = F.linear(out, a["out_proj_weight"], a["out_proj_bias"])
    if not a["need_weights"]:
        return out, None
    return out, weights.mean(1) if a["average_attn_weights"] else weights


def _isneginf_symbolic(g: Any, x: Any) -> Any:
    return g.op("IsInf", x, detect_negative_i=1, detect_positive_i=0)


@contextlib.contextmanager
def _export_mode(module: nn.Module, exporter: str) -> Iterator[None]:
    """Eval mode, torch-reference pooling, no fused MHA fast path, quiet exporter; all restored.

    `module` must be the module handed to torch.onnx.export: the exporter restores that module's
    training flag recursively when it finishes, which would switch dropout back on in a model
    that was only set to eval underneath it.
    """
    modes = {m: m.training for m in module.modules()}
    poolers = {m: m.impl for m in module.modules() if isinstance(m, Pooler)}
    fastpath = torch.backends.mha.get_fastpath_enabled()
    try:
        module.eval()
        for pooler in poolers:
            pooler.impl = "torch"
        torch.backends.mha.set_fastpath_enabled(False)
        if exporter == "torchscript":
            torch.onnx.register_custom_op_symbolic("aten::isneginf", _isneginf_symbolic, 10)
            F.multi_head_attention_forward = _mha_forward_traceable
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            for message in ("You are using the legacy TorchScript-based ONNX export", "The feature will be removed",
                            r"# The axis name: .* will not be used", r"`isinstance\(treespec, LeafSpec\)`",
                            "Exporting aten::index operator of advanced indexing"):  # last_token clamps to >= 0
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        F.multi_head_attention_forward = _STOCK_MHA
        torch.backends.mha.set_fastpath_enabled(fastpath)
        for pooler, impl in poolers.items():
            pooler.impl = impl
        for m, training in modes.items():
            m.training = training


def resolve_exporter(exporter: str) -> str:
    """"dynamo" or "torchscript"; "auto" takes dynamo when onnxscript is installed."""
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {EXPORTERS}, got {exporter!r}")
    has_onnxscript = importlib.util.find_spec("onnxscript") is not None
    if exporter == "auto":
        return "dynamo" if has_onnxscript else "torchscript"
    if exporter == "dynamo" and not has_onnxscript:
        raise MissingDependencyError("exporter='dynamo' needs the onnxscript package: pip install onnxscript")
    return exporter


class _Positional(nn.Module):
    """fn(dict(zip(names, inputs))) as float32: the positional module the exporters trace."""

    def __init__(self, model: nn.Module, names: list[str]):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(dict(zip(self.names, inputs))).float()


class _HeadOnBatch(nn.Module):
    """A PoolingHead called with a batch dict {"hidden", "attention_mask"}."""

    def __init__(self, head: PoolingHead):
        super().__init__()
        self.head = head

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.head(batch["hidden"], batch["attention_mask"])


# --- export ----------------------------------------------------------------------------------


def _trimmed(batch: Mapping[str, torch.Tensor], shapes: dict[str, list]) -> dict[str, torch.Tensor]:
    """One row and one position fewer on every dynamic axis: a second shape for the check."""
    out = {}
    for name, t in batch.items():
        for dim, axis in enumerate(shapes[name]):
            if isinstance(axis, str):
                t = t.narrow(dim, 0, t.shape[dim] - 1)
        out[name] = t
    return out


def _check_parity(onnx_file: Path, module: nn.Module, names: list[str], batches: list[dict]) -> float:
    """Largest |onnxruntime - torch| / (1 + |torch|) over `batches`; ModelError past CHECK_TOLERANCE."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    feeds = {i.name for i in session.get_inputs()}
    worst = 0.0
    for batch in batches:
        want = module(*(batch[n] for n in names)).float().cpu().numpy()
        shape = tuple(batch[names[0]].shape)
        try:
            (got,) = session.run([OUTPUT_NAME], {n: batch[n].detach().cpu().numpy() for n in names if n in feeds})
        except Exception as error:  # onnxruntime's errors share no public base class
            raise ModelError(f"export check failed: onnxruntime cannot run the export at {names[0]} shape {shape}: {error}") from error
        nan_mismatch = np.isnan(got) != np.isnan(want)
        if got.shape != want.shape or nan_mismatch.any():
            raise ModelError(f"export check failed: onnxruntime gave {got.tolist()}, torch {want.tolist()}")
        error = np.abs(np.nan_to_num(got) - np.nan_to_num(want)) / (1 + np.abs(np.nan_to_num(want)))
        worst = max(worst, float(error.max(initial=0.0)))
    if worst > CHECK_TOLERANCE:
        raise ModelError(
            f"export check failed: onnxruntime and torch differ by {worst:.3g} (relative; tolerance "
            f"{CHECK_TOLERANCE}) on shapes {[tuple(b[names[0]].shape) for b in batches]}"
        )
    return worst


def _export(module: nn.Module, example: dict[str, torch.Tensor], path: Path, opset: int, exporter: str,
            meta: dict[str, Any]) -> Path:
    """Trace `module` (a _Positional) on `example`, check it, write .onnx and sidecar atomically."""
    import onnx

    names = sorted(example)
    shapes = _shapes(example)
    args = tuple(example[n] for n in names)
    with atomic_path(path) as temp:
        if exporter == "dynamo":
            dims: dict[str, Any] = {}
            dynamic = tuple(
                {d: dims.setdefault(ax, torch.export.Dim(ax)) for d, ax in enumerate(shapes[n]) if isinstance(ax, str)}
                for n in names
            )
            torch.onnx.export(module, args, str(temp), input_names=names, output_names=[OUTPUT_NAME],
                              opset_version=opset, dynamo=True, dynamic_shapes=(dynamic,), external_data=False,
                              verbose=False)
        else:
            axes = {n: {d: ax for d, ax in enumerate(shapes[n]) if isinstance(ax, str)} for n in names}
            axes[OUTPUT_NAME] = {0: BATCH_AXIS}
            torch.onnx.export(module, args, str(temp), input_names=names, output_names=[OUTPUT_NAME],
                              opset_version=opset, dynamic_axes=axes, dynamo=False)
        graph = onnx.load(str(temp))
        onnx.checker.check_model(graph)
        worst = _check_parity(temp, module, names, [example, _trimmed(example, shapes)])
    initializers = {i.name for i in graph.graph.initializer}
    kept = [i.name for i in graph.graph.input if i.name not in initializers]
    opsets = [o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")]
    meta = {
        "format": SIDECAR_FORMAT,
        "version": SIDECAR_VERSION,
        **meta,
        "exporter": exporter,
        "opset": opsets[0] if opsets else opset,
        "torch_version": torch.__version__,
        "inputs": [
            {"name": n, "dtype": dtype_name(example[n].dtype), "rank": len(shapes[n]), "shape": shapes[n]}
            for n in names if n in kept
        ],
        "output": {"name": OUTPUT_NAME, "dtype": "float32", "rank": 1, "shape": [BATCH_AXIS]},
        "check": {"max_relative_difference": worst, "tolerance": CHECK_TOLERANCE},
    }
    write_json(sidecar_path(path), meta)
    return path


def export_onnx(model: RewardModel, example_batch: dict[str, torch.Tensor], path: str | os.PathLike,
                opset: int = 17, exporter: str = "auto") -> Path:
    """Export model(batch) → reward [B] to `path` (+ sidecar), checked against torch; returns path.

    `example_batch` is a collate_dense output (batch >= 2 rows, length >= 2) on the model's device.
    """
    if not isinstance(model, RewardModel):
        raise TypeError(f"export_onnx takes a RewardModel, got {type(model).__name__}")
    _check_example(example_batch)
    exporter = resolve_exporter(exporter)
    names = sorted(example_batch)
    meta = {
        "what": "model",
        "source_kind": getattr(model, "kind", type(model).__name__),
        "sdscore_version": sdscore.__version__,
        "padding_side": model.padding_side,
        "sample_rate": int(model.sample_rate),
        "hidden_size": model.hidden_size,
        "pooling": getattr(model.pooler, "kind", None),
    }
    module = _Positional(model, names)
    with _export_mode(module, exporter):
        return _export(module, dict(example_batch), Path(path), opset, exporter, meta)


def export_head_onnx(head: PoolingHead, hidden_size: int, path: str | os.PathLike, opset: int = 17,
                     exporter: str = "auto", source_kind: str = "head") -> Path:
    """Export pooling + score head: hidden [B, L, H] float32 + attention_mask [B, L] int64 → reward [B]."""
    if not isinstance(head, PoolingHead):
        raise TypeError(f"export_head_onnx takes a heads.PoolingHead, got {type(head).__name__}")
    if head.score_head.in_features != hidden_size:
        raise ValueError(f"hidden_size is {hidden_size} but the head takes {head.score_head.in_features}")
    exporter = resolve_exporter(exporter)
    head = copy.deepcopy(head).float()
    gen = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]])
    example = {"attention_mask": mask, "hidden": torch.randn(4, 5, hidden_size, generator=gen)}
    device = head.score_head.weight.device
    example = {k: v.to(device) for k, v in example.items()}
    meta = {
        "what": "head",
        "source_kind": source_kind,
        "sdscore_version": sdscore.__version__,
        "hidden_size": int(hidden_size),
        "pooling": head.pooler.kind,
    }
    module = _Positional(_HeadOnBatch(head), sorted(example))
    with _export_mode(module, exporter):
        return _export(module, example, Path(path), opset, exporter, meta)


# --- from a model directory (what `sdscore export` calls) ------------------------------------


def example_episodes(sample_rate: int) -> list[Episode]:
    """Three tiny synthetic episodes of different lengths (text + short sine clips) for tracing."""

    def tone(seconds: float, hz: float) -> np.ndarray:
        t = np.arange(int(seconds * sample_rate), dtype=np.float32) / sample_rate
        return (0.1 * np.sin(2 * np.pi * hz * t)).astype(np.float32)

    return [
        Episode((Turn("user", "How is the weather today?", tone(0.4, 220.0)),
                 Turn("assistant", "Sunny and warm: a good day for a walk.", tone(0.7, 330.0))), "modality", "export-0"),
        Episode((Turn("user", "Tell me a joke.", tone(0.3, 440.0)),
                 Turn("assistant", "Why did the chicken cross the road?", tone(0.5, 262.0))), "colloquialness", "export-1"),
        Episode((Turn("user", "Hi."), Turn("assistant", "Hello!", tone(0.2, 196.0))), None, "export-2"),
    ]


def example_batch(model: RewardModel) -> dict[str, torch.Tensor]:
    """model.collate_dense of model.prepare over example_episodes, on the model's device."""
    items = [model.prepare(ep, [t.audio for t in ep.turns]) for ep in example_episodes(int(model.sample_rate))]
    batch = model.collate_dense(items)
    weight = next(model.parameters(), None)
    return {k: v.to(weight.device) for k, v in batch.items()} if weight is not None else batch


def is_dense_exportable(model: RewardModel) -> bool:
    """True if the whole forward exports (dense ops on collate_dense output), not only the head."""
    flag = getattr(type(model), "dense_exportable", None)
    return bool(flag) if flag is not None else getattr(model, "kind", None) in DENSE_KINDS


def head_of(model: RewardModel) -> PoolingHead:
    """A float32 PoolingHead holding the model's pooler + score_head weights."""
    if not isinstance(model.pooler, Pooler):
        raise ModelError(f"a {model.kind} model's pooler is a {type(model.pooler).__name__}, not heads.Pooler")
    head = PoolingHead(model.hidden_size, model.pooler.kind, bias=model.score_head.bias is not None)
    head.load_state_dict({k: v.float() for k, v in model.head_state().items()})
    return head.eval()


def export_model(model_dir: str | os.PathLike, fmt: str = "onnx", out: str | os.PathLike | None = None,
                 what: str = "model", max_batch: int = 64, max_length: int = 4096, *, opset: int = 17,
                 exporter: str = "auto", fp16: bool = False, workspace_gb: float = 4.0) -> list[Path]:
    """Export the reward model in `model_dir` to `out` (default `<model_dir>/export`); returns files written.

    what="model": the whole model as model.onnx (dense-exportable kinds only, e.g. compact);
    what="head": pooling + score head over hidden states as head.onnx (any kind — HF backbones
    export with their own tools). fmt="tensorrt" also builds `<stem>.trt.engine` with profiles
    over batch 1..max_batch and length 1..max_length.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if what not in WHAT:
        raise ValueError(f"what must be one of {WHAT}, got {what!r}")
    if fmt == "tensorrt":
        from sdscore.runtime.reward.tensorrt_backend import require_tensorrt

        require_tensorrt()  # fail before minutes of export work
    model = load_reward_model(model_dir)
    if what == "model" and not is_dense_exportable(model):
        raise ModelError(
            f"{model_dir}: a {model.kind} model's forward is not dense tensor ops (a Hugging Face backbone), so it "
            "cannot export whole; export its pooling + score head with what='head' (`--what head`) and the "
            "backbone with its own exporter"
        )
    folder = Path(out) if out is not None else Path(model_dir) / "export"
    if what == "model":
        onnx_file = export_onnx(model, example_batch(model), folder / "model.onnx", opset, exporter)
    else:
        onnx_file = export_head_onnx(head_of(model), model.hidden_size, folder / "head.onnx", opset, exporter,
                                     source_kind=model.kind)
    written = [onnx_file, sidecar_path(onnx_file)]
    if fmt == "tensorrt":
        from sdscore.runtime.reward.tensorrt_backend import build_engine

        engine = build_engine(onnx_file, folder / f"{onnx_file.stem}.trt.engine", fp16=fp16,
                              workspace_gb=workspace_gb, max_batch=max_batch, max_length=max_length)
        written += [engine, sidecar_path(engine)]
    return written
