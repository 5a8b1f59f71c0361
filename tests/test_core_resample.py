"""sdscore._core.resample: soxr-HQ-like response (full-band parity, stopband rejection, passband
ripple), length and alignment, edge cases; the DALI backend's resampling path."""

from __future__ import annotations

import glob
import math
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import soundfile as sf
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import signal
from sdscore import _core
from sdscore.audio.dali_backend import dali_available

RATE_PAIRS = [
    (8000, 16000),
    (16000, 16000),
    (22050, 16000),
    (24000, 16000),
    (44100, 16000),
    (48000, 16000),
    (16000, 44100),
    (44100, 16001),
]
# The pairs the loader meets in practice, down- and upsampling: every common source rate to
# 16 and 24 kHz, and some upsampling and near-unity ones. 44100 <-> 16001 run the interpolated
# bank (up = 16001 > 1024); 44100/48000/96000 -> 16000 the half-band pre-decimation stages.
RESPONSE_PAIRS = sorted(
    {(s, o) for o in (16000, 24000) for s in (8000, 11025, 22050, 44100, 48000, 96000) if s != o}
    | {(16000, 44100), (16000, 48000), (44100, 48000), (48000, 96000), (44100, 16001), (16001, 44100)}
)
# Full-band relative RMS error against soxr HQ (same passband end 0.913 and stopband start 1.0
# of the lower Nyquist frequency); measured <= 3.2e-3 on recorded speech. The old filter
# (transition 0.82..1.18) was at 8e-2.
MAX_REL_ERROR = 5e-3
MAX_LAG = 3
MIN_REJECTION_DB = 100.0  # DALI's GPU resampler; the 80-dB filter of old let 1.01 x Nyquist through at -7 dB
# The core's 130-dB design: measured >= 130.5 dB at these tones (soxr HQ: 128.1 .. 161 dB on the
# upsampling pairs; the 105-dB design before it, >= 114.7 dB)
CORE_MIN_REJECTION_DB = 125.0
MAX_RIPPLE_DB = 1e-4  # peak-to-peak gain below 0.9 x Nyquist; measured <= 1.8e-5 dB (105 dB: 2.4e-4; old: 0.48)

# Real recorded speech ("Front center", ... at 48 kHz, from Debian's alsa-utils).
ALSA_SPEECH = sorted(p for p in glob.glob("/usr/share/sounds/alsa/*.wav") if "Noise" not in p)


