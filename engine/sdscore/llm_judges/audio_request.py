"""An audio-judge request: ordered text and audio clips, sent as OpenAI chat content parts.

Each clip is decoded with sdscore.audio.load (any format and rate the loaders read), resampled to the
rate the endpoint wants and re-encoded as 16-bit PCM WAV in an ``input_audio`` part (base64). A
request whose audio adds up to more than ``max_request_bytes`` (base64 size) is refused before it is
sent, with an error that says how large it is, so a long dialogue fails its row instead of the call.
"""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass
from typing import Any

import soundfile as sf

from sdscore import audio
from sdscore.errors import JudgeError

#: the rate clips are sent at unless the endpoint wants another (gpt-4o-audio and Qwen-Omni take 16 kHz)
DEFAULT_AUDIO_RATE = 16000
#: largest base64 audio payload of one request; OpenAI refuses requests past about 25 MB
DEFAULT_MAX_REQUEST_BYTES = 20 * 2**20


def wav_bytes(path: str | os.PathLike, sample_rate: int = DEFAULT_AUDIO_RATE, max_seconds: float | None = None) -> bytes:
    """The file decoded to mono at sample_rate and re-encoded as 16-bit PCM WAV (AudioError past
    max_seconds; None: load's default)."""
    samples = audio.load(path, sample_rate, max_seconds=max_seconds)
    buffer = io.BytesIO()
    sf.write(buffer, samples, sample_rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


@dataclass(frozen=True)
class AudioClip:
    """One audio file of a request, by path (decoded when the request is built)."""

    path: str


def _size(n: int) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 2**10:.3g} KiB"


@dataclass(frozen=True)
class AudioRequest:
    """A system text and an ordered user message of text pieces and AudioClips."""

    system: str
    parts: tuple[str | AudioClip, ...]

    def __post_init__(self) -> None:
        for position, part in enumerate(self.parts):
            if not isinstance(part, (str, AudioClip)):
                raise TypeError(f"request part {position} is {type(part).__name__}, expected str or AudioClip")

    @property
    def clips(self) -> list[str]:
        """The audio paths, in order."""
        return [part.path for part in self.parts if isinstance(part, AudioClip)]

    def messages(
        self,
        sample_rate: int = DEFAULT_AUDIO_RATE,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_seconds: float | None = None,
    ) -> list[dict[str, Any]]:
        """Chat messages: the system text, then one user message of text and input_audio parts
        (adjacent text joined). AudioError names a clip that does not load; JudgeError a request over the cap."""
        if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be an integer >= 1, got {max_request_bytes!r}")
        content: list[dict[str, Any]] = []
        text, total = "", 0
        for part in self.parts:
            if isinstance(part, str):
                text += part
                continue
            if text.strip():
                content.append({"type": "text", "text": text.strip()})
            text = ""
            data = base64.b64encode(wav_bytes(part.path, sample_rate, max_seconds)).decode("ascii")
            total += len(data)
            if total > max_request_bytes:
                raise JudgeError(
                    f"the request's audio is over the {_size(max_request_bytes)} cap (max_request_bytes) at "
                    f"{part.path} ({len(self.clips)} clips at {sample_rate} Hz); shorten the clips or raise the cap"
                )
            content.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
        if text.strip():
            content.append({"type": "text", "text": text.strip()})
        return [{"role": "system", "content": self.system}, {"role": "user", "content": content}]

