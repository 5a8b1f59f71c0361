"""Chat messages as one episode of `sdscore serve`'s ``POST /score`` body, for clients.

``{"id", "turns": [{"role", "text"?, "audio"?}], "criterion"?}``, each audio as the server reads
it without decoding anything here (the server decodes, resamples and checks):

- a local path (or ``{"path"}``): the file's bytes as base64 (the server may be on another
  machine), or, with ``send_paths``, the path itself (for a server started with
  ``--allow-paths`` over a shared folder: nothing is read here);
- ``{"bytes"}`` (HF Audio): base64 of those bytes; ``{"base64"}`` and OpenAI's ``input_audio``: as is;
- float samples — ``{"array", "sampling_rate"}``, or a bare array at ``default_rate`` — a float32
  WAV (exact samples; a [channels, samples] array averaged first, as the server does). Numpy,
  torch tensors on any device, DLPack arrays and lists are taken; integer PCM is refused.

A bad sample raises `EpisodeSpecError` naming it, so the caller can fail that sample alone.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from sdscore.rl.episode_specs import EpisodeSpecError, message_parts


def episode_json(messages: Any, where: str, *, criterion: str | None = None, default_rate: int | None = None,
                 send_paths: bool = False) -> dict:
    """One /score episode from chat messages (the format `message_parts` reads)."""
    turns = []
    for role, text, spec, spec_where in message_parts(messages, f"{where}: turns"):
        turn: dict[str, Any] = {"role": role}
        if text is not None:
            turn["text"] = text
        if spec is not None:
            turn["audio"] = audio_json(spec, spec_where, default_rate=default_rate, send_paths=send_paths)
        turns.append(turn)
    episode: dict[str, Any] = {"id": where, "turns": turns}
    if criterion is not None:
        episode["criterion"] = criterion
    return episode


def audio_json(spec: Any, where: str, *, default_rate: int | None = None, send_paths: bool = False) -> dict:
    """One audio spec as the JSON the server reads (see the module docstring)."""
    if isinstance(spec, (str, os.PathLike)):
        return _path_json(os.fspath(spec), where, send_paths)
    if isinstance(spec, Mapping):
        if spec.get("bytes") is not None:
            data = spec["bytes"]
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise EpisodeSpecError(f"{where}.bytes: expected bytes, got {type(data).__name__}")
            return {"base64": base64.b64encode(bytes(data)).decode("ascii")}
        if spec.get("base64") is not None:
            if not isinstance(spec["base64"], str):
                raise EpisodeSpecError(f"{where}.base64: expected a string, got {type(spec['base64']).__name__}")
            return {"base64": spec["base64"]}
        if spec.get("array") is not None:
            rate = spec.get("sampling_rate", spec.get("sample_rate"))
            if rate is None:
                raise EpisodeSpecError(f"{where}: an 'array' needs its 'sampling_rate'")
            return _samples_json(spec["array"], rate, where)
        if spec.get("path"):
            return _path_json(os.fspath(spec["path"]), f"{where}.path", send_paths)
        raise EpisodeSpecError(f"{where}: the audio dict has none of path, bytes, base64 or array "
                               f"(keys: {', '.join(map(str, spec)) or 'none'})")
    if default_rate is None:
        raise EpisodeSpecError(f"{where}: bare samples need their rate: give extra_info['audio_sample_rate'] or "
                               f"reward_kwargs audio_sample_rate, or pass {{'array', 'sampling_rate'}}")
    return _samples_json(spec, default_rate, where)


def _path_json(path: str, where: str, send_paths: bool) -> dict:
    if send_paths:
        return {"path": path}
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise EpisodeSpecError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    return {"base64": base64.b64encode(data).decode("ascii")}


def _samples_json(array: Any, rate: Any, where: str) -> dict:
    import soundfile as sf

    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not 0 < int(rate) <= 1_000_000:
        raise EpisodeSpecError(f"{where}: sampling_rate must be a positive integer, got {rate!r}")
    samples = _host_samples(array, where)
    if samples.ndim == 2:
        samples = samples.mean(axis=0)
    if samples.ndim != 1 or samples.size == 0:
        raise EpisodeSpecError(f"{where}: expected a non-empty 1-D (or [channels, samples]) waveform, "
                               f"got shape {samples.shape}")
    buffer = io.BytesIO()
    sf.write(buffer, np.ascontiguousarray(samples, np.float32), int(rate), format="WAV", subtype="FLOAT")
    return {"base64": base64.b64encode(buffer.getvalue()).decode("ascii")}


def _host_samples(array: Any, where: str) -> np.ndarray:
    if not isinstance(array, np.ndarray) and (hasattr(array, "__dlpack__") or hasattr(array, "detach")):
        import torch

        tensor = array if isinstance(array, torch.Tensor) else torch.from_dlpack(array)
        if not tensor.is_floating_point():
            raise EpisodeSpecError(f"{where}: samples are {tensor.dtype}; pass float samples in [-1, 1]")
        # fp16/bf16 are computed in float32 (as the server does); a GPU tensor is copied to the host once
        array = tensor.detach().to(device="cpu", dtype=torch.float64 if tensor.dtype == torch.float64
                                   else torch.float32).numpy()
    samples = np.asarray(array)
    if not np.issubdtype(samples.dtype, np.floating):
        raise EpisodeSpecError(f"{where}: samples are {samples.dtype}; pass float samples in [-1, 1]")
    return samples