def speech_like(sr: int, seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    """Glottal pulse train with vibrato through four formant resonators, plus noise bursts."""
    rng = np.random.default_rng(seed)
    n = int(sr * seconds)
    t = np.arange(n) / sr
    f0 = 120 * (1 + 0.05 * np.sin(2 * np.pi * 5 * t)) * (1 + 0.2 * np.sin(2 * np.pi * 0.7 * t))
    pulses = np.diff(np.floor(np.cumsum(f0) / sr), prepend=0.0)
    y = signal.lfilter([1.0], [1, -0.97], pulses)
    for fc, bw in [(700, 130), (1220, 70), (2600, 160), (3300, 250)]:
        if fc < sr / 2:
            r, th = np.exp(-np.pi * bw / sr), 2 * np.pi * fc / sr
            y = signal.lfilter([1 - r], [1, -2 * r * np.cos(th), r * r], y)
    y /= np.max(np.abs(y))
    for start in rng.uniform(0, seconds - 0.2, 4):  # fricative-like broadband bursts
        i0, length = int(start * sr), int(0.1 * sr)
        y[i0 : i0 + length] += 0.2 * rng.standard_normal(length) * np.hanning(length)
    return (0.5 * y / np.max(np.abs(y))).astype(np.float32)


def relative_error(ours: np.ndarray, ref: np.ndarray) -> tuple[float, int]:
    """Best full-band relative RMS error over lags -3..3; returns (err, lag)."""
    assert ours.shape == ref.shape
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    results = []
    for lag in range(-MAX_LAG, MAX_LAG + 1):
        a_part = a[max(lag, 0) : len(a) + min(lag, 0)]
        b_part = b[max(-lag, 0) : len(b) + min(-lag, 0)]
        results.append((float(np.sqrt(np.mean((a_part - b_part) ** 2) / np.mean(b_part**2))), lag))
    return min(results)


def relative_error_vs_soxr(x: np.ndarray, sr_in: int, sr_out: int) -> tuple[float, int]:
    ours = _core.resample(x, sr_in, sr_out)
    assert ours.dtype == np.float32
    return relative_error(ours, soxr.resample(x, sr_in, sr_out, quality="HQ"))


def at_rate(x: np.ndarray, native: int, rate: int) -> np.ndarray:
    y = x if native == rate else soxr.resample(x, native, rate, quality="VHQ")
    return np.ascontiguousarray(y, dtype=np.float32)


@pytest.fixture(scope="module")
def recorded_speech() -> list[tuple[np.ndarray, int]]:
    if not ALSA_SPEECH:
        pytest.skip("no recorded speech: /usr/share/sounds/alsa (alsa-utils) is not installed")
    return [sf.read(p, dtype="float32") for p in ALSA_SPEECH]


@pytest.mark.parametrize(("sr_in", "sr_out"), RESPONSE_PAIRS)
def test_matches_soxr_hq_full_band_on_recorded_speech(recorded_speech, sr_in, sr_out):
    for x, native in recorded_speech:
        error, lag = relative_error_vs_soxr(at_rate(x, native, sr_in), sr_in, sr_out)
        assert lag == 0
        assert error <= MAX_REL_ERROR


@pytest.mark.parametrize(("sr_in", "sr_out"), RESPONSE_PAIRS + [(16000, 16000)])
def test_matches_soxr_hq_full_band_on_speech_like_signal(sr_in, sr_out):
    error, lag = relative_error_vs_soxr(speech_like(sr_in), sr_in, sr_out)
    assert lag == 0
    assert error <= MAX_REL_ERROR


def render_tts(tool: str, path: str) -> None:
    text = "Please call Stella. Ask her to bring these things with her from the store."
    cmd = (
        [tool, "-voice", "slt", "-t", text, "-o", path]
        if tool == "flite"
        else [tool, "-w", path, text]
    )
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def tts_speech(tmp_path_factory) -> dict[str, tuple[np.ndarray, int]]:
    speech = {}
    for tool in ("flite", "espeak-ng"):
        if shutil.which(tool) is not None:
            path = str(tmp_path_factory.mktemp(tool) / "speech.wav")
            render_tts(tool, path)
            speech[tool] = sf.read(path, dtype="float32")
    return speech


@pytest.mark.parametrize("tool", ["flite", "espeak-ng"])
@pytest.mark.parametrize(("sr_in", "sr_out"), RESPONSE_PAIRS)
def test_matches_soxr_hq_full_band_on_tts_speech(tts_speech, tool, sr_in, sr_out):
    if tool not in tts_speech:
        pytest.skip(f"{tool} is not on PATH")
    x, native = tts_speech[tool]
    error, lag = relative_error_vs_soxr(at_rate(x, native, sr_in), sr_in, sr_out)
    assert lag == 0
    assert error <= MAX_REL_ERROR


def sine(f: float, sr: int, seconds: float = 1.0) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * f * np.arange(int(sr * seconds)) / sr)).astype(np.float32)


def stopband_tones(sr_in: int, sr_out: int) -> list[float]:
    """Input tones whose aliases (downsampling) or images (upsampling) must be rejected.

    Downsampling: 1.01, 1.02 and 1.05 x the output Nyquist frequency and one mid-stopband.
    Upsampling: 0.99, 0.98, 0.95 and 0.5 x the input Nyquist frequency, whose images land at
    1.01, 1.02, 1.05 and 1.5 x it.
    """
    if sr_out < sr_in:
        nyq = sr_out / 2
        return [1.01 * nyq, 1.02 * nyq, 1.05 * nyq, min(1.5 * nyq, (nyq + sr_in / 2) / 2)]
    nyq = sr_in / 2
    return [0.99 * nyq, 0.98 * nyq, 0.95 * nyq, 0.5 * nyq]


