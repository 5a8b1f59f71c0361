"""In-memory waveforms from RL loops, checked as the file loaders check files: numpy arrays, torch
tensors, or any array that speaks DLPack (cupy, jax, ...: an object with ``__dlpack__``).

- a numpy array stays on the host: checked, and resampled by the core (`_core.resample`) when it
  comes at another rate — the path every file loader takes;
- a torch tensor or any other DLPack array becomes a torch tensor with `torch.from_dlpack` (no
  copy: the tensor shares the producer's memory), is moved to the scorer's device only when it
  is not already there, cast to float32 on that device (no copy when it already is float32), and
  resampled there (`sdscore.audio.torch_resampler`).

Checks, with the messages the file loaders give: float samples only (integer PCM would be scored
unscaled), one channel, at least one sample, finite samples, and the duration cap
(`max_audio_seconds`, the CLI's --max-audio-seconds) measured at the waveform's own rate.
Problems raise ValueError naming `where` (e.g. "turn 1 (episode 3)").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sdscore.audio.checks import format_seconds


#: devices whose tensors the core resamples (a numpy view of the tensor, no copy): on the CPU the
#: core's SIMD loops measured 4-14x faster than torch's conv1d (30 s of audio to 16 kHz, one
#: thread: 24 kHz 2.5 vs 29.5 ms, 48 kHz 7.1 vs 100.7 ms); every other device runs
#: sdscore.audio.torch_resampler there
HOST_RESAMPLER_DEVICES = ("cpu",)


def is_waveform_array(value: Any) -> bool:
    """True for a numpy array, a torch tensor or any object with ``__dlpack__``."""
    return isinstance(value, (np.ndarray, torch.Tensor)) or hasattr(value, "__dlpack__")


def dlpack_tensor(value: Any, where: str) -> torch.Tensor:
    """`value` as a torch tensor sharing its memory (a torch tensor is returned as is)."""
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: cannot read the {type(value).__name__} waveform through DLPack ({exc})") from None


def checked_waveform(audio: Any, where: str, *, model_rate: int, rate: int | None = None,
                     device: torch.device | str = "cpu", max_seconds: float = 0.0) -> np.ndarray | torch.Tensor:
    """The waveform at `model_rate`: float32 numpy for a numpy (or list) input, else a float32 torch
    tensor on `device` (see the module doc). rate: the waveform's rate (None: already model_rate)."""
    rate = model_rate if rate is None else _rate(rate, where)
    if isinstance(audio, torch.Tensor) or (hasattr(audio, "__dlpack__") and not isinstance(audio, np.ndarray)):
        return _device_waveform(dlpack_tensor(audio, where), where, model_rate, rate, torch.device(device),
                                max_seconds)
    return _host_waveform(np.asarray(audio), where, model_rate, rate, max_seconds)


def _rate(rate: Any, where: str) -> int:
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or not 1 <= int(rate) <= 1_000_000:
        raise ValueError(f"{where}: sample rate must be an integer number of Hz in 1..1000000, got {rate!r}")
    return int(rate)


def _check_shape(shape: tuple, length: int, rate: int, where: str, max_seconds: float) -> None:
    if len(shape) != 1:
        raise ValueError(f"{where}: waveform must be 1-D mono, got shape {shape}")
    if length == 0:
        raise ValueError(f"{where}: empty waveform (no samples)")
    seconds = length / rate
    if max_seconds and seconds > max_seconds:
        raise ValueError(f"{where}: waveform of {format_seconds(seconds)} s exceeds the configured cap of "
                         f"{format_seconds(max_seconds)} s (max_audio_seconds; the CLI's --max-audio-seconds)")


def _not_float(dtype: Any, where: str) -> ValueError:
    return ValueError(f"{where}: waveform is {dtype}; pass float samples in [-1, 1] (integer PCM would be "
                      f"scored unscaled)")


def _host_waveform(audio: np.ndarray, where: str, model_rate: int, rate: int, max_seconds: float) -> np.ndarray:
    if not np.issubdtype(audio.dtype, np.floating):
        raise _not_float(audio.dtype, where)
    _check_shape(audio.shape, audio.shape[0] if audio.ndim else 0, rate, where, max_seconds)
    wave = audio.astype(np.float32, copy=False)
    if not np.isfinite(wave).all():
        raise ValueError(f"{where}: waveform has NaN or infinite samples")
    if rate == model_rate:
        return wave
    from sdscore._native import core

    return core.resample(np.ascontiguousarray(wave), rate, model_rate)


def _device_waveform(tensor: torch.Tensor, where: str, model_rate: int, rate: int, device: torch.device,
                     max_seconds: float) -> torch.Tensor:
    if not tensor.is_floating_point():
        raise _not_float(tensor.dtype, where)
    _check_shape(tuple(tensor.shape), tensor.shape[0] if tensor.ndim else 0, rate, where, max_seconds)
    wave = tensor.detach()
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if wave.device != device:
        wave = wave.to(device)
    wave = wave.to(torch.float32)
    if not bool(torch.isfinite(wave).all()):
        raise ValueError(f"{where}: waveform has NaN or infinite samples")
    if rate == model_rate:
        return wave
    if wave.device.type in HOST_RESAMPLER_DEVICES:  # the core reads the tensor's memory in place
        from sdscore._native import core

        return torch.from_numpy(core.resample(wave.contiguous().numpy(), rate, model_rate))
    from sdscore.audio.torch_resampler import resample

    return resample(wave, rate, model_rate)
