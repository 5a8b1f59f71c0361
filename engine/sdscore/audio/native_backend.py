"""Audio through the compiled core: WAV decode + polyphase resampling on native threads."""

from __future__ import annotations

from collections.abc import Sequence

from sdscore.audio import soundfile_backend
from sdscore.audio.batch import AudioBatch
from sdscore.ragged import pack


def load_many(
    paths: Sequence[str], sample_rate: int, num_threads: int, max_seconds: float
) -> AudioBatch:
    """Decode WAVs natively; files that are not RIFF/WAVE (FLAC, OGG, MP3) go through soundfile."""
    from sdscore._native import core

    data, offsets, errors, not_wav = core.load_many(
        list(paths), sample_rate, num_threads, max_seconds
    )
    others = [i for i, flag in enumerate(not_wav) if flag]
    if not others:
        return AudioBatch(data, offsets, list(errors), sample_rate)
    decoded = soundfile_backend.decode_files(
        [paths[i] for i in others], sample_rate, num_threads, max_seconds
    )
    waves = [data[offsets[i] : offsets[i + 1]] for i in range(len(paths))]
    errors = list(errors)
    for i, (wave, err) in zip(others, decoded):
        waves[i] = wave
        errors[i] = err if err is None else _both_failed(paths[i], errors[i], err)
    data, offsets = pack(waves)
    return AudioBatch(data, offsets, errors, sample_rate)


def _both_failed(path: str, native_err: str, soundfile_err: str) -> str:
    """One message listing why each decoder refused the file."""
    strip = lambda msg: msg[len(path) + 2 :] if msg.startswith(f"{path}: ") else msg  # noqa: E731
    return f"{path}: not decodable (native: {strip(native_err)}; soundfile: {strip(soundfile_err)})"

