"""The public audio API: load / load_many over the native, soundfile and DALI backends."""

from __future__ import annotations

import numpy as np
import pytest
import sdscore.audio as audio
import soundfile as sf
import soxr
from features_audio import band_rel_rms
from sdscore.audio import AudioBatch
from sdscore.audio.dali_backend import dali_available
from sdscore.errors import AudioError

RATE = 16000


def tone(seconds: float, rate: int, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.1 * np.sin(2 * np.pi * 1700 * t + 0.5)
    return np.stack([x * (0.5 + 0.5 * c) for c in range(channels)], axis=1).astype(np.float32)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("audio")
    paths = {
        "wav22": d / "speech22.wav",
        "wav16_stereo": d / "stereo16.wav",
        "flac44": d / "music44.flac",
        "ogg": d / "clip.ogg",
        "text": d / "notes.wav",
        "fake_flac": d / "fake.flac",
        "empty": d / "empty.wav",
        "nan": d / "nan.wav",
        "long": d / "long.wav",
    }
    sf.write(paths["wav22"], tone(1.5, 22050), 22050, subtype="PCM_16")
    sf.write(paths["wav16_stereo"], tone(1.0, 16000, 2), 16000, subtype="PCM_24")
    sf.write(paths["flac44"], tone(1.2, 44100, 2), 44100)
    sf.write(paths["ogg"], tone(1.0, 22050), 22050)
    paths["text"].write_text("this is not audio at all\n" * 10)
    paths["fake_flac"].write_bytes(b"fLaC" + b"\x00" * 64)
    sf.write(paths["empty"], np.zeros((0, 1), np.float32), 16000, subtype="PCM_16")
    bad = tone(0.5, 16000)
    bad[100, 0] = np.nan
    sf.write(paths["nan"], bad, 16000, subtype="FLOAT")
    sf.write(paths["long"], tone(3.0, 8000), 8000, subtype="PCM_16")
    paths["missing"] = d / "missing.wav"
    paths["dir"] = d
    return {k: str(v) for k, v in paths.items()}


def test_load_resamples_to_soxr_quality(files):
    y = audio.load(files["wav22"], sample_rate=RATE)
    ref = soxr.resample(sf.read(files["wav22"], dtype="float32")[0], 22050, RATE, quality="HQ")
    assert y.dtype == np.float32 and y.ndim == 1 and len(y) == len(ref)
    assert band_rel_rms(y, ref, RATE, 0.8 * RATE / 2) < 1e-3


def test_same_rate_stereo_is_exact_downmix(files):
    y = audio.load(files["wav16_stereo"], sample_rate=16000)
    ref = sf.read(files["wav16_stereo"], dtype="float32")[0].mean(axis=1)
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-7)


@pytest.mark.parametrize("key,rate", [("flac44", 44100), ("ogg", 22050)])
def test_compressed_formats_go_through_soundfile(files, key, rate):
    y = audio.load(files[key], sample_rate=RATE)
    x = sf.read(files[key], dtype="float32", always_2d=True)[0].mean(axis=1)
    ref = soxr.resample(x, rate, RATE, quality="HQ")
    assert len(y) == len(ref)
    assert band_rel_rms(y, ref, RATE, 0.8 * RATE / 2) < 1e-3


@pytest.mark.parametrize("subtype", ["ULAW", "ALAW"])
def test_wav_codecs_the_core_does_not_decode_go_to_soundfile(tmp_path, subtype):
    path = tmp_path / f"{subtype.lower()}.wav"
    sf.write(path, tone(0.5, 8000), 8000, subtype=subtype)
    y = audio.load(path, sample_rate=16000)
    ref = soxr.resample(sf.read(path, dtype="float32")[0], 8000, 16000, quality="HQ")
    assert len(y) == len(ref) and band_rel_rms(y, ref, 16000, 0.8 * 4000) < 1e-3


def test_load_many_keeps_good_items_when_others_fail(files):
    order = ["wav22", "missing", "flac44", "text", "dir", "ogg", "empty", "nan", "wav16_stereo"]
    batch = audio.load_many([files[k] for k in order], sample_rate=RATE, num_threads=2)
    assert isinstance(batch, AudioBatch) and len(batch) == len(order)
    assert batch.offsets.dtype == np.int64 and batch.data.dtype == np.float32
    good = {"wav22", "flac44", "ogg", "wav16_stereo"}
    for i, key in enumerate(order):
        if key in good:
            assert batch.errors[i] is None, batch.errors[i]
            np.testing.assert_array_equal(batch[i], audio.load(files[key], RATE))
        else:
            assert batch.errors[i].startswith(files[key]), batch.errors[i]
            assert len(batch[i]) == 0
    assert batch.ok.tolist() == [k in good for k in order]


