"""Whisper log-mel of a window's clips in one batched torch computation, on any torch device.

Gives, clip by clip, what `sdiareward_qwen.clip_features` gives (the frames the Qwen2.5-Omni
processor computes over the clip padded to n_samples), with the same ops the feature extractor's
torch path runs: a periodic Hann window, `torch.stft` (center, reflect padding at the buffer
ends), the power of all frames but the last, the extractor's own `mel_filters`, log10 over a
1e-10 floor, an 8-decade floor below the row's maximum, then (x + 4) / 4.

Why one zero-padded [N, samples] batch keeps each clip's result: a clip of n samples keeps
F = ceil(n / hop) frames. Frame t covers samples [t*hop - n_fft/2, t*hop + n_fft/2), so every kept
frame, and frames F and F + 1 (which may still touch the clip's tail and so can hold the
maximum), see the clip followed by zeros whatever the length of the zero tail once it spans
(F + 3) hops (the reflect padding at the end then mirrors zeros). Every later frame is all zeros:
log10(1e-10) = -10, the smallest possible value, so it never raises the maximum. Padding a clip
with more zeros than that, to the batch's longest buffer, therefore changes neither its kept
frames nor its normalising maximum, exactly as the processor's 300 s buffer does not.

Clips that `clip_features` itself sends to the full n_samples buffer (the clip reaches to within
(3 hops + n_fft) of n_samples, so the end reflection can mirror it) and extractors with a non-zero
padding_value or dither go through `clip_features` on the CPU and are then moved to the device.

Tolerance: on the CPU (float32), equal to `clip_features` and to the extractor on the full 300 s
buffer within 1e-5 absolute (tested; on the development machine the results were bit-identical,
but a wider batch may change the mel matrix product's blocking). On CUDA, cuFFT and cuBLAS round
differently from pocketfft/MKL: not measured yet (no GPU was lent).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

#: zero hops kept after a clip's last kept frame (see the module doc)
TAIL_HOPS = 3


def clip_frames(feature_extractor: Any, samples: int) -> int:
    """Valid log-mel frames of a clip of `samples` samples: ceil(n / hop), n truncated to n_samples."""
    hop = int(feature_extractor.hop_length)
    return min(-(-samples // hop), int(feature_extractor.n_samples) // hop)


def clip_features(feature_extractor: Any, wave: np.ndarray) -> torch.Tensor:
    """float32 [n_mels, F]: the F valid log-mel frames the processor computes for `wave`.

    The processor pads each clip to n_samples (300 s for Qwen2.5-Omni) and keeps F = ceil(n / hop)
    frames. Every frame that touches the clip, and the maximum that Whisper's log-mel clamps
    against, are the same when the clip is padded with only (F + 3) hops of zeros, so that short
    buffer is used: a 3 s clip costs 3 s of STFT and 0.2 MB, not 300 s and 15 MB. Clips that
    reach the end of the buffer, non-zero padding and dither fall back to the full buffer.
    """
    fe = feature_extractor
    n_samples, hop = int(fe.n_samples), int(fe.hop_length)
    wave = wave[:n_samples]
    frames = clip_frames(fe, len(wave))
    length = hop * (frames + 3)
    if length + int(fe.n_fft) > n_samples or float(fe.padding_value) != 0.0 or float(getattr(fe, "dither", 0.0)):
        length = n_samples
    out = fe(
        wave, sampling_rate=fe.sampling_rate, padding="max_length", max_length=length, truncation=True,
        return_attention_mask=False, return_tensors="np",
    )
    return torch.from_numpy(np.ascontiguousarray(out["input_features"][0, :, :frames], dtype=np.float32))


def _needs_full_buffer(feature_extractor: Any, frames: int) -> bool:
    fe = feature_extractor
    return int(fe.hop_length) * (frames + TAIL_HOPS) + int(fe.n_fft) > int(fe.n_samples)


def _pads_with_zeros(feature_extractor: Any) -> bool:
    return float(feature_extractor.padding_value) == 0.0 and not float(getattr(feature_extractor, "dither", 0.0))


def whisper_log_mel(waves: Sequence[np.ndarray], feature_extractor: Any,
                    device: torch.device | str | None = None) -> list[torch.Tensor]:
    """float32 [n_mels, F_i] per clip on `device` (default CPU), as `clip_features(fe, wave)`.

    waves: 1-D arrays, or torch tensors (on any device: they are copied into the batch on `device`
    directly), at the extractor's sampling rate (longer than n_samples: truncated, as the
    processor does). All clips that allow it are computed in one batch; see the module doc. The
    batched clips' tensors are views into that batch's [N, n_mels, frames] result.
    """
    fe = feature_extractor
    device = torch.device(device or "cpu")
    n_samples, hop = int(fe.n_samples), int(fe.hop_length)
    clips = []
    for n, wave in enumerate(waves):
        wave = wave if isinstance(wave, torch.Tensor) else np.asarray(wave)
        if wave.ndim != 1:
            raise ValueError(f"audio clip {n}: expected a 1-D waveform, got shape {tuple(wave.shape)}")
        clips.append(wave[:n_samples])
    frames = [clip_frames(fe, len(c)) for c in clips]
    out: list[torch.Tensor | None] = [None] * len(clips)
    batched = []
    for n, clip in enumerate(clips):
        if _pads_with_zeros(fe) and not _needs_full_buffer(fe, frames[n]):
            batched.append(n)
        else:
            host = clip.cpu().numpy() if isinstance(clip, torch.Tensor) else clip
            out[n] = clip_features(fe, host).to(device)
    if batched:
        length = hop * (max(frames[n] for n in batched) + TAIL_HOPS)
        host = torch.zeros(len(batched), length, dtype=torch.float32, pin_memory=device.type == "cuda")
        on_device = []  # tensor clips are written into the batch on the device, never via the host
        for row, n in enumerate(batched):
            if isinstance(clips[n], torch.Tensor):
                on_device.append((row, n))
            else:
                host[row, : len(clips[n])] = torch.from_numpy(np.asarray(clips[n], dtype=np.float32))
        rows = host.to(device, non_blocking=True)
        for row, n in on_device:
            rows[row, : len(clips[n])] = clips[n].to(device, torch.float32)
        logs = _log_mel_rows(rows, fe)
        for row, n in enumerate(batched):
            out[n] = logs[row, :, : frames[n]]
    return out  # type: ignore[return-value]


def _log_mel_rows(batch: torch.Tensor, feature_extractor: Any) -> torch.Tensor:
    """[N, n_mels, samples // hop] Whisper log-mel of each row of a float32 [N, samples] batch,
    each row normalised against its own maximum (the extractor's _torch_extract_fbank_features)."""
    fe = feature_extractor
    n_fft, hop = int(fe.n_fft), int(fe.hop_length)
    window = torch.hann_window(n_fft, device=batch.device)
    stft = torch.stft(batch, n_fft, hop, window=window, return_complex=True)
    frames = stft[..., :-1]  # re² + im²: complex abs() (a sqrt per bin) cost more than the STFT itself
    power = frames.real.square() + frames.imag.square()
    filters = torch.from_numpy(np.asarray(fe.mel_filters)).to(batch.device, torch.float32)
    log_spec = torch.clamp(filters.T @ power, min=1e-10).log10()
    peak = log_spec.amax(dim=(1, 2), keepdim=True)
    log_spec = torch.maximum(log_spec, peak - 8.0)
    return (log_spec + 4.0) / 4.0
