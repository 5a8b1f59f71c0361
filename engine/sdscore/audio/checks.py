"""Checks every audio backend applies: target rate, duration cap, finite samples."""

from __future__ import annotations

import os

import numpy as np

from sdscore import storage
from sdscore.audio_limits import DEFAULT_MAX_AUDIO_SECONDS, MAX_AUDIO_SECONDS_HELP  # noqa: F401
from sdscore.errors import AudioError

MAX_SAMPLE_RATE = 1_000_000
MAX_SECONDS_ENV = "SDSCORE_MAX_AUDIO_SECONDS"
#: The protocols' Scorers refuse (per row) audio files longer than DEFAULT_MAX_AUDIO_SECONDS unless
#: told otherwise (--max-audio-seconds; 0 = no cap): a stray 2-hour recording must not take minutes
#: and GBs. Declared in sdscore.audio_limits, which the settings import without the audio stack.


def check_target_rate(sample_rate: int) -> int:
    """Return the target rate as int, or raise ValueError if it is not in 1..1 MHz."""
    if isinstance(sample_rate, bool) or int(sample_rate) != sample_rate:
        raise ValueError(f"sample_rate must be an integer number of Hz, got {sample_rate!r}")
    if not 1 <= int(sample_rate) <= MAX_SAMPLE_RATE:
        raise ValueError(f"sample_rate must be in 1..{MAX_SAMPLE_RATE} Hz, got {sample_rate}")
    return int(sample_rate)


def resolve_max_seconds(max_seconds: float | None) -> float:
    """The duration cap in seconds (0 = none): the argument, else $SDSCORE_MAX_AUDIO_SECONDS."""
    if max_seconds is None:
        raw = os.environ.get(MAX_SECONDS_ENV, "").strip()
        if not raw:
            return 0.0
        try:
            max_seconds = float(raw)
        except ValueError:
            raise ValueError(f"{MAX_SECONDS_ENV}={raw!r} is not a number of seconds") from None
    if not np.isfinite(max_seconds) or max_seconds < 0:
        raise ValueError(f"max_seconds must be a non-negative number, got {max_seconds!r}")
    return float(max_seconds)


def check_decoded(path: str, frames: int, sample_rate: int, max_seconds: float) -> None:
    """Raise AudioError for a decoded stream with no frames, a bad rate or a duration over the cap."""
    if sample_rate <= 0:
        raise AudioError(f"{path}: sample rate {sample_rate} Hz is invalid")
    if sample_rate > MAX_SAMPLE_RATE:
        raise AudioError(f"{path}: absurd sample rate {sample_rate} Hz")
    if frames <= 0:
        raise AudioError(f"{path}: no audio samples")
    if max_seconds > 0 and frames / sample_rate > max_seconds:
        raise AudioError(_over_cap_message(path, frames / sample_rate, max_seconds))


def sound_info(path: str | os.PathLike):
    """soundfile.info of a local file (or file:// URI), of an object on a store (s3://, gs://)
    from its header alone, fetched by a ranged read, or of a clip embedded in a dataset file. Raises what soundfile or the store raise."""
    import soundfile as sf

    from sdscore.audio.embedded_clips import is_embedded, open_embedded

    text = os.fspath(path)
    if storage.is_remote(text):
        with storage.open_ranged(text) as handle:
            return sf.info(handle)
    if is_embedded(text):
        return sf.info(open_embedded(text))
    return sf.info(storage.normalize(text))


def header_seconds(path: str) -> float | None:
    """A file's duration from its header alone (None when soundfile cannot read the header or the
    rate is not positive — decoding then says what is wrong)."""
    try:
        info = sound_info(path)
    except Exception:  # noqa: BLE001 - any unreadable header is the decoder's to report
        return None
    return info.frames / info.samplerate if info.samplerate > 0 else None


def over_cap(path: str, max_seconds: float | None) -> str | None:
    """The loader's over-the-cap error for a file, from its header alone (None: within the cap, no
    cap, or a header soundfile cannot read — decoding then says what is wrong). For results
    served from a cache, so that a cached file is refused exactly as a decoded one would be."""
    cap = resolve_max_seconds(max_seconds)
    if cap <= 0:
        return None
    seconds = header_seconds(path)
    if seconds is None or seconds <= cap:
        return None
    return _over_cap_message(path, seconds, cap)


def _over_cap_message(path: str, seconds: float, cap: float) -> str:
    return f"{path}: {format_seconds(seconds)} s exceeds the configured cap of {format_seconds(cap)} s"


def format_seconds(seconds: float) -> str:
    """Seconds to at most 3 decimals without trailing zeros (the core's format: 3, 2.5, 0.125)."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def check_finite(path: str, samples: np.ndarray) -> None:
    """Raise AudioError naming the first non-finite sample, if any."""
    finite = np.isfinite(samples)
    if not finite.all():
        first = int(np.argmin(finite.reshape(len(samples), -1).all(axis=1)))
        raise AudioError(f"{path}: non-finite sample (NaN/Inf) at frame {first}")
