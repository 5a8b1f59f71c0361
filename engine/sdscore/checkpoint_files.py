"""Reading checkpoint files and resolving device/dtype options, with ModelErrors that name the file.

Shared by every reward-model adapter, head-only folders, export sidecars, the scorer and the
speaker embedders, so it sits below both models/ and features/ (peers that must not import each
other). A hostile or broken folder gets one ModelError naming the file and the problem, before
anything large is allocated where that can be told from the files: JSON that does not parse
(file:line:col) or has wrong types; pickles that need more than tensors (never unpickled with
code); config sizes that the weight files' shapes (safetensors headers, read without loading) do
not show; integer tensors where float weights belong; NaN or Inf weights (one pass at load).
"""

from __future__ import annotations

import json
import pickle
import re
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sdscore.errors import ModelError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def read_json(file: Path, what: str = "JSON") -> Any:
    """Parsed JSON of `file`; ModelError "<file>:<line>:<col>: corrupt <what>: <why>" when it does
    not parse, "<file>: cannot read <what> (...)" when it cannot be read."""
    try:
        return json.loads(Path(file).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ModelError(f"{file}:{error.lineno}:{error.colno}: corrupt {what}: {error.msg}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ModelError(f"{file}: cannot read {what} ({error})") from None


def read_config_json(folder: Path) -> dict[str, Any] | None:
    """A folder's transformers config.json as a dict (None when there is none); ModelError for
    invalid JSON, a value that is not an object, or `architectures` / `model_type` / `num_labels`
    of the wrong type."""
    file = Path(folder) / "config.json"
    if not file.is_file():
        return None
    config = read_json(file)
    if not isinstance(config, dict):
        raise ModelError(f"{file}: expected a JSON object, got {type(config).__name__}")
    architectures = config.get("architectures")
    if architectures is not None and not (isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)):
        raise ModelError(f"{file}: architectures must be a list of class names, got {architectures!r}")
    if config.get("model_type") is not None and not isinstance(config["model_type"], str):
        raise ModelError(f"{file}: model_type must be a string, got {config['model_type']!r}")
    labels = config.get("num_labels")
    if labels is not None and (not isinstance(labels, int) or isinstance(labels, bool)):
        raise ModelError(f"{file}: num_labels must be an integer, got {labels!r}")
    return config


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file on the CPU; ModelError naming the file when missing or corrupt."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    file = Path(file)
    if not file.is_file():
        raise missing_safetensors(file)
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise ModelError(f"{file}: corrupt safetensors file ({error})") from error


def missing_safetensors(file: Path) -> ModelError:
    """The ModelError for a safetensors file that is not there, naming the pickles found instead."""
    file = Path(file)
    pickles = pickle_files(file.parent)
    if pickles:
        return ModelError(f"{file.parent}: {file.name} is missing and {pickles[0].name} is a pickle checkpoint, "
                          "which sdscore does not load (a pickle can run code): save the weights as safetensors")
    return ModelError(f"{file.parent}: {file.name} is missing")


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
    if resolved.type not in ("cpu", "cuda"):  # torch knows mps, meta, xpu...: sdscore's models run on neither
        raise ModelError(f"device {str(device)!r}: sdscore runs models on cpu or cuda only; expected auto, cpu, "
                         "cuda or cuda:N")
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


# --- pickles ------------------------------------------------------------------------------------

#: file names of torch pickle checkpoints (what torch.save and transformers' pytorch_model.bin write)
PICKLE_PATTERNS = ("pytorch_model*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def pickle_files(folder: Path) -> list[Path]:
    """The torch pickle checkpoints in `folder` (sorted)."""
    return sorted({f for pattern in PICKLE_PATTERNS for f in Path(folder).glob(pattern) if f.is_file()})


def unsafe_pickle(file: Path | str, error: BaseException | None = None) -> ModelError:
    """The ModelError for a pickle that loading with weights_only refuses (it would run code); the
    global it names is kept, torch's advice to load it with weights_only=False is not."""
    found = re.search(r"GLOBAL ([\w.]+)", str(error or ""))
    needs = f" (it needs {found.group(1)})" if found else ""
    return ModelError(
        f"{file}: a pickle that cannot be loaded safely{needs}: it holds more than tensors, and unpickling it "
        "could run arbitrary code; sdscore does not execute pickles — save the weights as safetensors"
    )


def load_torch_pickle(file: Path | str) -> Any:
    """torch.load(file, weights_only=True) on the CPU (plain tensors and containers only); ModelError
    naming the file for a pickle that needs more (never loaded unsafely) or a corrupt file."""
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "weights_only" in str(error) or "GLOBAL" in str(error):
            raise unsafe_pickle(file, error) from None
        raise ModelError(f"{file}: corrupt pickle checkpoint ({error})") from None
    except (EOFError, OSError, RuntimeError, ValueError) as error:
        raise ModelError(f"{file}: not a readable torch checkpoint ({str(error).splitlines()[0]})") from None


@contextmanager
def refusing_unsafe_pickles(folder: Path) -> Iterator[None]:
    """Turn a refused pickle inside a library's loader (transformers' from_pretrained loads
    pytorch_model.bin with weights_only=True) into unsafe_pickle's ModelError naming the file."""
    try:
        yield
    except pickle.UnpicklingError as error:
        files = pickle_files(folder)
        raise unsafe_pickle(files[0] if len(files) == 1 else f"{folder} ({', '.join(f.name for f in files)})", error) from None


# --- safetensors headers --------------------------------------------------------------------------

#: safetensors dtype names of floating-point tensors
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as a safetensors header describes it (nothing is loaded)."""

    file: Path
    dtype: str
    shape: tuple[int, ...]


def safetensors_header(file: Path) -> dict[str, TensorInfo]:
    """Tensor name → TensorInfo from the header of a safetensors file (its first 8 + N bytes only)."""
    file = Path(file)
    try:
        with open(file, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            if size > 100_000_000:
                raise ValueError(f"header of {size} bytes")
            header = json.loads(handle.read(size))
        return {name: TensorInfo(file, str(entry["dtype"]), tuple(int(n) for n in entry["shape"]))
                for name, entry in header.items() if name != "__metadata__"}
    except (OSError, ValueError, TypeError, KeyError, AttributeError, struct.error) as error:
        raise ModelError(f"{file}: corrupt safetensors file ({error})") from None


def weight_files(folder: Path) -> list[Path]:
    """A checkpoint folder's safetensors files: those model.safetensors.index.json names, else *.safetensors."""
    index_file = Path(folder) / "model.safetensors.index.json"
    if index_file.is_file():
        index = read_json(index_file)
        if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
            raise ModelError(f"{index_file}: expected an object with a 'weight_map' object")
        return [Path(folder) / name for name in sorted(set(map(str, index["weight_map"].values())))]
    return sorted(Path(folder).glob("*.safetensors"))


def tensor_index(files: Iterable[Path]) -> dict[str, TensorInfo]:
    """Tensor name → TensorInfo over several safetensors files (headers only)."""
    index: dict[str, TensorInfo] = {}
    for file in files:
        index.update(safetensors_header(file))
    return index


def check_float_weights(index: dict[str, TensorInfo]) -> None:
    """ModelError naming the first weight or bias stored with a non-float dtype (a loader would
    cast it silently; integer tensors with other names, e.g. position ids, are left alone)."""
    for name, info in index.items():
        if name.rsplit(".", 1)[-1] in ("weight", "bias") and info.dtype not in FLOAT_DTYPES:
            raise ModelError(_not_float(info.file, name, info.dtype))


def _not_float(file: Path | str, name: str, dtype: Any) -> str:
    return (f"{file}: tensor {name} has dtype {dtype}, where a floating-point weight is expected "
            "(integer weights are not cast; quantized checkpoints are not supported)")


def check_floats(tensors: Iterable[tuple[str, torch.Tensor]], file: Path | str) -> None:
    """ModelError naming the first of `tensors` (loaded weights that must be floats) that is not."""
    for name, value in tensors:
        if not value.is_floating_point():
            raise ModelError(_not_float(file, name, str(value.dtype).removeprefix("torch.")))


@dataclass(frozen=True)
class SizeRule:
    """A config size that a tensor's shape shows: `value` of `key` must equal dimension `dim` of the
    first tensor whose name matches `pattern` (re.fullmatch); dim=None: `value` must equal the
    number of distinct indices that the pattern's group 1 takes (a layer count)."""

    key: str
    value: Any
    pattern: str
    dim: int | None = 0


def check_sizes(config_file: Path | str, rules: Iterable[SizeRule], index: dict[str, TensorInfo]) -> None:
    """Check config sizes against the weight files' shapes before anything is allocated: ModelError
    "<config_file>: <key> = <value> does not match the weights: tensor <name> in <file> has shape
    [...]" (a rule that no tensor matches is skipped; a value that is not a positive integer is
    refused). config_file may be any text that starts the message."""
    for rule in rules:
        if rule.value is None:
            continue
        if not isinstance(rule.value, int) or isinstance(rule.value, bool) or rule.value < 1:
            raise ModelError(f"{config_file}: {rule.key} must be a positive integer, got {rule.value!r}")
        pattern = re.compile(rule.pattern)
        if rule.dim is None:
            indices = {int(m.group(1)) for m in map(pattern.fullmatch, index) if m}
            if indices and rule.value != len(indices):
                first = next(n for n in index if pattern.fullmatch(n))
                raise ModelError(f"{config_file}: {rule.key} = {rule.value} does not match the weights: "
                                 f"{index[first].file} holds {len(indices)} (tensors like {first})")
            continue
        name = next((n for n in index if pattern.fullmatch(n)), None)
        if name is None:
            continue
        info = index[name]
        if len(info.shape) <= rule.dim or info.shape[rule.dim] != rule.value:
            raise ModelError(f"{config_file}: {rule.key} = {rule.value} does not match the weights: tensor {name} "
                             f"in {info.file} has shape {list(info.shape)}")


def hf_text_rules(config: dict[str, Any], prefix: str = r"(?:.*\.)?", label: str = "") -> list[SizeRule]:
    """SizeRules of a transformers decoder config (Llama/Qwen/Mistral/Gemma names, GPT-2's n_embd):
    embedding width and rows, MLP width and the layer count, for tensors under `prefix`; `label`
    goes before each key in messages (e.g. "text_config.")."""
    get = config.get
    layers = prefix + r"(?:layers|h)\.(\d+)\..+"
    return [SizeRule(label + rule.key, rule.value, rule.pattern, rule.dim) for rule in [
        SizeRule("hidden_size", get("hidden_size"), prefix + r"(?:embed_tokens|wte|word_embeddings|embed_in)\.weight", 1),
        SizeRule("n_embd", get("n_embd"), prefix + r"wte\.weight", 1),
        SizeRule("vocab_size", get("vocab_size"), prefix + r"(?:embed_tokens|wte|word_embeddings|embed_in)\.weight", 0),
        SizeRule("intermediate_size", get("intermediate_size"), prefix + r"layers\.0\.mlp\.(?:up_proj|gate_proj|fc1)\.weight", 0),
        SizeRule("num_hidden_layers", get("num_hidden_layers"), layers, None),
        SizeRule("n_layer", get("n_layer"), layers, None),
    ]]


def _library_errors() -> tuple[type[BaseException], ...]:
    errors: tuple[type[BaseException], ...] = (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError,
                                               RuntimeError)
    try:  # transformers' configs validate their fields with huggingface_hub's strict dataclasses
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:
        return errors
    return (*errors, StrictDataclassError)


#: what a library's from_pretrained raises on a folder it cannot load (caught, reported as ModelError)
LIBRARY_LOAD_ERRORS = _library_errors()


# --- values ---------------------------------------------------------------------------------------

def _all_finite(tensor: torch.Tensor) -> bool:
    """True when no element is NaN or Inf: one min/max reduction (NaN propagates through it), a
    single read of the tensor with no temporary of its size (~3 GB/s per CPU core, ms on a GPU)."""
    low, high = torch.aminmax(tensor)
    return bool(torch.isfinite(low) & torch.isfinite(high))


def check_finite(tensors: Iterable[tuple[str, torch.Tensor]], where: Callable[[str], str] | Path | str) -> None:
    """ModelError "<file>: tensor <name> has N NaN and M Inf values" for the first floating-point
    tensor that is not all finite; `where` is the file, or a function from a tensor's name to
    "<file>: tensor <stored name>" (tensor_in)."""
    for name, tensor in tensors:
        if not tensor.is_floating_point() or tensor.numel() == 0 or _all_finite(tensor):
            continue
        nan, inf = int(torch.isnan(tensor).sum()), int(torch.isinf(tensor).sum())
        what = where(name) if callable(where) else f"{where}: tensor {name}"
        raise ModelError(f"{what} has {nan} NaN and {inf} Inf values (of {tensor.numel()}); the weights are broken")


def tensor_in(index: dict[str, TensorInfo], fallback: Path | str) -> Callable[[str], str]:
    """For check_finite over a loaded module: a parameter's name → "<file>: tensor <stored name>",
    found by the name, else by the longest dotted suffix it shares with exactly one stored tensor
    (libraries rename prefixes), else "<fallback>: tensor <name>"."""
    def where(name: str) -> str:
        if name in index:
            return f"{index[name].file}: tensor {name}"
        parts = name.split(".")
        for start in range(1, len(parts) - 1):
            tail = "." + ".".join(parts[start:])
            hits = [key for key in index if key.endswith(tail)]
            if len(hits) == 1:
                return f"{index[hits[0]].file}: tensor {hits[0]}"
            if hits:
                break
        return f"{fallback}: tensor {name}"
    return where


def check_state(state: dict[str, torch.Tensor], own: dict[str, torch.Tensor], file: Path | str,
                against: str = "the model") -> None:
    """A loaded state dict checked against the module's own: names and shapes (check_state_fits),
    no integer tensor where the module holds floats, every float tensor finite."""
    check_state_fits(state, own, str(file), against)
    check_floats(((name, value) for name, value in state.items() if own[name].is_floating_point()), file)
    check_finite(state.items(), file)
