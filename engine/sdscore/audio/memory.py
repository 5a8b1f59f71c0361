"""Audio that arrives as bytes or arrays rather than files: RL rollouts, HTTP requests, HF datasets.

`decode_bytes` decodes an encoded file held in memory (WAV by the native core, everything else
libsndfile reads through soundfile) to float32 mono at the asked rate, with the same checks as the
file loaders (rate, duration cap, finite samples). `resample_array` brings a waveform that comes
with its own rate (a HF `{"array", "sampling_rate"}` item, verl's `extra_info["audio"]`) to the
asked rate with the core's resampler, the one every file loader uses.
"""

from __future__ import annotations

import io

import numpy as np

from sdscore.audio.checks import check_decoded, check_finite, check_target_rate
from sdscore.errors import AudioError

_WAV_MAGIC = (b"RIFF", b"RIFX", b"RF64")


def decode_bytes(data: bytes, sample_rate: int = 16000, *, name: str = "<bytes>",
                 max_seconds: float = 0.0) -> np.ndarray:
    """Decode encoded audio bytes (WAV, FLAC, OGG, MP3, ...) to float32 mono at `sample_rate`.

    Raises AudioError('{name}: {problem}') for empty, undecodable, too long or non-finite audio.
    """
    from sdscore._native import core

    sample_rate = check_target_rate(sample_rate)
    data = bytes(data)
    if not data:
        raise AudioError(f"{name}: no audio bytes")
    if data[:4] in _WAV_MAGIC:
        try:
            wave, rate = core.decode_wav(data, name, float(max_seconds))
        except ValueError as exc:
            raise AudioError(str(exc)) from None
        check_decoded(name, len(wave), int(rate), max_seconds)
        check_finite(name, wave)
        return core.resample(np.ascontiguousarray(wave, np.float32), int(rate), sample_rate)
    import soundfile as sf

    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            check_decoded(name, f.frames, f.samplerate, max_seconds)
            frames = f.read(dtype="float32", always_2d=True)
            rate = f.samplerate
    except AudioError:
        raise
    except Exception as exc:  # libsndfile reports everything as one generic error type
        raise AudioError(f"{name}: cannot decode ({exc})") from None
    check_decoded(name, len(frames), rate, max_seconds)
    check_finite(name, frames)
    mono = frames[:, 0].copy() if frames.shape[1] == 1 else frames.mean(axis=1, dtype=np.float32)
    return core.resample(np.ascontiguousarray(mono), int(rate), sample_rate)


def resample_array(wave, rate: int, sample_rate: int = 16000, *, name: str = "<array>",
                   max_seconds: float = 0.0) -> np.ndarray:
    """A float waveform at `rate` Hz (1-D mono, or 2-D [channels, samples] averaged) at `sample_rate`."""
    from sdscore._native import core

    sample_rate = check_target_rate(sample_rate)
    array = np.asarray(wave)
    if not np.issubdtype(array.dtype, np.floating):
        raise AudioError(f"{name}: samples are {array.dtype}; pass float samples in [-1, 1]")
    if array.ndim == 2:
        array = array.mean(axis=0)
    if array.ndim != 1:
        raise AudioError(f"{name}: expected a 1-D (or [channels, samples]) waveform, got shape {array.shape}")
    try:
        rate = check_target_rate(rate)
    except ValueError as exc:
        raise AudioError(f"{name}: {exc}") from None
    check_decoded(name, len(array), rate, max_seconds)
    check_finite(name, array)
    array = np.ascontiguousarray(array, np.float32)
    return array.copy() if rate == sample_rate else core.resample(array, rate, sample_rate)
