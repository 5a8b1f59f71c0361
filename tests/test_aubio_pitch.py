"""``pitch_aubio``: TRACE's aubio ``yin`` tracker, batched, against the aubio package itself (when
installed) and against a line-by-line transcription of aubio 0.4.9's C loop (always)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from features_audio import batch_of, harmonic
from sdscore.audio import load_many
from sdscore.features.aubio_pitch import AubioYinPitch
from sdscore.features.blueprint import BlueprintBuilder

REAL = Path(__file__).resolve().parent / "data" / "real"
CLIPS = sorted((REAL / "voices").glob("*.flac")) + sorted(REAL.glob("read_*.wav"))


def authors_loop(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The TRACE authors' loop over ``aubio.pitch("yin", 2048, 512, 24000)`` (Hz, silence -40 dB)."""
    import aubio

    detector = aubio.pitch("yin", 2048, 512, 24000)
    detector.set_unit("Hz")
    detector.set_silence(-40)
    pitch, confidence = [], []
    for i in range(0, len(y) - 512, 512):
        pitch.append(detector(y[i : i + 512].astype(np.float32))[0])
        confidence.append(detector.get_confidence())
    return np.array(pitch, dtype=np.float64), np.array(confidence, dtype=np.float64)


def transcribed_c(y: np.ndarray, tol: float = 0.15) -> tuple[np.ndarray, np.ndarray]:
    """aubio 0.4.9 src/pitch/pitchyin.c aubio_pitchyin_do + pitch.c aubio_pitch_do, transcribed
    directly (d(τ) summed per lag, no FFT), slow: for short clips only."""
    buf = np.zeros(2048)
    pitches, confidences = [], []
    for i in range(0, len(y) - 512, 512):
        hop = y[i : i + 512].astype(np.float64)
        buf = np.concatenate([buf[512:], hop])
        yin = np.ones(1024)
        windows = np.lib.stride_tricks.sliding_window_view(buf, 1024)[:1024]
        d = ((windows[0][None, :] - windows) ** 2).sum(axis=1)
        running, pos = 0.0, None
        for tau in range(1, 1024):
            running += d[tau]
            yin[tau] = d[tau] * tau / running if running != 0 else 1.0
            p = tau - 3
            if tau > 4 and yin[p] < tol and yin[p] < yin[p + 1]:
                pos = p
                break
        if pos is None:
            pos = int(len(yin) - 1 - np.argmin(yin[::-1]))  # fvec_min_elem keeps the last minimum
        period = float(pos)
        if 0 < pos < 1023:
            s0, s1, s2 = yin[pos - 1], yin[pos], yin[pos + 1]
            if s0 - 2 * s1 + s2 != 0:
                period = pos + 0.5 * (s0 - s2) / (s0 - 2 * s1 + s2)
        pitch = 24000 / period if period > 0 else 0.0
        if 10 * np.log10(np.mean(hop**2)) < -40 if np.any(hop) else True:
            pitch = 0.0
        pitches.append(pitch)
        confidences.append(1.0 - yin[pos])
    return np.array(pitches), np.array(confidences)


def kept_stats(pitch, confidence, tracker: AubioYinPitch) -> tuple[int, float, float]:
    kept = pitch[tracker.keep(pitch, confidence)]
    return len(kept), float(kept.mean()), float(kept.std())


def test_matches_the_aubio_package_on_every_real_clip():
    pytest.importorskip("aubio")
    tracker = AubioYinPitch()
    batch = load_many([str(p) for p in CLIPS], sample_rate=24000)
    assert len(CLIPS) >= 30 and batch.errors == [None] * len(CLIPS)
    for path, y, (pitch, conf) in zip(CLIPS, batch, tracker.track(batch)):
        ref_pitch, ref_conf = authors_loop(np.asarray(y))
        assert len(pitch) == len(ref_pitch), path.name
        np.testing.assert_array_equal(tracker.keep(pitch, conf), tracker.keep(ref_pitch, ref_conf), path.name)
        n, mean, std = kept_stats(pitch, conf, tracker)
        ref_n, ref_mean, ref_std = kept_stats(ref_pitch, ref_conf, tracker)
        assert n == ref_n and n > 0, path.name
        assert mean == pytest.approx(ref_mean, rel=1e-5), path.name
        assert std == pytest.approx(ref_std, rel=1e-4, abs=1e-3), path.name