def leaked_db(resample, sr_in: int, sr_out: int, f: float) -> float:
    """Output power other than the tone itself, in dB re a passband tone's output power.

    Measured on the middle 3/4 of one second (no edges) through a Kaiser (beta 30) window,
    whose leakage is far below the levels looked for; the tone's own main lobe is removed when
    the tone is in band (upsampling).
    """

    def power(y):
        y = np.asarray(y, dtype=np.float64)
        cut = len(y) // 8
        y = y[cut : len(y) - cut]
        spectrum = np.abs(np.fft.rfft(y * np.kaiser(len(y), 30.0))) ** 2
        return spectrum, np.fft.rfftfreq(len(y), 1 / sr_out)

    ref, _ = power(resample(sine(0.3 * min(sr_in, sr_out) / 2, sr_in), sr_in, sr_out))
    out, freqs = power(resample(sine(f, sr_in), sr_in, sr_out))
    if f < min(sr_in, sr_out) / 2:
        out = out[np.abs(freqs - f) > 40 * freqs[1]]
    return float(10 * np.log10(max(out.sum(), 1e-300) / ref.sum()))


@pytest.mark.parametrize(("sr_in", "sr_out"), RESPONSE_PAIRS)
def test_rejects_aliases_and_images_by_125_db(sr_in, sr_out):
    for f in stopband_tones(sr_in, sr_out):
        assert leaked_db(_core.resample, sr_in, sr_out, f) <= -CORE_MIN_REJECTION_DB, f


def passband_gains_db(sr_in: int, sr_out: int, edge: float = 0.9, count: int = 40) -> np.ndarray:
    """Gain (least-squares amplitude of the output tone) for tones up to edge x Nyquist."""
    gains = []
    for f in np.linspace(0.02, edge, count) * min(sr_in, sr_out) / 2:
        y = _core.resample(sine(f, sr_in, 0.5), sr_in, sr_out).astype(np.float64)
        cut = len(y) // 8
        t = np.arange(cut, len(y) - cut) / sr_out
        basis = np.stack([np.sin(2 * np.pi * f * t), np.cos(2 * np.pi * f * t)], axis=1)
        coef, *_ = np.linalg.lstsq(basis, y[cut : len(y) - cut], rcond=None)
        gains.append(20 * np.log10(np.hypot(*coef) / 0.5))
    return np.array(gains)


@pytest.mark.parametrize(("sr_in", "sr_out"), RESPONSE_PAIRS)
def test_passband_is_flat_to_0_9_nyquist(sr_in, sr_out):
    gains = passband_gains_db(sr_in, sr_out)
    assert gains.max() - gains.min() <= MAX_RIPPLE_DB
    assert np.all(np.abs(gains) <= MAX_RIPPLE_DB)


def soxr_length(n: int, sr_in: int, sr_out: int) -> int:
    """python-soxr's output length: n * sr_out / sr_in rounded, halves up (checked below)."""
    return (2 * n * sr_out + sr_in) // (2 * sr_in)


@pytest.mark.parametrize(
    ("sr_in", "sr_out"), RATE_PAIRS + [(3, 2), (2, 3), (16000, 8000), (8000, 44100)]
)
def test_output_length_equals_soxr(sr_in, sr_out):
    for n in list(range(40)) + [999, 1000, 1001, 44100]:
        x = np.ones(n, dtype=np.float32)
        expected = len(soxr.resample(x, sr_in, sr_out, quality="HQ"))
        assert expected == soxr_length(n, sr_in, sr_out)
        assert len(_core.resample(x, sr_in, sr_out)) == expected, n


def test_same_rate_returns_a_copy():
    x = np.arange(10, dtype=np.float32)
    y = _core.resample(x, 16000, 16000)
    np.testing.assert_array_equal(y, x)
    y[0] = 99
    assert x[0] == 0


@pytest.mark.parametrize(("sr_in", "sr_out"), [(44100, 16000), (16000, 44100), (44100, 16001)])
def test_constant_passes_unchanged_away_from_edges(sr_in, sr_out):
    # The step at each end rings for the filter's half-length: ~5 ms at a 16 kHz lower rate
    # (78 input samples of 16 kHz = 215 outputs of 44.1 kHz), so skip 10 ms at each end.
    y = _core.resample(np.full(sr_in, 0.5, dtype=np.float32), sr_in, sr_out)
    edge = sr_out // 100
    np.testing.assert_allclose(y[edge:-edge], 0.5, atol=1e-5)


