"""TRACE blueprints (Fig. 7): fields and formats, content-hash cache, one extraction per content."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import sdscore.features.blueprint as bp
from features_audio import render
from sdscore.features import BlueprintBuilder, build_blueprints
from test_features_classifiers import LABELS, build_onnx

FIG7 = [
    "agent_response",
    "agent_emotion",
    "agent_accent",
    "agent_audio_quality",
    "agent_audio_properties",
]
QUALITY = [
    "DNSMOS_Personalized_Signal_Quality",
    "DNSMOS_Personalized_Background_Quality",
    "DNSMOS_Personalized_Overall_Quality",
    "P808_Overall_Quality",
]
PROPERTIES = [
    "Mean_Pitch_Hz",
    "Std_Dev_Pitch_Hz",
    "Full_Pitch_Contour_Hz",
    "Integrated_Loudness_LUFS",
    "Std_Dev_Loudness_LUFS",
    "Full_Loudness_Contour_LUFS",
    "Speech_Rate_WPM",
    "Articulation_Rate_WPM",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bp")
    paths = render(folder, ("slt", "rms"))
    copy = folder / "same_as_slt.wav"
    shutil.copy(paths["slt"], copy)
    return [paths["slt"], paths["rms"], folder / "missing.wav", copy]


@pytest.fixture(scope="module")
def counted(files, tmp_path_factory):
    """Blueprints with ASR and an emotion classifier, counting the items that reach extract()."""
    emotion = build_onnx(tmp_path_factory.mktemp("emo") / "emotion")
    seen = []
    original = bp.extract_concurrently

    def spy(chains, batch):
        seen.append(len(batch))
        return original(chains, batch)

    bp.extract_concurrently = spy
    try:
        cache = tmp_path_factory.mktemp("cache")
        out = build_blueprints(files, cache_dir=cache, emotion_dir=emotion)
    finally:
        bp.extract_concurrently = original
    return out, seen, cache, emotion


def test_fields_and_formats_follow_trace_fig7(counted):
    blueprints, _, _, _ = counted
    first = blueprints[0]
    assert list(first)[:5] == FIG7
    assert "slt" not in first["agent_response"] and "quick" in first["agent_response"]
    assert list(first["agent_emotion"]) == LABELS and sum(
        first["agent_emotion"].values()
    ) == pytest.approx(1, abs=0.01)
    assert first["agent_accent"] is None
    assert first["unavailable"] == {
        "agent_accent": "no accent classifier configured (none is bundled; pass accent_dir)"
    }
    assert list(first["agent_audio_quality"]) == QUALITY
    assert all(
        re.fullmatch(r"[1-5]\.\d\d / 5\.00", v)
        for v in first["agent_audio_quality"].values()
    )
    props = first["agent_audio_properties"]
    assert list(props) == PROPERTIES
    assert (
        len(props["Full_Pitch_Contour_Hz"]) == 20
        and len(props["Full_Loudness_Contour_LUFS"]) == 20
    )
    assert (
        120 < props["Mean_Pitch_Hz"] < 250
        and -40 < props["Integrated_Loudness_LUFS"] < -5
    )
    assert props["Articulation_Rate_WPM"] > props["Speech_Rate_WPM"] > 60
    assert all(v == round(v, 2) for v in props["Full_Pitch_Contour_Hz"])
    json.dumps(blueprints)


def test_failed_audio_has_null_fields_and_an_error(counted):
    missing = counted[0][2]
    assert missing["error"].endswith(
        "missing.wav: cannot read: No such file or directory"
    )
    assert missing["agent_response"] is None and set(
        missing["agent_audio_quality"].values()
    ) == {None}
    assert "unavailable" not in missing


def test_same_content_under_two_paths_is_extracted_once(counted):
    blueprints, seen, _, _ = counted
    assert seen == [2]
    assert blueprints[3] == blueprints[0]


def test_a_rerun_reads_the_cache_without_loading_models(files, counted):
    blueprints, _, cache, emotion = counted
    entries = sorted(cache.rglob("*.json"))
    assert len(entries) == 2 and not list(cache.rglob("*.tmp"))
    builder = BlueprintBuilder(cache_dir=cache, emotion_dir=emotion)
    assert builder.build(files) == blueprints
    assert builder._chains is None
    entries[0].write_text(
        "{not json"
    )  # a damaged entry is a miss, recomputed and rewritten
    assert (
        BlueprintBuilder(cache_dir=cache, emotion_dir=emotion).build(files)
        == blueprints
    )
    assert json.loads(entries[0].read_text())["error"] is None


def test_other_settings_use_other_cache_keys(files, counted):
    _, _, cache, emotion = counted
    with_asr = BlueprintBuilder(cache_dir=cache, emotion_dir=emotion)
    without = BlueprintBuilder(cache_dir=cache, asr=None)
    assert with_asr.key(files[0]) != without.key(files[0])
    assert with_asr.key(files[0]) == with_asr.key(files[3])
    out = without.build(files[:1])[0]
    assert (
        out["agent_response"] is None
        and out["unavailable"]["agent_response"] == "ASR disabled"
    )
    assert out["agent_audio_properties"]["Speech_Rate_WPM"] is None


def test_blueprint_of_a_row_explains_each_null():
    row = {
        "transcript": "hi",
        "dnsmos_personalized_sig": 3.14159,
        "pitch_mean_hz": None,
        "error": None,
    }
    out = bp.blueprint(row, {})
    assert (
        out["agent_audio_quality"]["DNSMOS_Personalized_Signal_Quality"]
        == "3.14 / 5.00"
    )
    assert out["unavailable"]["Mean_Pitch_Hz"].startswith("no voiced frames")
    assert out["unavailable"]["Integrated_Loudness_LUFS"].startswith(
        "audio shorter than one 400 ms block"
    )


def test_a_refused_quality_measure_is_unavailable_with_its_reason_not_an_error():
    """DNSMOS refuses samples outside [-1, 1] (as speechmos does): the blueprint keeps every other
    field and says why the quality fields are empty."""
    reason = "quality: samples outside [-1, 1] at 16000 Hz (peak 1.2)"
    out = bp.blueprint({"transcript": "hi", "pitch_mean_hz": 120.0, "error": None, "refused": reason}, {})
    assert "error" not in out and out["agent_audio_properties"]["Mean_Pitch_Hz"] == 120.0
    assert out["unavailable"]["P808_Overall_Quality"] == reason
    assert out["unavailable"]["Integrated_Loudness_LUFS"].startswith("audio shorter than one 400 ms block")


def test_bad_batch_size_is_refused():
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        BlueprintBuilder(batch_size=0)


def test_loudness_is_measured_at_the_files_own_rate(tmp_path):
    """BS.1770 is defined at the audio's rate: our blueprint equals pyloudnorm on the file's own
    samples (resampling to 16 kHz first moved it by ~0.7 dB on such a signal)."""
    pyloudnorm = pytest.importorskip("pyloudnorm")
    import soundfile as sf
    from sdscore.features.blueprint import BlueprintBuilder

    rng = np.random.default_rng(0)
    rows = {}
    for rate in (44100, 16000, 22050):
        t = np.arange(rate * 3) / rate
        x = (0.2 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)) * (1 + np.sin(np.pi * t)) / 2
        x = (x + 0.1 * np.sin(2 * np.pi * min(9000, rate / 2 - 500) * t)).astype(np.float32)
        path = tmp_path / f"a{rate}.wav"
        sf.write(path, x, rate)
        y, r = sf.read(path)
        rows[str(path)] = pyloudnorm.Meter(r).integrated_loudness(y)
    builder = BlueprintBuilder(asr=None, jobs=1)
    for (path, want), row in zip(rows.items(), builder.features(list(rows))):
        assert row["error"] is None and row["loudness_lufs"] == pytest.approx(want, abs=1e-6), path


def test_batches_of_any_size_give_the_rows_of_one_file_batches(files, tmp_path):
    """Ragged files (two voices, a missing file, a copy, an empty file) give the same rows, in input
    order, whatever the batch size; the missing and the empty file fail alone."""
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    paths = [files[1], files[2], files[0], empty, files[3], files[1]]
    rows = {size: BlueprintBuilder(asr=None, jobs=1, batch_size=size).features(paths) for size in (1, 4)}
    assert rows[4] == rows[1]
    errors = [row["error"] for row in rows[1]]
    assert [i for i, e in enumerate(errors) if e is not None] == [1, 3]
    assert errors[1].endswith("missing.wav: cannot read: No such file or directory")
    assert rows[1][4] == rows[1][2] and rows[1][5] == rows[1][0]
