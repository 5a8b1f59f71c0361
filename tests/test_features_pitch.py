"""YIN pitch (TRACE's frame settings, Praat's band and voicing rule) against parselmouth's to_pitch() on TTS
speech and known tones."""

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
    """On the frames both trackers call voiced, at TRACE's 24 kHz (no range filter)."""
    yin = YinPitch(fmin=None, fmax=None)
    tracks = yin.track(batch_of(list(speech.values())))
    for (name, x), track in zip(speech.items(), tracks):
        f0 = track.f0
        times, praat = praat_track(soxr.resample(x, RATE, 24000), 24000)
        ours_t = np.arange(len(f0)) * yin.hop_length / yin.sample_rate
        nearest = praat[np.abs(ours_t[:, None] - times[None]).argmin(axis=1)]
        both = (nearest > 0) & yin.keep(track)
        assert both.sum() >= 20, name
        assert np.median(f0[both]) == pytest.approx(
            np.median(nearest[both]), rel=0.02
        ), name


def test_filters_keep_only_voiced_confident_frames_in_range(speech):
    # The unfiltered track uses the same 75-600 Hz lag search as the default (the range bounds
    # the dip search, not only the filter), so the default must equal it after filtering by
    # Praat's voicing rule (with Praat's periodicity), the range and the octave-of-the-median
    # rule (no YIN confidence filter by default).
    batch = batch_of([speech["rms"]])
    wide = YinPitch(min_confidence=None, voicing_threshold=None, octave_filter=False)
    track = wide.track(batch)[0]
    f0 = track.f0
    default = YinPitch().run(batch, {})
    unvoiced_strength = 0.45 + np.maximum(0.0, 2.0 - track.peak_ratio / (0.03 / 1.45))
    mask = (track.periodicity > unvoiced_strength) & (f0 >= 75) & (f0 <= 600)
    median = np.median(f0[mask])
    kept = f0[mask & (f0 >= median / 2) & (f0 <= median * 2)]
    assert 0 < len(kept) < len(f0)
    assert default["pitch_mean_hz"][0] == pytest.approx(kept.mean())
    assert default["pitch_std_hz"][0] == pytest.approx(kept.std())
    assert default["pitch_contour_hz"][0][0] == pytest.approx(kept[0])
    assert default["pitch_contour_hz"][0][-1] == pytest.approx(kept[-1])
    narrow = YinPitch(fmin=95.0, fmax=105.0).run(batch, {})
    assert 95.0 <= narrow["pitch_mean_hz"][0] <= 105.0


def test_quiet_periodic_frames_are_unvoiced_as_in_praat():
    """A tone at full level then the same tone 46 dB down: Praat calls the quiet part unvoiced
    (its local peak is under silence_threshold / (1 + voicing_threshold) of the global peak), and
    so do we; YIN's confidence alone keeps it."""
    x = np.concatenate([harmonic(140, 1.0, level=0.5), harmonic(140, 1.0, level=0.0025)])
    batch = batch_of([x])
    yin = YinPitch()
    track = yin.track(batch)[0]
    times = np.arange(len(track.f0)) * yin.hop_length / yin.sample_rate
    loud, quiet = (times > 0.1) & (times < 0.9), (times > 1.1) & (times < 1.9)
    assert yin.keep(track)[loud].all() and not yin.keep(track)[quiet].any()
    assert YinPitch(voicing_threshold=None).keep(track)[quiet].all()
    _, praat = praat_track(x, RATE)
    praat_times = parselmouth.Sound(x.astype(np.float64), RATE).to_pitch().xs()
    assert (praat[(praat_times > 1.1) & (praat_times < 1.9)] == 0).all()
    assert (praat[(praat_times > 0.1) & (praat_times < 0.9)] > 0).all()


def test_frames_more_than_an_octave_from_the_median_are_dropped():
    x = np.concatenate([harmonic(110, 1.5), harmonic(495, 0.2)])
    with_filter = YinPitch().run(batch_of([x]), {})
    without = YinPitch(octave_filter=False).run(batch_of([x]), {})
    assert with_filter["pitch_mean_hz"][0] == pytest.approx(110, rel=0.01)
    assert without["pitch_mean_hz"][0] > 130


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
    with pytest.raises(ValueError, match="voicing_threshold must be in \\[0, 1\\), got 1.5"):
        YinPitch(voicing_threshold=1.5)
    with pytest.raises(ValueError, match="silence_threshold must be in \\[0, 1\\), got -0.1"):
        YinPitch(silence_threshold=-0.1)


def test_frames_in_parallel_threads_give_the_same_track():
    """Runs of frames go to threads (FFT and numba dip search without the GIL): every frame's F0
    and confidence must be bit-identical whatever the thread count, on ragged items incl. empty."""
    items = [harmonic(110, 3.0), np.zeros(0, np.float32), harmonic(220, 0.3), harmonic(160, 7.0, vibrato=5)]
    batch = batch_of(items)
    one = YinPitch(num_threads=1).track(batch)
    for threads in (2, 5):
        many = YinPitch(num_threads=threads).track(batch)
        for a, b in zip(one, many):
            for field_a, field_b in zip(a, b):
                np.testing.assert_array_equal(field_a, field_b)
    assert len(one[1].f0) == 0