def test_first_output_is_aligned_with_first_input():
    """Zero phase: an impulse at input time t comes out centred at t * sr_out / sr_in."""
    x = np.zeros(4410, dtype=np.float32)
    x[441] = 1.0
    y = _core.resample(x, 44100, 16000)
    assert int(np.argmax(y)) == 160
    x = np.zeros(1000, dtype=np.float32)
    x[0] = 1.0
    y = _core.resample(x, 8000, 16000)
    assert int(np.argmax(y)) == 0 and y[0] > 0.9


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 31])
def test_tiny_inputs(n):
    x = np.linspace(-1, 1, n, dtype=np.float32)
    for sr_in, sr_out in [(44100, 16000), (16000, 44100), (44100, 16001), (1, 100_000)]:
        y = _core.resample(x, sr_in, sr_out)
        assert len(y) == soxr_length(n, sr_in, sr_out)  # soxr itself stalls on 1 Hz input
        assert np.all(np.isfinite(y))


def test_accepts_float64_and_strided_input():
    x = speech_like(22050, 0.5).astype(np.float64)
    expected = _core.resample(x.astype(np.float32), 22050, 16000)
    np.testing.assert_array_equal(_core.resample(x, 22050, 16000), expected)
    doubled = np.repeat(x.astype(np.float32), 2)[::2]
    np.testing.assert_array_equal(_core.resample(doubled, 22050, 16000), expected)


def test_rejects_non_1d_input():
    with pytest.raises(ValueError, match="resample expects a 1-D array, got 2 dimensions"):
        _core.resample(np.zeros((2, 3), dtype=np.float32), 16000, 8000)


@pytest.mark.parametrize(
    ("sr_in", "sr_out", "message"),
    [
        (0, 16000, "sr_in must be in 1..1000000 Hz, got 0"),
        (-8000, 16000, "sr_in must be in 1..1000000 Hz, got -8000"),
        (16000, 5_000_000, "sr_out must be in 1..1000000 Hz, got 5000000"),
    ],
)
def test_rejects_invalid_rates(sr_in, sr_out, message):
    with pytest.raises(ValueError, match=message):
        _core.resample(np.zeros(10, dtype=np.float32), sr_in, sr_out)


def test_rejects_impractically_extreme_downsampling():
    with pytest.raises(ValueError, match="needs a filter too long to be practical"):
        _core.resample(np.zeros(10, dtype=np.float32), 1_000_000, 1)


def test_thread_safe_filter_cache_gives_serial_results():
    x = speech_like(48000, 0.3)
    pairs = [(48000, r) for r in (8000, 11025, 16000, 16001, 22050, 24000, 44100, 47999)] * 3
    serial = [_core.resample(x, a, b) for a, b in pairs]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda p: _core.resample(x, *p), pairs))
    for s, p in zip(serial, parallel):
        np.testing.assert_array_equal(s, p)


@pytest.mark.parametrize(
    ("env", "isa"), [("SDSCORE_DISABLE_SIMD", "generic"), ("SDSCORE_DISABLE_AVX512", "avx2+fma")]
)
def test_portable_and_avx2_kernels_agree_with_the_chosen_kernels(env, isa):
    """SDSCORE_DISABLE_SIMD=1 forces the baseline loops, SDSCORE_DISABLE_AVX512=1 the AVX2 ones;
    each must give the same signal as the kernels this CPU picks (exact bank, interpolated
    bank and half-band stages: 44100 -> 16000, 16001, 48000)."""
    if isa == "avx2+fma" and _core.simd_isa() not in ("avx512f", "avx2+fma"):
        pytest.skip("no AVX2 on this CPU")
    code = (
        "import sys, numpy as np; from sdscore import _core; "
        "x = np.load(sys.argv[1]); "
        "print(_core.simd_isa()); "
        "[np.save(f'{sys.argv[1]}.{b}.npy', _core.resample(x, 44100, b)) for b in (16000, 16001, 48000)]"
    )
    x = speech_like(44100, 0.5)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sdscore_simd_{os.getpid()}.npy")
    np.save(path, x)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code, path],
            env=dict(os.environ, **{env: "1"}),
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.stdout.strip() == isa
        for b in (16000, 16001, 48000):
            np.testing.assert_allclose(
                np.load(f"{path}.{b}.npy"), _core.resample(x, 44100, b), atol=2e-6
            )
    finally:
        for f in [path] + [f"{path}.{b}.npy" for b in (16000, 16001, 48000)]:
            if os.path.exists(f):
                os.remove(f)


DALI_PAIRS = [(48000, 16000), (44100, 16000), (22050, 16000), (96000, 24000), (8000, 16000), (16000, 24000)]


