"""Slice loading: load/load_many with offset/duration against soundfile reading the same frame
range, resampled by soxr (the reference pipeline)."""

from __future__ import annotations

import numpy as np
import pytest
import sdscore.audio as audio
import soundfile as sf
import soxr
from features_audio import band_rel_rms
from sdscore.audio.slices import END_TOLERANCE_FRAMES, seconds_to_frames
from sdscore.errors import AudioError

RATE = 16000


def speechlike(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """Tones whose pitch glides over time (so every slice differs) plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * (200 * t + 15 * t**2)) + 0.02 * rng.standard_normal(len(t))
    return np.stack([x * (1.0 - 0.3 * c) for c in range(channels)], axis=1).astype(np.float32)


def reference(path: str, offset: float, duration: float | None, rate: int = RATE) -> np.ndarray:
    """soundfile reads the frame range, channels are averaged, soxr resamples."""
    info = sf.info(path)
    start = seconds_to_frames(offset, info.samplerate)
    frames = -1 if duration is None else seconds_to_frames(duration, info.samplerate)
    x, sr = sf.read(path, start=start, frames=frames, dtype="float32", always_2d=True)
    mono = x.mean(axis=1, dtype=np.float32)
    return mono if sr == rate else soxr.resample(mono, sr, rate, quality="HQ").astype(np.float32)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("slices")
    paths = {
        "long_flac": d / "meeting44.flac",  # a long stereo recording
        "wav22": d / "call22.wav",
        "wav16": d / "same16.wav",
        "ogg": d / "clip.ogg",
    }
    sf.write(paths["long_flac"], speechlike(40.0, 44100, channels=2), 44100)
    sf.write(paths["wav22"], speechlike(6.0, 22050, seed=1), 22050, subtype="PCM_16")
    sf.write(paths["wav16"], speechlike(3.0, 16000, seed=2), 16000, subtype="FLOAT")
    sf.write(paths["ogg"], speechlike(4.0, 22050, seed=3), 22050)
    out = {k: str(v) for k, v in paths.items()}
    out["missing"] = str(d / "missing.wav")
    return out


def test_defaults_are_bit_for_bit_the_whole_file_load(files):
    for backend in ("native", "soundfile"):
        plain = audio.load_many([files["wav22"], files["wav16"]], RATE, backend=backend)
        zero = audio.load_many([files["wav22"], files["wav16"]], RATE, backend=backend,
                               offsets=[0.0, None], durations=[None, None])
        np.testing.assert_array_equal(plain.data, zero.data)
        np.testing.assert_array_equal(plain.offsets, zero.offsets)
        np.testing.assert_array_equal(audio.load(files["wav22"], RATE, backend=backend), plain[0])


def test_several_slices_of_a_long_recording_match_soundfile_plus_soxr(files):
    slices = [(0.0, 2.5), (7.25, 3.0), (19.999, 0.75), (33.3, None), (39.5, 0.5)]
    batch = audio.load_many([files["long_flac"]] * len(slices), RATE,
                            offsets=[o for o, _ in slices], durations=[d for _, d in slices])
    assert batch.errors == [None] * len(slices)
    for i, (offset, duration) in enumerate(slices):
        ref = reference(files["long_flac"], offset, duration)
        assert len(batch[i]) == len(ref), (offset, duration)
        assert band_rel_rms(batch[i], ref, RATE, 0.8 * RATE / 2) < 1e-3, (offset, duration)


def test_slice_at_the_file_rate_is_exactly_the_frame_range(files):
    x, _ = sf.read(files["wav16"], dtype="float32")
    y = audio.load(files["wav16"], RATE, offset=1.25, duration=0.5)
    np.testing.assert_array_equal(y, x[20000:28000])
    tail = audio.load(files["wav16"], RATE, offset=2.0)
    np.testing.assert_array_equal(tail, x[32000:])


def test_ragged_batch_mixes_whole_files_slices_and_formats(files):
    paths = [files["wav22"], files["long_flac"], files["wav16"], files["ogg"], files["wav22"]]
    offsets = [None, 12.0, 0.0, 1.0, 4.5]
    durations = [None, 1.1, None, 2.0, 1.5]
    for backend in ("native", "soundfile"):
        batch = audio.load_many(paths, RATE, backend=backend, offsets=offsets, durations=durations, num_threads=3)
        assert batch.errors == [None] * 5
        whole = audio.load_many([files["wav22"], files["wav16"]], RATE, backend=backend)
        np.testing.assert_array_equal(batch[0], whole[0])
        np.testing.assert_array_equal(batch[2], whole[1])
        for i in (1, 3, 4):
            ref = reference(paths[i], offsets[i], durations[i])
            assert len(batch[i]) == len(ref)
            assert band_rel_rms(batch[i], ref, RATE, 0.8 * RATE / 2) < 1e-3


@pytest.mark.parametrize(
    "offset, duration, problem",
    [
        (7.0, None, r"slice offset 7 s is at or beyond the end of the file \(6 s\)"),
        (6.0, 1.0, r"slice offset 6 s is at or beyond the end"),
        (5.0, 2.0, r"slice 5–7 s ends beyond the end of the file \(6 s\)"),
        (-0.5, 1.0, r"slice offset must be a non-negative number of seconds, got -0.5"),
        (float("nan"), 1.0, r"slice offset must be a non-negative number of seconds, got nan"),
        (1.0, 0.0, r"slice duration must be a positive number of seconds, got 0.0"),
        (1.0, -2.0, r"slice duration must be a positive number of seconds, got -2.0"),
        (1.0, float("inf"), r"slice duration must be a positive number of seconds, got inf"),
        (1.0, 1e-6, r"slice of 1e-06 s holds no samples at 22050 Hz"),
        ("1.0", None, r"slice offset must be a non-negative number of seconds, got '1.0'"),
    ],
)
def test_bad_slice_is_that_items_error_only(files, offset, duration, problem):
    paths = [files["wav16"], files["wav22"], files["wav16"]]
    batch = audio.load_many(paths, RATE, offsets=[0.5, offset, None], durations=[1.0, duration, None])
    assert batch.errors[0] is None and batch.errors[2] is None
    assert len(batch[0]) == RATE and len(batch[2]) == 3 * RATE
    assert batch.errors[1].startswith(files["wav22"] + ": ")
    assert len(batch[1]) == 0
    with pytest.raises(AudioError, match=problem):
        audio.load(files["wav22"], RATE, offset=offset, duration=duration)


def test_missing_file_with_a_slice_names_it(files):
    batch = audio.load_many([files["missing"], files["wav16"]], RATE, offsets=[1.0, 1.0], durations=[1.0, 1.0])
    assert batch.errors[0] == f"{files['missing']}: no such file"
    assert batch.errors[1] is None


def test_end_rounding_overrun_of_one_frame_is_clamped(files):
    n = sf.info(files["wav16"]).frames
    extra = END_TOLERANCE_FRAMES / 16000
    y = audio.load(files["wav16"], RATE, offset=2.0, duration=1.0 + extra)
    assert len(y) == n - 32000
    with pytest.raises(AudioError, match="ends beyond the end of the file"):
        audio.load(files["wav16"], RATE, offset=2.0, duration=1.0 + 2 * extra + 1e-9)


def test_duration_cap_applies_to_the_slice_not_the_recording(files):
    y = audio.load(files["long_flac"], RATE, max_seconds=5.0, offset=10.0, duration=4.0)
    assert len(y) == 4 * RATE
    with pytest.raises(AudioError, match=r"6 s exceeds the configured cap of 5 s"):
        audio.load(files["long_flac"], RATE, max_seconds=5.0, offset=10.0, duration=6.0)
    with pytest.raises(AudioError, match=r"exceeds the configured cap of 5 s"):
        audio.load(files["long_flac"], RATE, max_seconds=5.0)


def test_slice_list_sizes_must_match_the_paths(files):
    with pytest.raises(ValueError, match="offsets has 1 entries for 2 paths"):
        audio.load_many([files["wav16"]] * 2, RATE, offsets=[0.0])
    with pytest.raises(ValueError, match="durations has 3 entries for 2 paths"):
        audio.load_many([files["wav16"]] * 2, RATE, durations=[1.0, 1.0, 1.0])


def test_numpy_offsets_are_accepted(files):
    batch = audio.load_many([files["wav16"]] * 2, RATE, offsets=np.array([0.5, 1.0]),
                            durations=np.array([0.25, 1.0]))
    assert batch.errors == [None, None]
    assert list(batch.lengths) == [4000, 16000]
