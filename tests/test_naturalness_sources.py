"""Naturalness reads its per-channel clips and keys its clip-feature cache through the shared audio
sources: a stereo question clip and an answer clip as local files, as s3:// objects (moto on
127.0.0.1: tests/s3_server.py) and embedded in a HF dataset saved with save_to_disk give the same
channels, sample for sample; the cache key of an object is its file_digest (URI + ETag + size),
an embedded clip's is its bytes' (the entries of the original file), a local file's is unchanged;
a missing object or dataset file, an unknown channel are clear errors naming the clip."""

from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile as sf
from s3_server import running_s3, use_s3

from sdscore.errors import AudioError
from sdscore.features.cache import ContentCache, cache_key, file_digest, hash_file, hash_settings
from sdscore.manifests import read_manifest
from sdscore.protocols.naturalness import clip_features
from sdscore.protocols.naturalness.channels import channel_count, read_channels
from sdscore.protocols.naturalness.clip_features import SAMPLE_RATE, ClipFeatures

datasets = pytest.importorskip("datasets")


@pytest.fixture(scope="module")
def s3():
    yield from running_s3()


@pytest.fixture(autouse=True)
def s3_env(s3, monkeypatch):
    use_s3(s3, monkeypatch)


@pytest.fixture
def sources(s3, tmp_path):
    """{"local" | "s3" | "embedded": (question clip, answer clip)}: the same two files three ways."""
    rng = np.random.default_rng(7)
    t = np.arange(int(0.6 * 22050)) / 22050
    question = np.stack([0.3 * np.sin(2 * np.pi * 220 * t), 0.1 * rng.standard_normal(len(t))], axis=1)
    sf.write(tmp_path / "question.wav", question.astype(np.float32), 22050, subtype="PCM_16")  # stereo, resampled
    sf.write(tmp_path / "answer.flac", (0.2 * rng.standard_normal(8000)).astype(np.float32), 16000)
    local = (str(tmp_path / "question.wav"), str(tmp_path / "answer.flac"))
    remote = tuple(s3.put_file(f"naturalness/{os.path.basename(p)}", p) for p in local)

    from datasets import Audio, Dataset

    ds = Dataset.from_dict({"item_id": ["i0"],
                            "audio_path": [{"bytes": open(local[0], "rb").read(), "path": "question.wav"}],
                            "answer_audio_path": [{"bytes": open(local[1], "rb").read(), "path": "answer.flac"}]})
    for column in ("audio_path", "answer_audio_path"):
        ds = ds.cast_column(column, Audio(decode=False))
    ds.save_to_disk(str(tmp_path / "hf"))
    row = read_manifest(tmp_path / "hf", "naturalness").row(0, named=True)
    embedded = (row["audio_path"], row["answer_audio_path"])
    assert all(ref.startswith("embedded://") for ref in embedded)
    return {"local": local, "s3": remote, "embedded": embedded}


def _bare_clip_features(cache_dir) -> ClipFeatures:
    """A ClipFeatures with only what the cache keying and the channel VAD use (no model loaded)."""
    features = ClipFeatures.__new__(ClipFeatures)
    features.settings = {"version": clip_features.CACHE_VERSION, "rate": SAMPLE_RATE, "models": {}}
    features.cache = ContentCache(cache_dir, clip_features.CACHE_NAMESPACE, memory=False)
    features.max_audio_seconds = None
    return features


@pytest.mark.parametrize("where", ["s3", "embedded"])
def test_channels_read_as_the_local_file(sources, where):
    (question, answer), (local_question, local_answer) = sources[where], sources["local"]
    assert channel_count(question) == channel_count(local_question) == 2
    assert channel_count(answer) == channel_count(local_answer) == 1
    expected = read_channels(local_question, [0, 1], SAMPLE_RATE)
    got = read_channels(question, [0, 1], SAMPLE_RATE)
    assert len(got) == 2 and len(got[0]) == round(0.6 * SAMPLE_RATE)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[0], got[1])  # two channels, not one mix twice
    np.testing.assert_array_equal(read_channels(question, [1], 8000)[0], read_channels(local_question, [1], 8000)[0])
    np.testing.assert_array_equal(read_channels(answer, [0], SAMPLE_RATE)[0],
                                  read_channels(local_answer, [0], SAMPLE_RATE)[0])


