"""YIN pitch (TRACE settings) against parselmouth's to_pitch() on TTS speech and known tones."""

from __future__ import annotations

import numpy as np
import pytest
import soxr
from features_audio import RATE, batch_of, harmonic, read16, render
from sdscore.features.pitch import YinPitch

parselmouth = pytest.importorskip("parselmouth")


def praat_track(x: np.ndarray, rate: int) -> tuple[np.ndarray, np.ndarray]:
    """(times s, F0 Hz with 0 = unvoiced) from parselmouth's default autocorrelation pitch."""
    pitch = parselmouth.Sound(x.astype(np.float64), rate).to_pitch()
    return pitch.xs(), pitch.selected_array["frequency"]


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    paths = render(tmp_path_factory.mktemp("pitch"))
    return {name: read16(p) for name, p in paths.items()}


@pytest.mark.parametrize("f0", [85.0, 117.3, 163.0, 220.0, 290.0])
def test_stationary_tones_within_half_a_percent(f0):
    out = YinPitch().run(batch_of([harmonic(f0, 1.5)]), {})
    _, praat = praat_track(harmonic(f0, 1.5), RATE)
    assert out["pitch_median_hz"][0] == pytest.approx(f0, rel=0.005)
    assert out["pitch_median_hz"][0] == pytest.approx(
        np.median(praat[praat > 0]), rel=0.005
    )
    assert out["pitch_std_hz"][0] < 0.01 * f0
    assert len(out["pitch_contour_hz"][0]) == 20


def test_median_f0_within_two_percent_of_parselmouth_on_voiced_speech(speech):
    """On the frames both trackers call voiced, at TRACE's 24 kHz (confidence >= 0.8, no range filter)."""
    yin = YinPitch(fmin=None, fmax=None)
    tracks = yin.track(batch_of(list(speech.values())))
    for (name, x), (f0, conf) in zip(speech.items(), tracks):
        times, praat = praat_track(soxr.resample(x, RATE, 24000), 24000)
        ours_t = np.arange(len(f0)) * yin.hop_length / yin.sample_rate
        nearest = praat[np.abs(ours_t[:, None] - times[None]).argmin(axis=1)]
        both = (nearest > 0) & yin.keep(f0, conf)
        assert both.sum() >= 20, name
        assert np.median(f0[both]) == pytest.approx(
            np.median(nearest[both]), rel=0.02
        ), name


def test_filters_keep_only_confident_frames_in_range(speech):
    # The unfiltered track uses the same 80-300 Hz lag search as the default (the range bounds
    # the dip search, not only the filter), so the default must equal it after filtering.
    batch = batch_of([speech["rms"]])
    wide = YinPitch(min_confidence=None)
    f0, conf = wide.track(batch)[0]
    default = YinPitch().run(batch, {})
    kept = f0[(conf >= 0.65) & (f0 >= 80) & (f0 <= 300)]
    assert default["pitch_mean_hz"][0] == pytest.approx(kept.mean())
    assert default["pitch_std_hz"][0] == pytest.approx(kept.std())
    assert default["pitch_contour_hz"][0][0] == pytest.approx(kept[0])
    assert default["pitch_contour_hz"][0][-1] == pytest.approx(kept[-1])
    narrow = YinPitch(fmin=95.0, fmax=105.0).run(batch, {})
    assert 95.0 <= narrow["pitch_mean_hz"][0] <= 105.0


def test_vibrato_contour_follows_the_pitch():
    out = YinPitch(contour_points=7).run(
        batch_of([harmonic(150, 2.0, vibrato=30.0)]), {}
    )
    contour = out["pitch_contour_hz"][0]
    assert len(contour) == 7 and 115 < min(contour) < max(contour) < 185
    assert out["pitch_std_hz"][0] > 10


def test_batched_equals_per_file_and_unvoiced_items_are_null(speech):
    items = [
        speech["slt"],
        np.zeros(RATE, np.float32),
        np.zeros(0, np.float32),
        speech["kal"][:400],
    ]
    together = YinPitch().run(batch_of(items), {})
    for i, x in enumerate(items):
        alone = YinPitch().run(batch_of([x]), {})
        assert {k: v[0] for k, v in alone.items()} == {
            k: v[i] for k, v in together.items()
        }
    assert (
        together["pitch_mean_hz"][1] is None and together["pitch_contour_hz"][2] is None
    )


def test_bad_settings_are_refused():
    with pytest.raises(
        ValueError, match="fmin \\(300 Hz\\) must be below fmax \\(80 Hz\\)"
    ):
        YinPitch(fmin=300, fmax=80)
    with pytest.raises(
        ValueError, match="frame_length must be an even number >= 8, got 2047"
    ):
        YinPitch(frame_length=2047)
    with pytest.raises(ValueError, match="hop_length must be >= 1, got 0"):
        YinPitch(hop_length=0)
    with pytest.raises(ValueError, match="contour_points must be >= 1, got 0"):
        YinPitch(contour_points=0)


def test_frames_in_parallel_threads_give_the_same_track():
    """Runs of frames go to threads (FFT and numba dip search without the GIL): every frame's F0
    and confidence must be bit-identical whatever the thread count, on ragged items incl. empty."""
    items = [harmonic(110, 3.0), np.zeros(0, np.float32), harmonic(220, 0.3), harmonic(160, 7.0, vibrato=5)]
    batch = batch_of(items)
    one = YinPitch(num_threads=1).track(batch)
    for threads in (2, 5):
        many = YinPitch(num_threads=threads).track(batch)
        for (f_a, c_a), (f_b, c_b) in zip(one, many):
            np.testing.assert_array_equal(f_a, f_b)
            np.testing.assert_array_equal(c_a, c_b)
    assert len(one[1][0]) == 0
