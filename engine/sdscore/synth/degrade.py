"""Degraded renderings of a clean clip: the rejected side of synthetic modality pairs.

Each degradation keeps the words and the speaker but damages prosody, channel or timing:
monotone (LPC vocoder at a constant F0), band-limited (8 kHz telephone band with mu-law),
clipped (overdriven), noisy (white or pink noise at 0-12 dB SNR), dropout (packet loss gaps)
and bad-timing (long pauses inserted between words). Randomness comes from the caller's rng.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.linalg import solve_toeplitz
from scipy.signal import butter, lfilter, sosfiltfilt

from sdscore.synth import clips
from sdscore.synth.render import Renderer, Utterance

DEGRADATIONS = ("monotone", "band-limited", "clipped", "noisy", "dropout", "bad-timing")


def degraded_relpath(source: str, kind: str) -> str:
    """Content-addressed path of the `kind` degradation of the render at `source`."""
    return f"audio/degraded/{kind}/{clips.content_key(source, kind)}.wav"


def degrade_job(renderer: Renderer, source: Utterance, kind: str) -> tuple[str, Callable[[], tuple]]:
    """(relpath, make) for Renderer.derive: the rendered utterance, degraded by `kind`."""

    def make() -> tuple[np.ndarray, int]:
        sr = source.voice.sample_rate
        x = clips.read(renderer.path(source.relpath), sr)
        return degrade(x, sr, kind, clips.key_rng(clips.content_key(source.relpath, kind))), sr

    return degraded_relpath(source.relpath, kind), make


def degrade(x: np.ndarray, sr: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """The clip damaged by one of DEGRADATIONS, at the same sample rate."""
    if kind not in _FUNCS:
        raise ValueError(f"unknown degradation {kind!r}; expected one of {DEGRADATIONS}")
    return _FUNCS[kind](np.asarray(x, dtype=np.float64), sr, rng)


def _frames(x: np.ndarray, win: int, hop: int) -> np.ndarray:
    """[n, win] overlapping frames (zero-padded when x is shorter than one window)."""
    n = 1 + max(0, (len(x) - win) // hop)
    idx = np.arange(win)[None, :] + hop * np.arange(n)[:, None]
    return np.pad(x, (0, max(0, win - len(x))))[idx]


def frame_pitch(x: np.ndarray, sr: int, hop: int, win: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-frame (F0 in Hz, voicing strength in [0, 1]) by window-corrected autocorrelation."""
    window = np.hanning(win)
    frames = _frames(x, win, hop) * window
    ac = np.fft.irfft(np.abs(np.fft.rfft(frames, 2 * win)) ** 2)[:, :win]
    ac_window = np.fft.irfft(np.abs(np.fft.rfft(window, 2 * win)) ** 2)[:win]
    lo, hi = int(sr / 400), min(win // 2, int(sr / 70))
    norm = ac[:, lo:hi] / np.maximum(ac[:, :1], 1e-12) / (ac_window[lo:hi] / ac_window[0])
    best = np.argmax(norm, axis=1)
    return sr / (lo + best), norm[np.arange(len(norm)), best]


def _monotone(x: np.ndarray, sr: int, rng: np.random.Generator) -> np.ndarray:
    """LPC analysis/resynthesis with a flat pulse train: words kept, intonation removed."""
    hop, win = int(0.01 * sr), int(0.04 * sr)
    order = int(sr / 1000) + 4
    window = np.hanning(win)
    f0, strength = frame_pitch(x, sr, hop, win)
    frames = _frames(np.append(x[0], x[1:] - 0.95 * x[:-1]), win, hop)
    energy = np.mean(frames**2, axis=1)
    voiced = (strength > 0.5) & (energy > energy.max() * 1e-3)
    period = sr / (float(np.median(f0[voiced])) if voiced.any() else 120.0)
    out = np.zeros(len(frames) * hop)
    noise = rng.standard_normal(len(out))
    zi, next_pulse = np.zeros(order), 0.0
    for i, frame in enumerate(frames * window):
        r = np.correlate(frame, frame, "full")[win - 1: win + order]
        if r[0] <= 1e-10:
            next_pulse = max(next_pulse, (i + 1) * hop)
            continue
        r[0] *= 1.0001
        a = solve_toeplitz(r[:-1], r[1:])
        gain = np.sqrt(max(r[0] - a @ r[1:], 1e-12) / np.sum(window**2))
        if voiced[i]:
            exc = np.zeros(hop)
            while next_pulse < (i + 1) * hop:
                exc[int(next_pulse) - i * hop] = np.sqrt(period)
                next_pulse += period
        else:
            exc = noise[i * hop: (i + 1) * hop]
            next_pulse = max(next_pulse, (i + 1) * hop)
        out[i * hop: (i + 1) * hop], zi = lfilter([gain], np.concatenate([[1.0], -a]), exc, zi=zi)
    return lfilter([1.0], [1.0, -0.95], out)


def _band_limited(x: np.ndarray, sr: int, rng: np.random.Generator) -> np.ndarray:
    """Telephone channel: 8 kHz, 300-3400 Hz band, 8-bit mu-law, back at the original rate."""
    y = clips.resample(x, sr, 8000)
    y = sosfiltfilt(butter(4, [300, 3400], btype="bandpass", fs=8000, output="sos"), y)
    y = y / (np.max(np.abs(y)) + 1e-12)
    mu = 255.0
    q = np.round(np.sign(y) * np.log1p(mu * np.abs(y)) / np.log1p(mu) * 127) / 127
    y = np.sign(q) * np.expm1(np.abs(q) * np.log1p(mu)) / mu
    return clips.resample(y, 8000, sr)[: len(x)]


def _clipped(x: np.ndarray, sr: int, rng: np.random.Generator) -> np.ndarray:
    """Overdriven by 10-18 dB into a hard limit."""
    gain = 10 ** (rng.uniform(10.0, 18.0) / 20)
    return np.clip(x / (np.max(np.abs(x)) + 1e-12) * gain, -1.0, 1.0)


def _noisy(x: np.ndarray, sr: int, rng: np.random.Generator) -> np.ndarray:
    """White or pink noise at 0-12 dB SNR relative to the speech frames."""
    noise = rng.standard_normal(len(x))
    if rng.random() < 0.5:
        spec = np.fft.rfft(noise)
        spec[1:] /= np.sqrt(np.arange(1, len(spec)))
        noise = np.fft.irfft(spec, len(x))
    active = clips.active_frames(x, sr)
    hop = clips.frame_hop(sr)
    speech = x[: len(active) * hop].reshape(len(active), hop)[active] if active.any() else x
    snr_db = rng.uniform(0.0, 12.0)
    scale = np.sqrt(np.mean(speech**2) / (np.mean(noise**2) * 10 ** (snr_db / 10)))
    return x + noise * scale


def _dropout(x: np.ndarray, sr: int, rng: np.random.Generator) -> np.ndarray:
    """Zeroed gaps of 60-200 ms, about two per second of audio (packet loss)."""
    y = x.copy()
    start, end = clips.speech_bounds(x, sr)
    for _ in range(max(2, int(2 * (end - start) / sr))):
        length = int(rng.uniform(0.06, 0.2) * sr)
        at = int(rng.integers(start, max(start + 1, end - length)))
        y[at: at + length] = 0.0
    return y


def _bad_timing(x: np.ndarray, sr: int, rng: np.random.Generator) -> np.ndarray:
    """Long 0.4-0.9 s pauses inserted into about half of the internal word gaps."""
    active = clips.active_frames(x, sr)
    hop = clips.frame_hop(sr)
    idx = np.flatnonzero(active)
    quiet = [i for i in range(idx[0] + 1, idx[-1]) if not active[i] and active[i - 1]] if idx.size else []
    if not quiet:
        quiet = [len(active) // 3, 2 * len(active) // 3]
    chosen = sorted({int(q) for q in rng.choice(quiet, size=max(1, len(quiet) // 2), replace=False)})
    parts, prev = [], 0
    for q in chosen:
        parts += [x[prev: q * hop], clips.silence(rng.uniform(0.4, 0.9), sr)]
        prev = q * hop
    return np.concatenate(parts + [x[prev:]])


_FUNCS = {
    "monotone": _monotone,
    "band-limited": _band_limited,
    "clipped": _clipped,
    "noisy": _noisy,
    "dropout": _dropout,
    "bad-timing": _bad_timing,
}