def dali_resample(tmp_path):
    """Resampling through load_many(backend="dali"): x written as a float WAV at sr_in."""
    from sdscore import audio

    def run(x, sr_in, sr_out):
        path = tmp_path / f"x_{sr_in}_{len(x)}.wav"
        sf.write(path, x, sr_in, subtype="FLOAT")  # float: no 16-bit noise floor at -98 dB
        batch = audio.load_many([str(path)], sr_out, backend="dali")
        assert batch.errors[0] is None, batch.errors[0]
        return batch[0]

    return run


@pytest.mark.skipif(not dali_available(), reason="nvidia-dali is not installed")
@pytest.mark.parametrize(("sr_in", "sr_out"), DALI_PAIRS)
def test_dali_backend_rejects_aliases_and_images_by_100_db(tmp_path, sr_in, sr_out):
    resample = dali_resample(tmp_path)
    for f in stopband_tones(sr_in, sr_out):
        assert leaked_db(resample, sr_in, sr_out, f) <= -MIN_REJECTION_DB, f


@pytest.mark.skipif(not dali_available(), reason="nvidia-dali is not installed")
@pytest.mark.parametrize(("sr_in", "sr_out"), DALI_PAIRS)
def test_dali_backend_matches_soxr_hq_full_band(tmp_path, sr_in, sr_out):
    x = speech_like(sr_in)
    if ALSA_SPEECH:
        speech, native = sf.read(ALSA_SPEECH[0], dtype="float32")
        x = at_rate(speech, native, sr_in)
    ours = dali_resample(tmp_path)(x, sr_in, sr_out)
    error, lag = relative_error(ours, soxr.resample(x, sr_in, sr_out, quality="HQ"))
    assert lag == 0
    assert error <= MAX_REL_ERROR


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 3000),
    sr_in=st.integers(1, 200_000),
    sr_out=st.integers(1, 200_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_rate_pair_gives_soxr_length_and_finite_bounded_output(n, sr_in, sr_out, seed):
    if max(sr_in, sr_out) / min(sr_in, sr_out) > 100:
        sr_out = sr_in  # keep the generated output small
    x = np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)
    y = _core.resample(x, sr_in, sr_out)
    assert y.dtype == np.float32
    assert len(y) == soxr_length(n, sr_in, sr_out)
    assert np.all(np.isfinite(y))
    assert np.all(np.abs(y) <= 3.0)  # windowed-sinc gain is bounded by sum |h| < 3


# Pairs whose bank has a blocked copy (up divisible by 4 or by 2; see filter_bank.hpp), some
# behind half-band stages, and lengths around the blocked loop's super-blocks and its edges.
BLOCKED_PAIRS = [(22050, 16000), (44100, 16000), (11025, 16000), (8000, 16000), (48000, 16000),
                 (24000, 16000), (8000, 48000), (44100, 24000)]
BLOCKED_LENGTHS = [0, 1, 2, 15, 16, 17, 161, 1763, 1764, 1765, 1800, 3529, 7057, 22050 + 7, 44100 * 2 + 3]