@pytest.mark.parametrize(
    "key,problem",
    [
        ("missing", "no such file"),
        ("dir", "is a directory"),
        ("text", "(not decodable .*native: .*soundfile: |cannot decode)"),
        ("fake_flac", "(not decodable|cannot decode)"),
        ("empty", "no audio samples"),
        ("nan", r"non-finite sample \(NaN/Inf\)"),
    ],
)
@pytest.mark.parametrize("backend", ["native", "soundfile"])
def test_bad_input_names_file_and_problem(files, key, problem, backend):
    with pytest.raises(AudioError, match=f"^{files[key]}: .*{problem}"):
        audio.load(files[key], sample_rate=RATE, backend=backend)


@pytest.mark.parametrize("backend", ["native", "soundfile"])
def test_duration_cap_from_argument_and_environment(files, monkeypatch, backend):
    monkeypatch.setenv("SDSCORE_AUDIO_BACKEND", backend)
    with pytest.raises(AudioError, match=r"long.wav: 3 s exceeds the configured cap of 2 s"):
        audio.load(files["long"], max_seconds=2)
    monkeypatch.setenv("SDSCORE_MAX_AUDIO_SECONDS", "2.5")
    with pytest.raises(AudioError, match="cap of 2.5 s"):
        audio.load(files["long"])
    assert len(audio.load(files["long"], max_seconds=10)) == 48000
    monkeypatch.setenv("SDSCORE_MAX_AUDIO_SECONDS", "lots")
    with pytest.raises(ValueError, match="SDSCORE_MAX_AUDIO_SECONDS='lots' is not a number"):
        audio.load(files["long"])


@pytest.mark.parametrize("rate", [0, -16000, 5_000_000, 16000.5])
def test_bad_target_rate_is_refused(files, rate):
    with pytest.raises(ValueError, match="sample_rate"):
        audio.load_many([files["wav22"]], sample_rate=rate)


def test_bad_thread_count_is_refused(files):
    with pytest.raises(ValueError, match="num_threads must be >= 1, got 0"):
        audio.load_many([files["wav22"]], num_threads=0)


def test_empty_path_list_gives_empty_batch():
    batch = audio.load_many([], sample_rate=RATE)
    assert len(batch) == 0 and batch.offsets.tolist() == [0] and batch.data.size == 0


def test_native_and_soundfile_backends_agree_exactly(files):
    paths = [files[k] for k in ("wav22", "wav16_stereo", "flac44")]
    native = audio.load_many(paths, RATE, backend="native")
    sndfile = audio.load_many(paths, RATE, backend="soundfile")
    np.testing.assert_array_equal(native.offsets, sndfile.offsets)
    np.testing.assert_allclose(native.data, sndfile.data, rtol=0, atol=1e-6)


def test_backend_choice_argument_then_environment(files, monkeypatch):
    monkeypatch.setenv("SDSCORE_AUDIO_BACKEND", "nonsense")
    with pytest.raises(ValueError, match="unknown audio backend 'nonsense' \\(from SDSCORE_AUDIO_BACKEND\\)"):
        audio.load(files["wav22"])
    # an explicit argument wins over the environment
    assert len(audio.load(files["wav22"], backend="soundfile")) > 0
    with pytest.raises(ValueError, match="unknown audio backend 'ffmpeg' \\(from backend argument\\)"):
        audio.load(files["wav22"], backend="ffmpeg")


@pytest.mark.skipif(not dali_available(), reason="nvidia-dali is not installed")
def test_dali_backend_matches_native_and_isolates_errors(files):
    order = ["wav22", "text", "flac44", "missing", "ogg", "nan"]
    dali = audio.load_many([files[k] for k in order], RATE, backend="dali")
    native = audio.load_many([files[k] for k in order], RATE, backend="native")
    for i, key in enumerate(order):
        if native.errors[i] is None:
            assert dali.errors[i] is None, dali.errors[i]
            assert abs(len(dali[i]) - len(native[i])) <= 1
            assert band_rel_rms(dali[i], native[i], RATE, 0.8 * RATE / 2) < 5e-3
        else:
            assert dali.errors[i] is not None and dali.errors[i].startswith(files[key])


def test_audio_batch_rejects_inconsistent_parts():
    with pytest.raises(ValueError, match="offsets end at 3 but there are 2 values"):
        AudioBatch(np.zeros(2, np.float32), np.array([0, 3], np.int64), [None], 16000)
    with pytest.raises(ValueError, match="2 error slots for 1 items"):
        AudioBatch(np.zeros(2, np.float32), np.array([0, 2], np.int64), [None, None], 16000)
    with pytest.raises(ValueError, match="data must be 1-D float32"):
        AudioBatch(np.zeros(2, np.float64), np.array([0, 2], np.int64), [None], 16000)
