"""SpeechBrain model folders without SpeechBrain: hyperparams.yaml, Fbank features, normalizer stats.

SpeechBrain itself is not a dependency (it pulls torchaudio). Its HyperPyYAML tags are read as
plain data: ``!new:``/``!name:``/``!apply:`` become `Tagged(target, args)`, ``!ref <key>``
resolves against the file's top-level keys. Fbank and InputNormalization repeat
``speechbrain.lobes.features.Fbank`` and ``speechbrain.processing.features`` exactly.
"""

from __future__ import annotations

import ast
import math
import operator
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from sdscore.checkpoint_files import check_finite, load_torch_pickle
from sdscore.errors import ModelError


@dataclass
class Tagged:
    """A HyperPyYAML object tag: target (e.g. ``speechbrain.lobes.features.Fbank``) and its arguments."""

    kind: str
    target: str
    kwargs: dict = field(default_factory=dict)


@dataclass
class _Ref:
    expression: str


class _HyperLoader(yaml.SafeLoader):
    """SafeLoader that keeps HyperPyYAML tags as data."""


def _tagged(loader: yaml.Loader, suffix: str, node: yaml.Node) -> Tagged:
    kind, _, target = suffix.partition(":")
    if isinstance(node, yaml.MappingNode):
        return Tagged(kind, target, loader.construct_mapping(node, deep=True))
    if isinstance(node, yaml.SequenceNode):
        return Tagged(kind, target, {"args": loader.construct_sequence(node, deep=True)})
    return Tagged(kind, target, {})


for _kind in ("new", "name", "apply", "include"):
    _HyperLoader.add_multi_constructor(f"!{_kind}", lambda loader, suffix, node, k=_kind: _tagged(loader, k + suffix, node))
for _tag in ("!ref", "!copy"):
    _HyperLoader.add_constructor(_tag, lambda loader, node: _Ref(loader.construct_scalar(node)))

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}