def test_channel_vad_of_every_source_equals_the_local_files(sources, tmp_path):
    from sdscore.features.extract import make_extractor

    features = _bare_clip_features(tmp_path / "cache")
    features.vad = make_extractor("vad")
    found = {}
    for where, (question, answer) in sources.items():
        rows = [{"error": None}, {"error": None}]
        features._channel_vad([question, answer], rows)
        assert rows[0]["error"] is None and len(rows[0]["vad_channels"]) == 2  # stereo: each channel's VAD
        assert "vad_channels" not in rows[1]  # a mono answer has none
        found[where] = rows[0]["vad_channels"]
    assert found["s3"] == found["embedded"] == found["local"]


def test_cache_keys_follow_file_digest(sources, tmp_path):
    features = _bare_clip_features(tmp_path / "cache")
    digest = hash_settings({**features.settings, "kind": "question"})
    computed = []

    def compute(batch, paths):
        computed.extend(paths)
        return [{"error": error, "samples": int(n)} for error, n in zip(batch.errors, batch.lengths)]

    items = [clip for pair in sources.values() for clip in pair]
    first = features._cached(items, "question", compute)
    assert computed == items and all(row["error"] is None for row in first.values())
    for clip in items:
        key = cache_key(file_digest(clip), digest)
        assert features.cache.get_json(key) == first[clip]
    local_question, _ = sources["local"]
    s3_question, _ = sources["s3"]
    embedded_question, _ = sources["embedded"]
    assert file_digest(local_question) == hash_file(local_question)  # a local file: keyed as before
    assert file_digest(embedded_question) == hash_file(local_question)  # embedded: the original's entries
    assert file_digest(s3_question).startswith("o") and file_digest(s3_question) != hash_file(local_question)
    assert first[s3_question] == first[local_question] == first[embedded_question]

    computed.clear()
    again = features._cached(items + [(s3_question, 0.25)], "question", compute)
    assert computed == [s3_question]  # only the offset item is new; every whole clip is a cache hit
    assert again[(s3_question, 0.25)]["samples"] == first[s3_question]["samples"] - SAMPLE_RATE // 4
    assert features.cache.get_json(cache_key(file_digest(s3_question), hash_settings([digest, 0.25]))) is not None


def test_missing_object_and_dataset_file_and_unknown_channel_are_clear_errors(s3, sources, tmp_path):
    gone = s3.uri("naturalness/never-written.wav")
    with pytest.raises(AudioError, match=r"s3://.*never-written\.wav: "):
        read_channels(gone, [0], SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"s3://.*never-written\.wav: "):
        channel_count(gone)
    with pytest.raises(AudioError, match=r"s3://.*question\.wav: unknown channel 2 \(the file has 2 channel"):
        read_channels(sources["s3"][0], [0, 2], SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"row 1, column 'audio_path': unknown channel 3 \(the file has 2 channel"):
        read_channels(sources["embedded"][0], [3], SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"/nowhere\.wav: no such file"):
        read_channels(str(tmp_path / "nowhere.wav"), [0], SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"http://host/a\.wav: unsupported location scheme"):
        read_channels("http://host/a.wav", [0], SAMPLE_RATE)

    features = _bare_clip_features(tmp_path / "cache")
    rows = features._cached([gone], "question", lambda batch, paths: pytest.fail("nothing to compute"))
    assert rows[gone]["error"].startswith(f"{gone}: cannot read: ")

    for arrow in (tmp_path / "hf").rglob("*.arrow"):
        os.remove(arrow)  # the dataset file the embedded references point into is gone
    with pytest.raises(AudioError, match=r"row 1, column 'audio_path': the dataset file is gone"):
        read_channels(sources["embedded"][0], [0], SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"row 1, column 'audio_path': the dataset file is gone"):
        channel_count(sources["embedded"][0])
