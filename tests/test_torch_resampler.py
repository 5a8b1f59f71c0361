"""sdscore.audio.torch_resampler: the core's resampler in torch, on the waveform's device.

Stated tolerances (float32, signals of peak <= 0.4): against the core (`_core.resample`, the CPU
path of every loader) 2e-6 absolute where both run one stage, 5e-5 where the core runs half-band
pre-decimation stages first (44.1/48/96 kHz -> 16 kHz) or blends interpolated rows (44100 ->
16001); against python-soxr HQ on tones inside the passband, 1e-3 absolute away from the edges
(the two filters differ; the core is within the same bound of soxr).
"""

from __future__ import annotations

import numpy as np
import pytest
import soxr
import torch
from sdscore import _core
from sdscore.audio.torch_resampler import resample, resampled_length

SINGLE_STAGE = [(8000, 16000), (11025, 16000), (22050, 16000), (24000, 16000), (16000, 44100),
                (16000, 24000), (44100, 48000)]
STAGED = [(44100, 16000), (48000, 16000), (96000, 16000)]
INTERPOLATED = [(44100, 16001), (16001, 44100)]


def _signal(rate: int, seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(rate * seconds) + 37
    t = np.arange(n) / rate
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


@pytest.mark.parametrize(("sr_in", "sr_out", "tol", "seconds"),
                         [(a, b, 2e-6, 1.0) for a, b in SINGLE_STAGE] + [(a, b, 5e-5, 1.0) for a, b in STAGED]
                         + [(a, b, 5e-5, 0.1) for a, b in INTERPOLATED])
def test_equals_the_core(sr_in, sr_out, tol, seconds):
    x = _signal(sr_in, seconds)
    got = resample(torch.from_numpy(x), sr_in, sr_out)
    want = _core.resample(x, sr_in, sr_out)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert np.abs(got.numpy() - want).max() <= tol


@pytest.mark.parametrize(("sr_in", "sr_out"), [(8000, 16000), (24000, 16000), (44100, 16000), (48000, 16000)])
def test_close_to_soxr_on_passband_tones(sr_in, sr_out):
    t = np.arange(sr_in) / sr_in
    nyquist = min(sr_in, sr_out) / 2
    x = sum(0.1 * np.sin(2 * np.pi * f * nyquist * t + f) for f in (0.05, 0.3, 0.6, 0.85)).astype(np.float32)
    got = resample(torch.from_numpy(x), sr_in, sr_out).numpy()
    want = soxr.resample(x, sr_in, sr_out, quality="HQ")
    assert got.shape == want.shape
    edge = 200
    assert np.abs(got[edge:-edge] - want[edge:-edge]).max() <= 1e-3


@pytest.mark.parametrize("n", [0, 1, 2, 3, 159, 160, 161, 4801])
@pytest.mark.parametrize(("sr_in", "sr_out"), [(24000, 16000), (8000, 16000), (44100, 16000)])
def test_lengths_equal_the_core(n, sr_in, sr_out):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 0.1
    got = resample(torch.from_numpy(x), sr_in, sr_out)
    want = _core.resample(x, sr_in, sr_out)
    assert len(got) == len(want) == resampled_length(n, sr_in, sr_out)
    if len(want):
        assert np.abs(got.numpy() - want).max() <= 5e-5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_dtypes_run_in_float32(dtype):
    x = torch.from_numpy(_signal(24000, 0.3)).to(dtype)
    got = resample(x, 24000, 16000)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, resample(x.float(), 24000, 16000), atol=0, rtol=0)


def test_strided_input_equals_contiguous():
    x = torch.from_numpy(_signal(24000, 0.6))
    strided = x[::2]
    assert not strided.is_contiguous()
    torch.testing.assert_close(resample(strided, 12000, 16000), resample(strided.contiguous(), 12000, 16000),
                               atol=0, rtol=0)


def test_same_rate_returns_the_float32_tensor_itself():
    x = torch.from_numpy(_signal(16000, 0.1))
    assert resample(x, 16000, 16000).data_ptr() == x.data_ptr()


@pytest.mark.parametrize(("wave", "rates", "message"), [
    (torch.zeros(2, 10), (24000, 16000), r"1-D waveform, got shape \(2, 10\)"),
    (torch.zeros(10, dtype=torch.int16), (24000, 16000), "float samples, got torch.int16"),
    (torch.zeros(10), (0, 16000), r"sr_in must be an integer in 1..1000000 Hz, got 0"),
    (torch.zeros(10), (24000, 2.5), r"sr_out must be an integer in 1..1000000 Hz, got 2.5"),
])
def test_bad_input_is_named(wave, rates, message):
    with pytest.raises(ValueError, match=message):
        resample(wave, *rates)


def test_not_a_tensor_is_refused():
    with pytest.raises(TypeError, match="expects a torch.Tensor, got ndarray"):
        resample(np.zeros(10, np.float32), 24000, 16000)
