"""Episodes from what RL frameworks and HTTP clients hand over: dicts, chat messages, audio specs.

One convention for every adapter (server, TRL, verl, OpenRLHF). An audio value may be:

- a path (``str`` / ``os.PathLike``) or ``{"path": str}`` — read by the scorer's loader;
- ``{"bytes": b"..."}`` (with or without ``"path"``: the form HF ``datasets`` stores an Audio column
  in) or ``{"base64": "..."}`` — an encoded file (WAV, FLAC, OGG, ...) decoded in memory;
- ``{"array": samples, "sampling_rate": sr}`` (a decoded HF Audio item) — resampled to the model's rate:
  a numpy array on the host by the core; a torch tensor or any DLPack array (cupy, jax) on its own
  device by `sdscore.audio.torch_resampler`, without passing through the host;
- a 1-D float numpy array, torch tensor (any device) or DLPack array — taken as already at the
  model's rate, as `Turn` does.

A bad spec raises `EpisodeSpecError` naming where it is (``episodes[3].turns[1].audio``), so the
caller can fail that request, or that sample, alone.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sdscore.audio.dlpack_waveforms import checked_waveform, dlpack_tensor, is_waveform_array
from sdscore.audio.memory import decode_bytes, resample_array
from sdscore.errors import AudioError, SdscoreError
from sdscore.models.episodes import Episode, Turn

#: a whole request's decoded audio bigger than this is refused (the server's body cap is separate)
DEFAULT_MAX_AUDIO_BYTES = 64 * 1024 * 1024


class EpisodeSpecError(SdscoreError):
    """A request, sample or dataset row that does not describe a valid episode."""


def audio_from_spec(spec: Any, sample_rate: int, where: str, *, max_seconds: float = 0.0,
                    max_bytes: int = DEFAULT_MAX_AUDIO_BYTES, allow_paths: bool = True) -> Any:
    """A Turn's audio (a path, or float32 samples at `sample_rate`) from one audio spec."""
    if isinstance(spec, (str, os.PathLike)):
        if not allow_paths:
            raise EpisodeSpecError(f"{where}: server-local paths are not accepted here; send the audio as base64")
        return os.fspath(spec)
    if is_waveform_array(spec):
        return spec
    if not isinstance(spec, Mapping):
        raise EpisodeSpecError(f"{where}: expected a path, a waveform or a dict with path / bytes / base64 / "
                               f"array, got {type(spec).__name__}")
    data = spec.get("bytes")
    if data is None and spec.get("base64") is not None:
        encoded = spec["base64"]
        if not isinstance(encoded, str):
            raise EpisodeSpecError(f"{where}.base64: expected a string, got {type(encoded).__name__}")
        if len(encoded) * 3 // 4 > max_bytes:
            raise EpisodeSpecError(f"{where}.base64: {len(encoded) * 3 // 4} bytes of audio exceed the limit of "
                                   f"{max_bytes} bytes")
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise EpisodeSpecError(f"{where}.base64: not valid base64 ({exc})") from None
    try:
        if data is not None:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise EpisodeSpecError(f"{where}.bytes: expected bytes, got {type(data).__name__}")
            if len(data) > max_bytes:
                raise EpisodeSpecError(f"{where}: {len(data)} bytes of audio exceed the limit of {max_bytes} bytes")
            return decode_bytes(data, sample_rate, name=where, max_seconds=max_seconds)
        if spec.get("array") is not None:
            rate = spec.get("sampling_rate", spec.get("sample_rate"))
            if rate is None:
                raise EpisodeSpecError(f"{where}: an 'array' needs its 'sampling_rate'")
            array = spec["array"]
            if is_waveform_array(array) and not isinstance(array, np.ndarray):
                return _device_array(array, rate, sample_rate, where, max_seconds)
            return resample_array(array, int(rate), sample_rate, name=where, max_seconds=max_seconds)
    except AudioError as exc:
        raise EpisodeSpecError(str(exc)) from None
    except (TypeError, ValueError) as exc:
        raise EpisodeSpecError(f"{where}: {exc}") from None
    if spec.get("path"):
        return audio_from_spec(spec["path"], sample_rate, f"{where}.path", allow_paths=allow_paths)
    raise EpisodeSpecError(f"{where}: the audio dict has none of path, bytes, base64 or array "
                           f"(keys: {', '.join(map(str, spec)) or 'none'})")


def _device_array(array: Any, rate: Any, sample_rate: int, where: str, max_seconds: float) -> Any:
    """A DLPack array at `rate` as a float32 tensor at `sample_rate` on the array's own device
    (a [channels, samples] array is averaged over its channels, as resample_array does)."""
    try:
        tensor = dlpack_tensor(array, where)
        if tensor.ndim == 2 and tensor.is_floating_point():
            tensor = tensor.float().mean(0)
        return checked_waveform(tensor, where, model_rate=sample_rate, rate=rate, device=tensor.device,
                                max_seconds=max_seconds)
    except ValueError as exc:
        raise EpisodeSpecError(str(exc)) from None