def test_blocked_kernels_equal_portable_loop_on_ragged_lengths():
    """The register-blocked AVX-512 and AVX2 loops (G outputs x M periods per pass, with single outputs
    before the first block and after the last super-block) against the portable one-output-at-
    a-time loop, for every length from empty to a few seconds."""
    if _core.simd_isa() not in ("avx512f", "avx2+fma"):
        pytest.skip("the blocked loops are AVX-512 and AVX2 only")
    code = (
        "import sys, numpy as np; from sdscore import _core; "
        "xs = np.load(sys.argv[1], allow_pickle=True); "
        f"pairs = {BLOCKED_PAIRS!r}; "
        "np.save(sys.argv[1] + '.out.npy', np.array([_core.resample(x, a, b) for a, b in pairs for x in xs], "
        "dtype=object), allow_pickle=True)"
    )
    rng = np.random.default_rng(11)
    xs = np.empty(len(BLOCKED_LENGTHS), dtype=object)
    xs[:] = [(0.3 * rng.standard_normal(n)).astype(np.float32) for n in BLOCKED_LENGTHS]
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sdscore_blocked_{os.getpid()}.npy")
    np.save(path, xs, allow_pickle=True)
    try:
        runs = {}
        for name, env in [("portable", "SDSCORE_DISABLE_SIMD"), ("avx2", "SDSCORE_DISABLE_AVX512")]:
            subprocess.run([sys.executable, "-c", code, path], env=dict(os.environ, **{env: "1"}),
                           check=True, capture_output=True, text=True, timeout=300)
            runs[name] = iter(np.load(path + ".out.npy", allow_pickle=True))
        for a, b in BLOCKED_PAIRS:
            for x in xs:
                ours, ref, avx2 = _core.resample(x, a, b), next(runs["portable"]), next(runs["avx2"])
                np.testing.assert_allclose(avx2, ref, atol=2e-6, err_msg=f"AVX2 {a}->{b}, {len(x)} samples")
                g = math.gcd(a, b)
                assert ours.shape == ref.shape == ((2 * len(x) * (b // g) + a // g) // (2 * a // g),), (a, b, len(x))
                np.testing.assert_allclose(ours, ref, atol=2e-6, err_msg=f"{a}->{b}, {len(x)} samples")
    finally:
        for f in (path, path + ".out.npy"):
            if os.path.exists(f):
                os.remove(f)


# Pairs whose bank has a column copy (up 2..4, down <= 4: the vectorised-across-outputs loop),
# and lengths around its smallest run (128 periods under AVX-512, 48 under AVX2, plus the
# filter's ~156-sample reach), its chunks of 16 x 520 periods and a last chunk that starts early.
COLUMN_PAIRS = [(8000, 16000), (8000, 24000), (16000, 48000), (16000, 24000), (8000, 32000),
                (24000, 16000), (12000, 16000), (32000, 24000)]
COLUMN_LENGTHS = [150, 200, 250, 283, 284, 285, 300, 420, 8476, 8477, 8500, 8600, 16797, 17000, 25116,
                  40000 + 13]


def _resampled_in_subprocess(env: dict, pairs: list, xs: list) -> list:
    """_core.resample(x, a, b) for every pair and x, in a fresh process with `env` set (the
    kernels are picked once per process)."""
    code = (
        "import sys, numpy as np; from sdscore import _core; "
        "xs = np.load(sys.argv[1], allow_pickle=True); "
        f"pairs = {pairs!r}; "
        "np.save(sys.argv[1] + '.out.npy', np.array([_core.resample(x, a, b) for a, b in pairs for x in xs], "
        "dtype=object), allow_pickle=True)"
    )
    arr = np.empty(len(xs), dtype=object)
    arr[:] = xs
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sdscore_columns_{os.getpid()}.npy")
    np.save(path, arr, allow_pickle=True)
    try:
        subprocess.run([sys.executable, "-c", code, path], env=dict(os.environ, **env),
                       check=True, capture_output=True, text=True, timeout=300)
        return list(np.load(path + ".out.npy", allow_pickle=True))
    finally:
        for f in (path, path + ".out.npy"):
            if os.path.exists(f):
                os.remove(f)


def test_column_loop_equals_portable_loop_and_avx2_bit_for_bit_inside():
    """The column loop (one lane per output, lanes and tiles overlapping where periods do not
    divide evenly, chunks) against the portable one-output-at-a-time loop on every length from
    below its smallest run to several chunks; and AVX-512 against AVX2, whose lanes and tiles
    fall elsewhere: away from the edges (where both run it) they must agree bit for bit."""
    if _core.simd_isa() not in ("avx512f", "avx2+fma"):
        pytest.skip("the column loop is AVX-512 and AVX2 only")
    rng = np.random.default_rng(12)
    xs = [(0.3 * rng.standard_normal(n)).astype(np.float32) for n in COLUMN_LENGTHS]
    portable = iter(_resampled_in_subprocess({"SDSCORE_DISABLE_SIMD": "1"}, COLUMN_PAIRS, xs))
    avx2 = iter(_resampled_in_subprocess({"SDSCORE_DISABLE_AVX512": "1"}, COLUMN_PAIRS, xs))
    for a, b in COLUMN_PAIRS:
        for x in xs:
            ours, ref, other = _core.resample(x, a, b), next(portable), next(avx2)
            assert ours.shape == ref.shape == other.shape, (a, b, len(x))
            np.testing.assert_allclose(ours, ref, atol=2e-6, err_msg=f"{a}->{b}, {len(x)} samples")
            np.testing.assert_allclose(other, ref, atol=2e-6, err_msg=f"AVX2 {a}->{b}, {len(x)} samples")
            if _core.simd_isa() == "avx512f" and len(ours) > 4000:
                np.testing.assert_array_equal(ours[1000:-1000], other[1000:-1000], err_msg=f"{a}->{b}")


@pytest.mark.parametrize(("sr_in", "sr_out"), COLUMN_PAIRS + [(22050, 16000), (44100, 16000), (11025, 24000),
                                               (16000, 44100), (44100, 16001)])
def test_edges_treat_samples_outside_the_input_as_zeros(sr_in, sr_out):
    """The outputs whose filter window reaches past either end (run over a zero-padded copy of
    the ends) equal those of the same input with explicit zeros around it, where they come from
    the fast loops in the middle of the padded input. (44.1 -> 16 kHz runs a half-band stage
    first, whose own edges round differently: 1e-5 there.)"""
    tol = 1e-5 if sr_in >= 2 * sr_out else 2e-6
    g = math.gcd(sr_in, sr_out)
    up, down = sr_out // g, sr_in // g
    pad = down * max(1, -(-2000 // down))  # a whole number of periods: outputs stay aligned
    rng = np.random.default_rng(3)
    for n in (1, 5, 40, 157, 400, 3000):
        x = (0.3 * rng.standard_normal(n)).astype(np.float32)
        ours = _core.resample(x, sr_in, sr_out)
        padded = _core.resample(np.concatenate([np.zeros(pad, np.float32), x, np.zeros(pad, np.float32)]),
                                sr_in, sr_out)
        first = pad // down * up
        np.testing.assert_allclose(ours, padded[first: first + len(ours)], atol=tol, err_msg=f"{n} samples")


@pytest.mark.parametrize(("sr_in", "sr_out"), [(8000, 16000), (8000, 24000), (16000, 24000)])
def test_an_output_does_not_depend_on_the_input_length(sr_in, sr_out):
    """Each output of the column loop is one lane's sum in a fixed order: trimming the input moves
    every output to another lane and tile, yet the outputs away from both ends stay bit-identical
    (the same holds for the row loops, which start at the same place for every length)."""
    x = speech_like(sr_in, 3.0)
    full = _core.resample(x, sr_in, sr_out)
    for n in (len(x) - 1, len(x) - 37, len(x) - 1001, len(x) // 2 + 5, len(x) // 3):
        part = _core.resample(x[:n], sr_in, sr_out)
        inside = len(part) - 1000  # the last ~250 outputs see the cut (the filter's reach)
        np.testing.assert_array_equal(part[:inside], full[:inside], err_msg=f"{n} samples")


@pytest.mark.parametrize("env", [{}, {"SDSCORE_DISABLE_AVX512": "1"}, {"SDSCORE_DISABLE_SIMD": "1"}],
                         ids=["chosen", "avx2", "portable"])
def test_kernels_read_nothing_outside_the_input(env):
    """Every loop (blocked, grouped, single outputs, edges, half-band stages) of each ISA reads
    only inside x: tests/guarded_reads.py places x right after and right before a PROT_NONE page,
    so a stray read kills it (run in a subprocess: the crash fails this test, not the session)."""
    if "SDSCORE_DISABLE_AVX512" in env and _core.simd_isa() not in ("avx512f", "avx2+fma"):
        pytest.skip("no AVX2 on this CPU")
    pairs = BLOCKED_PAIRS + [(16000, 24000), (44100, 16001), (32000, 16000)]
    script = os.path.join(os.path.dirname(__file__), "guarded_reads.py")
    out = subprocess.run([sys.executable, script, repr(pairs), repr(BLOCKED_LENGTHS[1:])],
                         env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"rc {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.split()[-1] == str(len(pairs) * (len(BLOCKED_LENGTHS) - 1) * 2)
    # the column loop: its lane-interleaved copy and last, early-starting chunk read up to the end
    out = subprocess.run([sys.executable, script, repr(COLUMN_PAIRS), repr(COLUMN_LENGTHS)],
                         env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"rc {out.returncode}: {out.stderr[-2000:]}"
    assert out.stdout.split()[-1] == str(len(COLUMN_PAIRS) * len(COLUMN_LENGTHS) * 2)
