"""Log-mel front end of the compact reward model: an STFT + a Slaney mel filterbank.

The filterbank and power spectrogram follow librosa's defaults (`librosa.filters.mel` with
htk=False, norm="slaney"; `librosa.feature.melspectrogram` with a periodic Hann window,
center=True, pad_mode="constant", power 2), so the features can be checked against librosa
without depending on it. The log compression is Whisper's: log10, an 8-decade (80 dB) floor
below the clip's peak, then (x + 4) / 4, which keeps values near [-1.5, 1.5].

`mel_power` / `log_mel` (torch.stft, dense mel GEMM) are the reference; `stacked_log_mel_many`,
what the model runs, does the same in the compiled core (with its own vectorised FFT where it
can, else around one batched torch rFFT).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import torch

from sdscore._native import core

_F_SP = 200.0 / 3  # Slaney mel scale: linear below 1 kHz ...
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = math.log(6.4) / 27.0  # ... and logarithmic above


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney mel of frequencies in Hz (librosa.hz_to_mel with htk=False)."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / _F_SP
    log = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(hz >= _MIN_LOG_HZ, log, linear)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """Inverse of hz_to_mel."""
    mel = np.asarray(mel, dtype=np.float64)
    linear = mel * _F_SP
    log = _MIN_LOG_HZ * np.exp(_LOG_STEP * (np.maximum(mel, _MIN_LOG_MEL) - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, log, linear)


@functools.lru_cache(maxsize=8)
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """float32 [n_mels, n_fft // 2 + 1] triangular Slaney-normalised filters (read-only)."""
    fmax = sample_rate / 2.0 if fmax is None else float(fmax)
    if not 0.0 <= fmin < fmax <= sample_rate / 2.0:
        raise ValueError(f"mel band must satisfy 0 <= fmin < fmax <= sample_rate/2, got fmin={fmin}, fmax={fmax}")
    fft_hz = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    mel_hz = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    width = np.diff(mel_hz)
    ramps = mel_hz[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / width[:-1, None]
    falling = ramps[2:] / width[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (mel_hz[2:] - mel_hz[:-2]))[:, None]
    weights = weights.astype(np.float32)
    weights.flags.writeable = False
    return weights


@functools.lru_cache(maxsize=8)
def _stft_constants(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None):
    """(periodic Hann window [n_fft], mel basis [n_mels, n_fft//2+1]) as CPU tensors, built once."""
    basis = torch.from_numpy(np.array(mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)))
    return torch.hann_window(n_fft, periodic=True), basis


def mel_power(
    wave: np.ndarray, sample_rate: int, n_fft: int, hop_length: int, n_mels: int,
    fmin: float = 0.0, fmax: float | None = None,
) -> np.ndarray:
    """float32 [n_mels, frames] mel power spectrogram (librosa.feature.melspectrogram's layout)."""
    x = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))
    window, basis = _stft_constants(sample_rate, n_fft, n_mels, fmin, fmax)
    spec = torch.stft(x, n_fft, hop_length, window=window, center=True, pad_mode="constant", return_complex=True)
    power = torch.view_as_real(spec).square().sum(-1)
    return (basis @ power).numpy()


def log_mel(
    wave: np.ndarray, sample_rate: int, n_fft: int, hop_length: int, n_mels: int,
    fmin: float = 0.0, fmax: float | None = None, top_db: float = 80.0,
) -> np.ndarray:
    """float32 [frames, n_mels] compressed log-mel of a mono waveform (time first)."""
    mel = mel_power(wave, sample_rate, n_fft, hop_length, n_mels, fmin, fmax)
    return compress(mel, top_db).T.copy()


def compress(mel: np.ndarray, top_db: float = 80.0) -> np.ndarray:
    """Whisper's log compression: log10, floor at peak − top_db/10 decades, then (x + 4) / 4."""
    log = np.log10(np.maximum(mel, 1e-10))
    floor = (log.max() if log.size else -10.0) - top_db / 10.0
    return ((np.maximum(log, floor) + 4.0) / 4.0).astype(np.float32)


#: STFT frames per front-end call (the two-step path: ~1.6 MB of frames and as much spectrum, so
#: both stay in cache; the fused path keeps no such buffers and takes larger chunks, for balance
#: across threads and fewer calls)
CHUNK_FRAMES = 1024
FUSED_CHUNK_FRAMES = 4096


def stacked_log_mel_many(
    waves: list[np.ndarray], sample_rate: int, n_fft: int, hop_length: int, n_mels: int,
    fmin: float, fmax: float | None, top_db: float, frames_per_token: int,
    transform: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Per clip float32 [ceil(frames / k), k * n_mels]: compressed log-mel, k frames per row.
    With `transform` (rows [n, k * n_mels] -> [n, W], row by row, e.g. the compact model's frame
    projection), per clip its transform of those rows, applied once per chunk of clips.

    Equal (to float rounding) to mel_power + compress on each clip alone, with the frame axis
    padded to a multiple of k by silence (floored). Clips run in chunks, spread over torch's
    threads. Where the compiled core has its fused front end for this n_fft (AVX2; n_fft / 2 a
    product of 2, 3 and 5, as 400 is), one call per chunk does everything, the FFT included, with
    eight frames per vector and nothing but the tokens written to memory. Otherwise three steps:
    the core writes every clip's windowed, centred frames into one buffer; torch.fft.rfft
    transforms them all at once; the core turns each clip's spectrum into its tokens (power, the
    mel filters' non-zero spans, a vectorised log10, the clip's own floor at its peak − top_db/10
    decades, (x + 4) / 4, silence padding).
    """
    empty = np.zeros((0, frames_per_token * n_mels), np.float32)
    out: list[np.ndarray] = [empty if transform is None else transform(empty)] * len(waves)
    todo = [i for i in range(len(waves)) if len(waves[i])]
    window, _ = _stft_constants(sample_rate, n_fft, n_mels, fmin, fmax)
    window = window.numpy()
    filters = mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)
    frames = [1 + len(waves[i]) // hop_length for i in todo]
    threads = torch.get_num_threads()
    fused = core.fused_log_mel_supported(n_fft)
    limit = FUSED_CHUNK_FRAMES if fused else CHUNK_FRAMES
    start = 0
    while start < len(todo):
        stop, total = start + 1, frames[start]
        while stop < len(todo) and total + frames[stop] <= limit:
            total += frames[stop]
            stop += 1
        chunk = todo[start:stop]
        counts = np.asarray(frames[start:stop], dtype=np.int64)
        clips = [waves[i] for i in chunk]
        if fused:
            tokens = core.log_mel_from_waves(clips, n_fft, hop_length, window, filters, top_db, frames_per_token, threads)
        else:
            blocks = core.stft_frames(clips, n_fft, hop_length, window, threads)
            spec = torch.view_as_real(torch.fft.rfft(torch.from_numpy(blocks), dim=-1)).numpy()
            tokens = core.log_mel_tokens(spec, counts, filters, top_db, frames_per_token, threads)
        if transform is not None:
            tokens = transform(tokens)
        bounds = np.cumsum(-(-counts // frames_per_token))
        for i, a, b in zip(chunk, np.concatenate([[0], bounds[:-1]]), bounds):
            out[i] = tokens[a:b]
        start = stop
    return out
