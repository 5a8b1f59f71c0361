"""Sample-rate conversion of torch waveforms on their own device (CUDA, CPU, any torch device).

The same filter as the core's resampler (csrc/audio/filter_bank.cpp): a Kaiser-windowed sinc with
soxr HQ's band edges relative to the lower Nyquist frequency (flat to 0.913 of it, >= 130 dB of
rejection from 1.0 of it), each phase's row normalised to unit DC gain, output k at input time
k * sr_in / sr_out with zeros outside the input, and the core's (and python-soxr's) output
length round(n * sr_out / sr_in). Two ways to run it:

- exact polyphase (up = sr_out / gcd <= 1024 phases and a bank under 4M floats: every practical
  pair): one strided `conv1d` with one output channel per phase residue. Channel r holds the row
  of outputs k = r (mod up), shifted by their whole-sample advance, so the whole bank reads one
  window of the input per stride of `down` samples; the channels interleave into the output.
- any other ratio (e.g. 44100 -> 16001): each output's row is designed at its exact fractional
  delay, in chunks of outputs, and applied to a gathered window (the core blends precomputed
  rows linearly there instead; the two agree to its ~144 dB interpolation error).

Where it differs from the core: the core runs large downsampling ratios (44.1/48/96 kHz ->
16 kHz) in half-band stages first; this one runs the single-stage filter. Both are within the
same soxr-HQ-like response; tests/test_torch_resampler.py bounds the difference against the core
and against soxr. Filter rows are designed in float64 on the host once per (rates, device) and
cached (a few hundred KB at most); the waveform itself never leaves its device.
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import numpy as np
import torch

STOPBAND_DB = 130.0
PASSBAND_END = 0.913  # of the lower Nyquist frequency
STOPBAND_BEGIN = 1.0
MAX_EXACT_PHASES = 1024
MAX_BANK_FLOATS = 1 << 22  # up x (taps + down) floats of the conv1d weight
#: floats of one chunk's gathered windows on the interpolated path
CHUNK_FLOATS = 1 << 22
MAX_SAMPLE_RATE = 1_000_000

_lock = threading.Lock()


def resampled_length(n: int, sr_in: int, sr_out: int) -> int:
    """round(n * sr_out / sr_in) with halves rounded up (the core's and python-soxr's length)."""
    g = math.gcd(sr_in, sr_out)
    up, down = sr_out // g, sr_in // g
    return (2 * n * up + down) // (2 * down)


def _check_rate(rate: int, what: str) -> int:
    if isinstance(rate, bool) or int(rate) != rate or not 1 <= int(rate) <= MAX_SAMPLE_RATE:
        raise ValueError(f"{what} must be an integer in 1..{MAX_SAMPLE_RATE} Hz, got {rate!r}")
    return int(rate)


def _design(sr_in: int, sr_out: int) -> tuple[int, int, int, float, float]:
    """(up, down, half, cutoff in cycles per input sample, Kaiser beta) as the core designs them."""
    g = math.gcd(sr_in, sr_out)
    up, down = sr_out // g, sr_in // g
    nyquist = 0.5 * min(1.0, sr_out / sr_in)
    passband, stopband = PASSBAND_END * nyquist, STOPBAND_BEGIN * nyquist
    length = (STOPBAND_DB - 7.95) / (2.285 * 2.0 * math.pi * (stopband - passband))
    half = math.ceil(length / 2.0)
    return up, down, half, 0.5 * (passband + stopband), 0.1102 * (STOPBAND_DB - 8.7)


def _rows(fracs, cutoff: float, half: int, beta: float, xp):
    """Filter rows [len(fracs), 2 * half] for fractional delays `fracs` in [0, 1), float64, each
    normalised to unit DC gain; xp is numpy or torch (the same formulas as design_row)."""
    j = xp.arange(2 * half, dtype=fracs.dtype) if xp is np else torch.arange(
        2 * half, dtype=fracs.dtype, device=fracs.device)
    d = fracs[:, None] + (half - 1.0) - j[None, :]
    r = d / half
    inside = xp.abs(r) < 1.0
    i0 = np.i0 if xp is np else torch.special.i0
    root = xp.sqrt(xp.clip(1.0 - r * r, 0.0, None)) if xp is np else torch.sqrt(torch.clamp(1.0 - r * r, min=0.0))
    window = xp.where(inside, i0(beta * root) / float(np.i0(beta)), 0.0)
    h = 2.0 * cutoff * xp.sinc(2.0 * cutoff * d) * window
    return h / h.sum(1, keepdims=True) if xp is np else h / h.sum(1, keepdim=True)


def _exact(up: int, down: int, half: int) -> bool:
    return up <= MAX_EXACT_PHASES and up * (2 * half + down) <= MAX_BANK_FLOATS


@lru_cache(maxsize=16)
def _conv_bank_host(sr_in: int, sr_out: int) -> np.ndarray:
    """float32 [up, 1, 2 * half + down - 1]: row of residue r shifted by its whole-sample advance."""
    up, down, half, cutoff, beta = _design(sr_in, sr_out)
    residues = np.arange(up, dtype=np.int64)
    phases = (residues * down) % up
    advances = (residues * down) // up
    rows = _rows(phases.astype(np.float64) / up, cutoff, half, beta, np)
    bank = np.zeros((up, 1, 2 * half + down - 1), np.float32)
    for r in range(up):
        bank[r, 0, advances[r]: advances[r] + 2 * half] = rows[r]
    return bank


_device_banks: dict[tuple[int, int, str], torch.Tensor] = {}


def _conv_bank(sr_in: int, sr_out: int, device: torch.device) -> torch.Tensor:
    key = (sr_in, sr_out, str(device))
    with _lock:
        bank = _device_banks.get(key)
        if bank is None:
            if len(_device_banks) >= 32:
                _device_banks.clear()
            bank = torch.from_numpy(_conv_bank_host(sr_in, sr_out)).to(device)
            _device_banks[key] = bank
    return bank


def resample(wave: torch.Tensor, sr_in: int, sr_out: int) -> torch.Tensor:
    """float32 [resampled_length(n)] of a 1-D waveform at sr_in, on wave's device (see the module doc).

    Any floating dtype is computed in float32; sr_in == sr_out returns the float32 waveform (the
    same tensor when it already is one)."""
    sr_in, sr_out = _check_rate(sr_in, "sr_in"), _check_rate(sr_out, "sr_out")
    if not isinstance(wave, torch.Tensor):
        raise TypeError(f"resample expects a torch.Tensor, got {type(wave).__name__}")
    if wave.ndim != 1:
        raise ValueError(f"resample expects a 1-D waveform, got shape {tuple(wave.shape)}")
    if not wave.is_floating_point():
        raise ValueError(f"resample expects float samples, got {wave.dtype}")
    x = wave.to(torch.float32)
    if sr_in == sr_out:
        return x
    n = x.shape[0]
    nout = resampled_length(n, sr_in, sr_out)
    if nout == 0:
        return x.new_zeros(0)
    up, down, half, cutoff, beta = _design(sr_in, sr_out)
    if _exact(up, down, half):
        bank = _conv_bank(sr_in, sr_out, x.device)
        per_channel = -(-nout // up)
        width = (per_channel - 1) * down + bank.shape[-1]
        right = max(0, width - (half - 1) - n)
        padded = torch.nn.functional.pad(x.contiguous(), (half - 1, right))
        out = torch.nn.functional.conv1d(padded[None, None, :width], bank, stride=down)[0]  # [up, per_channel]
        return out.t().reshape(-1)[:nout]
    return _resample_designed(x, n, nout, up, down, half, cutoff, beta)


def _resample_designed(x: torch.Tensor, n: int, nout: int, up: int, down: int, half: int, cutoff: float,
                       beta: float) -> torch.Tensor:
    """Outputs with rows designed at their exact delay, in chunks (ratios with too many phases)."""
    taps = 2 * half
    padded = torch.nn.functional.pad(x.contiguous(), (half - 1, taps))
    out = torch.empty(nout, dtype=torch.float32, device=x.device)
    chunk = max(1, CHUNK_FLOATS // taps)
    offsets = torch.arange(taps, device=x.device)
    for start in range(0, nout, chunk):
        k = torch.arange(start, min(nout, start + chunk), device=x.device, dtype=torch.int64)
        t = k * down
        base = torch.div(t, up, rounding_mode="floor")
        fracs = (t - base * up).to(torch.float64) / up
        rows = _rows(fracs, cutoff, half, beta, torch).to(torch.float32)
        windows = padded[base[:, None] + offsets[None, :]]
        out[start: start + len(k)] = (rows * windows).sum(1)
    return out