def test_matches_the_transcribed_c_loop_on_real_clips():
    tracker = AubioYinPitch()
    clips = [REAL / "voices" / "asterisk_fr_f_june_1_16k.flac", REAL / "read_en_m_goforward_16k.wav"]
    batch = load_many([str(p) for p in clips], sample_rate=24000)
    for path, y, (pitch, conf) in zip(clips, batch, tracker.track(batch)):
        ref_pitch, ref_conf = transcribed_c(np.asarray(y))
        # FFT vs summed d(τ): the parabola through near-equal yin values on noise hops (periods
        # of a few samples, pitch in kHz) moves by a few 1e-6 relative
        np.testing.assert_allclose(pitch, ref_pitch, rtol=1e-4, err_msg=path.name)
        np.testing.assert_allclose(conf, ref_conf, atol=1e-4, err_msg=path.name)
        np.testing.assert_array_equal(tracker.keep(pitch, conf), tracker.keep(ref_pitch, ref_conf))
        n, mean, std = kept_stats(pitch, conf, tracker)
        assert n >= 20 and (mean, std) == pytest.approx(kept_stats(ref_pitch, ref_conf, tracker)[1:], rel=1e-6)


def test_the_authors_filter_and_statistics():
    tracker = AubioYinPitch()
    x = np.concatenate([harmonic(150, 1.0), np.zeros(8000, np.float32), harmonic(400, 0.5)])
    out = tracker.run(batch_of([x]))
    assert out["pitch_mean_hz"][0] == pytest.approx(150, rel=0.005)  # 400 Hz is outside 80-300
    pitch, conf = tracker.track(batch_of([x]))[0]
    kept = pitch[tracker.keep(pitch, conf)]
    assert out["pitch_std_hz"][0] == pytest.approx(kept.std())
    contour = np.interp(np.linspace(0, 1, 20), np.linspace(0, 1, len(kept)), kept)
    np.testing.assert_allclose(out["pitch_contour_hz"][0], contour)
    silent = tracker.track(batch_of([np.zeros(16000, np.float32)]))[0][0]
    assert (silent == 0).all()
    empty = tracker.run(batch_of([np.zeros(100, np.float32)]))
    assert empty["pitch_mean_hz"] == [None] and empty["pitch_contour_hz"] == [None]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="buffer_size must be an even number >= 8, got 2047"):
        AubioYinPitch(buffer_size=2047)
    with pytest.raises(ValueError, match="hop_size must be in \\[1, buffer_size=2048\\], got 4096"):
        AubioYinPitch(hop_size=4096)
    with pytest.raises(ValueError, match="fmin \\(300.0 Hz\\) must be below fmax \\(80.0 Hz\\)"):
        AubioYinPitch(fmin=300.0, fmax=80.0)
    with pytest.raises(ValueError, match="contour_points must be >= 1, got 0"):
        AubioYinPitch(contour_points=0)


def test_blueprint_offers_the_aubio_tracker():
    yin = BlueprintBuilder(asr=None, pitch="yin")
    aubio_like = BlueprintBuilder(asr=None, pitch="aubio")
    assert "pitch" in yin.names and "pitch_aubio" in aubio_like.names and "pitch" not in aubio_like.names
    assert yin.settings_digest != aubio_like.settings_digest  # cached features never mix
    with pytest.raises(ValueError, match="pitch must be one of \\['aubio', 'yin'\\], got 'crepe'"):
        BlueprintBuilder(asr=None, pitch="crepe")
