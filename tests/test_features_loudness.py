"""BS.1770-4 loudness in numba == pyloudnorm's integrated_loudness, at the audio's own rate."""

from __future__ import annotations

import numpy as np
import pytest
import soxr
from features_audio import RATE, batch_of, harmonic, read16, render
from sdscore.features.loudness import Bs1770Loudness, biquad, gate

pyln = pytest.importorskip("pyloudnorm")
TOL_LU = 0.1


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    paths = render(tmp_path_factory.mktemp("loud"), ("slt", "rms", "espeak"))
    return [read16(p) for p in paths.values()]


def reference(x: np.ndarray, rate: int) -> tuple[float, np.ndarray]:
    """pyloudnorm's integrated LUFS and its block loudness after both gates."""
    meter = pyln.Meter(rate)
    lufs = meter.integrated_loudness(x.astype(np.float64))
    blocks = np.asarray(meter.blockwise_loudness)
    above = blocks[blocks >= -70]
    relative = 10 * np.log10(np.mean(10 ** ((above + 0.691) / 10))) - 0.691 - 10
    return lufs, blocks[(blocks > relative) & (blocks > -70)]


def test_integrated_loudness_matches_pyloudnorm_on_speech(speech):
    rng = np.random.default_rng(0)
    items = list(speech) + [
        np.concatenate(
            [speech[0] * 0.05, np.zeros(RATE, np.float32), speech[1]]
        ),  # quiet part gated out
        (0.1 * rng.standard_normal(3 * RATE)).astype(np.float32),
    ]
    out = Bs1770Loudness().run(batch_of(items), {})
    for i, x in enumerate(items):
        lufs, blocks = reference(x, RATE)
        assert out["loudness_lufs"][i] == pytest.approx(lufs, abs=TOL_LU), i
        assert out["loudness_std_lu"][i] == pytest.approx(blocks.std(), abs=TOL_LU), i
        assert out["loudness_contour_lufs"][i][0] == pytest.approx(
            blocks[0], abs=TOL_LU
        )
        assert out["loudness_contour_lufs"][i][-1] == pytest.approx(
            blocks[-1], abs=TOL_LU
        )


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_k_weighting_is_designed_at_the_batch_rate(speech, rate):
    x = np.clip(soxr.resample(speech[1], RATE, rate), -1, 1).astype(np.float32)
    tone = harmonic(1000, 1.3, rate=rate, level=0.05)
    out = Bs1770Loudness().run(batch_of([x, tone], rate=rate), {})
    assert out["loudness_lufs"][0] == pytest.approx(reference(x, rate)[0], abs=TOL_LU)
    assert out["loudness_lufs"][1] == pytest.approx(
        reference(tone, rate)[0], abs=TOL_LU
    )


def test_level_changes_move_lufs_by_the_same_db(speech):
    x = speech[0]
    out = Bs1770Loudness().run(batch_of([x, x * 0.5, x * 0.1]), {})["loudness_lufs"]
    assert out[0] - out[1] == pytest.approx(20 * np.log10(2), abs=1e-6)
    assert out[0] - out[2] == pytest.approx(20, abs=1e-6)


def test_short_silent_and_empty_items_are_null_and_batched_equals_per_file(speech):
    items = [
        speech[2],
        np.zeros(RATE, np.float32),
        np.zeros(0, np.float32),
        speech[0][: int(0.3 * RATE)],
        speech[1],
    ]
    together = Bs1770Loudness().run(batch_of(items), {})
    assert together["loudness_lufs"][1:4] == [None, None, None]
    assert (
        together["loudness_contour_lufs"][1] is None
        and together["loudness_std_lu"][3] is None
    )
    for i, x in enumerate(items):
        alone = Bs1770Loudness().run(batch_of([x]), {})
        assert {k: v[0] for k, v in alone.items()} == {
            k: v[i] for k, v in together.items()
        }


def test_gate_of_nothing_audible_is_none():
    assert gate(np.zeros(5))[0] is None
    lufs, blocks = gate(np.array([1e-3, 1e-3, 1e-9]))
    assert lufs == pytest.approx(-0.691 - 30) and len(blocks) == 2


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="contour_points must be >= 1, got 0"):
        Bs1770Loudness(contour_points=0)
    with pytest.raises(ValueError, match="unknown biquad kind 'low_shelf'"):
        biquad("low_shelf", 0.0, 0.7, 100.0, 16000)