def _arithmetic(node: ast.AST):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_arithmetic(node.left), _arithmetic(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_arithmetic(node.operand)
    raise ValueError("not arithmetic")


def _lookup(top: dict, dotted: str, source: str):
    value = top
    for part in dotted.split("."):
        value = value.kwargs if isinstance(value, Tagged) else value
        if not isinstance(value, dict) or part not in value:
            raise ModelError(f"{source}: !ref <{dotted}> names no key of the file")
        value = value[part]
    return value


def _resolve(value, top: dict, source: str, depth: int = 0):
    if depth > 50:
        raise ModelError(f"{source}: !ref chain too deep (a cycle?)")
    if isinstance(value, _Ref):
        whole = re.fullmatch(r"\s*<([^<>]+)>\s*", value.expression)
        if whole:
            return _resolve(_lookup(top, whole.group(1), source), top, source, depth + 1)
        text = re.sub(
            r"<([^<>]+)>", lambda m: str(_resolve(_lookup(top, m.group(1), source), top, source, depth + 1)),
            value.expression,
        )
        try:
            return _arithmetic(ast.parse(text, mode="eval").body)
        except (ValueError, SyntaxError, ZeroDivisionError):
            return text
    if isinstance(value, Tagged):
        return Tagged(value.kind, value.target, _resolve(value.kwargs, top, source, depth + 1))
    if isinstance(value, dict):
        return {k: _resolve(v, top, source, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, top, source, depth + 1) for v in value]
    return value


def read_hyperparams(path: str | os.PathLike) -> dict:
    """hyperparams.yaml as a dict with its references resolved (ModelError if unreadable)."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            top = yaml.load(handle, Loader=_HyperLoader)
    except (OSError, yaml.YAMLError) as error:
        raise ModelError(f"{source}: cannot read hyperparameters: {error}") from error
    if not isinstance(top, dict):
        raise ModelError(f"{source}: expected a mapping of hyperparameters, got {type(top).__name__}")
    return _resolve(top, top, source)


def find_tagged(hparams: dict, key: str, class_name: str, source: str) -> Tagged:
    """hparams[key], which must be ``!new:...<class_name>`` (ModelError naming the file otherwise)."""
    value = hparams.get(key)
    if not isinstance(value, Tagged) or value.target.rsplit(".", 1)[-1] != class_name:
        raise ModelError(f"{source}: expected '{key}: !new:...{class_name}', got {value!r}")
    return value


class Fbank(torch.nn.Module):
    """Log mel filterbanks as ``speechbrain.lobes.features.Fbank``: wav [S] → feats [T, n_mels].

    STFT with a periodic Hamming window, centred with zero padding; power spectrum; triangular
    filters on the HTK mel scale; 10·log10 with amin 1e-10 and an 80 dB floor below the item's max.
    """

    def __init__(self, n_mels: int = 40, sample_rate: int = 16000, n_fft: int = 400, win_length: float = 25,
                 hop_length: float = 10, f_min: float = 0, f_max: float | None = None, top_db: float = 80.0):
        super().__init__()
        self.n_fft = int(n_fft)
        self.win_length = round(sample_rate / 1000.0 * win_length)
        self.hop_length = round(sample_rate / 1000.0 * hop_length)
        self.top_db = top_db
        f_max = sample_rate / 2 if f_max is None else f_max
        mel = torch.linspace(2595 * math.log10(1 + f_min / 700), 2595 * math.log10(1 + f_max / 700), n_mels + 2)
        hz = 700 * (10 ** (mel / 2595) - 1)
        band, central = (hz[1:] - hz[:-1])[:-1], hz[1:-1]
        n_stft = self.n_fft // 2 + 1
        freqs = torch.linspace(0, sample_rate // 2, n_stft).repeat(n_mels, 1)
        slope = (freqs - central.repeat(n_stft, 1).T) / band.repeat(n_stft, 1).T
        self.register_buffer("matrix", torch.max(torch.zeros(1), torch.min(slope + 1.0, -slope + 1.0)).T)
        self.register_buffer("window", torch.hamming_window(self.win_length))

    def forward(self, wav: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(wav, self.n_fft, self.hop_length, self.win_length, self.window, center=True,
                          pad_mode="constant", normalized=False, onesided=True, return_complex=True)
        power = torch.view_as_real(spec).pow(2).sum(-1).T  # [T, F]
        fbanks = torch.matmul(power, self.matrix)
        db = 10 * torch.log10(torch.clamp(fbanks, min=1e-10))
        return torch.max(db, db.amax() - self.top_db)


def fbank_from_hparams(spec: Tagged, source: str) -> Fbank:
    """Our Fbank with the arguments of a ``!new:speechbrain.lobes.features.Fbank`` entry."""
    args = dict(spec.kwargs)
    for flag in ("deltas", "context", "requires_grad"):
        if args.pop(flag, False):
            raise ModelError(f"{source}: Fbank with {flag}=True is not supported")
    unsupported = set(args) - {"n_mels", "sample_rate", "n_fft", "win_length", "hop_length", "f_min", "f_max",
                               "filter_shape", "left_frames", "right_frames", "param_change_factor", "param_rand_factor"}
    if unsupported or args.pop("filter_shape", "triangular") != "triangular":
        raise ModelError(f"{source}: unsupported Fbank arguments {sorted(unsupported) or ['filter_shape']}")
    for ignored in ("left_frames", "right_frames", "param_change_factor", "param_rand_factor"):
        args.pop(ignored, None)
    return Fbank(**args)


@dataclass
class Normalization:
    """``InputNormalization`` at inference: per-sentence or global mean (and std) over time.

    For "global", mean/std come from the saved statistics (``<name>.ckpt``: glob_mean, glob_std).
    """

    norm_type: str = "global"
    mean_norm: bool = True
    std_norm: bool = True
    mean: torch.Tensor | None = None
    std: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, C] of one item → normalised [T, C]."""
        if self.norm_type == "sentence":
            centered = x - x.mean(dim=0) if self.mean_norm else x
            return centered / torch.clamp(x.std(dim=0), min=1e-10) if self.std_norm else centered
        return (x - self.mean.to(x.device)) / self.std.to(x.device)


def normalization_from_hparams(spec: Tagged, stats_file: Path | None, source: str) -> Normalization:
    """Normalization from a ``!new:...InputNormalization`` entry and, for global stats, its .ckpt file."""
    args = spec.kwargs
    norm = Normalization(args.get("norm_type", "global"), bool(args.get("mean_norm", True)), bool(args.get("std_norm", True)))
    if norm.norm_type == "sentence":
        return norm
    if norm.norm_type != "global":
        raise ModelError(f"{source}: InputNormalization norm_type {norm.norm_type!r} is not supported")
    if stats_file is None or not stats_file.is_file():
        raise ModelError(f"{source}: global InputNormalization needs its statistics file {stats_file}")
    stats = load_torch_pickle(stats_file)
    try:
        norm.mean = torch.as_tensor(stats["glob_mean"], dtype=torch.float32)
        norm.std = torch.as_tensor(stats["glob_std"], dtype=torch.float32)
    except (RuntimeError, KeyError, TypeError, OSError) as error:
        raise ModelError(f"{stats_file}: not an InputNormalization statistics file: {error}") from error
    check_finite([("glob_mean", norm.mean), ("glob_std", norm.std)], stats_file)
    return norm