def episode_from_spec(spec: Any, sample_rate: int, where: str = "episode", **audio_options: Any) -> Episode:
    """An Episode from ``{"turns": [{"role", "text"?, "audio"?}], "criterion"?, "id"?}``."""
    if isinstance(spec, Episode):
        return spec
    if not isinstance(spec, Mapping):
        raise EpisodeSpecError(f"{where}: expected an object with 'turns', got {type(spec).__name__}")
    _known_fields(spec, ("turns", "criterion", "id"), where)
    turns = spec.get("turns")
    if not isinstance(turns, Sequence) or isinstance(turns, (str, bytes)) or not turns:
        raise EpisodeSpecError(f"{where}.turns: expected a non-empty list of turns")
    return Episode(tuple(_turn(t, sample_rate, f"{where}.turns[{k}]", audio_options) for k, t in enumerate(turns)),
                   _criterion(spec.get("criterion"), where), str(spec.get("id") or where))


def _turn(spec: Any, sample_rate: int, where: str, audio_options: dict) -> Turn:
    if not isinstance(spec, Mapping):
        raise EpisodeSpecError(f"{where}: expected an object with role, text and/or audio, got {type(spec).__name__}")
    _known_fields(spec, ("role", "text", "audio"), where)
    text = spec.get("text")
    if text is not None and not isinstance(text, str):
        raise EpisodeSpecError(f"{where}.text: expected a string, got {type(text).__name__}")
    audio = spec.get("audio")
    if audio is not None:
        audio = audio_from_spec(audio, sample_rate, f"{where}.audio", **audio_options)
    try:
        return Turn(spec.get("role"), text, audio)
    except ValueError as exc:
        raise EpisodeSpecError(f"{where}: {exc}") from None


def _known_fields(spec: Mapping, known: tuple[str, ...], where: str) -> None:
    unknown = set(spec) - set(known)
    if unknown:
        raise EpisodeSpecError(f"{where}: unknown field(s) {', '.join(sorted(map(str, unknown)))} "
                               f"(expected {', '.join(known)})")


def _criterion(value: Any, where: str) -> str | None:
    if value is None:
        return None
    from sdscore.corpus.schemas import CRITERIA

    if value not in CRITERIA:
        raise EpisodeSpecError(f"{where}.criterion: must be one of {', '.join(CRITERIA)} or null, got {value!r}")
    return value


def message_parts(messages: Any, where: str) -> list[tuple[Any, str | None, Any, str | None]]:
    """Chat messages as ``(role, text, audio spec or None, where the audio is)`` per turn, nothing
    decoded: the text items of a message joined by a space, its one audio item (or none).

    Messages are ``{"role", "content": str | [{"type": "text"|"audio"|"input_audio", ...}], "audio"?}``;
    an audio content item holds its spec under "audio" (or "input_audio": OpenAI's
    ``{"data": base64, "format"}``); a turn holds at most one audio item.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)) or not messages:
        raise EpisodeSpecError(f"{where}: expected a non-empty list of messages")
    parts = []
    for k, message in enumerate(messages):
        at = f"{where}[{k}]"
        if not isinstance(message, Mapping) or "role" not in message:
            raise EpisodeSpecError(f"{at}: expected a message with a role")
        content = message.get("content")
        texts, audios = [], []
        if content is None or isinstance(content, str):
            texts = [] if content is None else [content]
        elif isinstance(content, Sequence):
            for n, item in enumerate(content):
                kind = item.get("type") if isinstance(item, Mapping) else None
                if kind == "text":
                    texts.append(str(item.get("text") or ""))
                elif kind == "audio":
                    audios.append((item.get("audio"), f"{at}.content[{n}].audio"))
                elif kind == "input_audio":
                    data = (item.get("input_audio") or {}).get("data")
                    audios.append(({"base64": data}, f"{at}.content[{n}].input_audio"))
                else:
                    raise EpisodeSpecError(f"{at}.content[{n}]: expected a text, audio or input_audio item")
        else:
            raise EpisodeSpecError(f"{at}.content: expected a string or a list of items")
        if message.get("audio") is not None:
            audios.append((message["audio"], f"{at}.audio"))
        if len(audios) > 1:
            raise EpisodeSpecError(f"{at}: {len(audios)} audio items (at most one per turn)")
        spec, spec_where = audios[0] if audios else (None, None)
        parts.append((message["role"], " ".join(texts) if texts else None, spec, spec_where))
    return parts


def episode_from_messages(messages: Any, sample_rate: int, where: str, *, criterion: str | None = None,
                          **audio_options: Any) -> Episode:
    """An Episode from chat messages (the format `message_parts` reads), its audio decoded."""
    turns = []
    for k, (role, text, spec, spec_where) in enumerate(message_parts(messages, where)):
        audio = None if spec is None else audio_from_spec(spec, sample_rate, spec_where, **audio_options)
        try:
            turns.append(Turn(role, text, audio))
        except ValueError as exc:
            raise EpisodeSpecError(f"{where}[{k}]: {exc}") from None
    return Episode(tuple(turns), _criterion(criterion, where), where)
