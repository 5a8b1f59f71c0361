"""WebDataset shards written by webdataset.TarWriter → naturalness items, audio members extracted."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import polars as pl
import pytest
import soundfile as sf
import webdataset as wds
from sdscore.corpus.webdataset_format import CACHE_ENV, shard_cache_dir
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest


def wav_bytes(seconds: float, rate: int, seed: int, fmt: str = "WAV") -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    sf.write(buffer, (0.1 * rng.standard_normal(int(seconds * rate))).astype(np.float32), rate, format=fmt)
    return buffer.getvalue()


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def write_shard(path, samples) -> str:
    with wds.TarWriter(str(path)) as sink:
        for sample in samples:
            sink.write(sample)
    return str(path)


def test_samples_become_items_with_extracted_audio(tmp_path, cache):
    answers = [wav_bytes(1.0 + i / 4, 16000, i) for i in range(3)]
    shard = write_shard(tmp_path / "episodes-000000.tar", [
        {"__key__": "ep000", "wav": answers[0], "json": {"text": "hello", "system": "sysA", "room": 3}},
        {"__key__": "ep001", "answer.wav": answers[1], "question.flac": wav_bytes(2.0, 16000, 9, "FLAC"),
         "json": {"transcript_answer": "fine", "conversation_id": "c1", "answer_start_time": 0.25}},
        {"__key__": "ep002", "flac": wav_bytes(1.5, 22050, 2, "FLAC")},
    ])
    frame = read_manifest(shard)
    assert frame["item_id"].to_list() == ["ep000", "ep001", "ep002"]
    assert frame["transcript_answer"].to_list() == ["hello", "fine", None]
    assert frame["system"].to_list() == ["sysA", None, None]
    assert frame["answer_start_time"].to_list() == [None, 0.25, None]
    assert frame["room"].to_list() == ["3", None, None]
    folder = shard_cache_dir(shard)
    assert str(folder).startswith(str(cache))
    assert frame["answer_audio_path"].to_list() == [str(folder / "ep000.wav"), str(folder / "ep001.answer.wav"),
                                                    str(folder / "ep002.flac")]
    assert frame["audio_path"][1] == str(folder / "ep001.question.flac")
    for path, data in zip(frame["answer_audio_path"][:2], answers[:2]):
        with open(path, "rb") as handle:
            assert handle.read() == data  # the member's bytes, untouched
    # reading again reuses the extracted files
    before = (folder / "ep000.wav").stat().st_mtime_ns
    assert read_manifest(shard).equals(frame)
    assert (folder / "ep000.wav").stat().st_mtime_ns == before


def test_bad_samples_are_their_rows_errors(tmp_path, cache):
    shard = tmp_path / "bad.tar"
    good = wav_bytes(1.0, 16000, 0)
    with tarfile.open(shard, "w") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("a/ok.wav", good)
        add("a/ok.json", json.dumps({"text": "fine"}).encode())
        add("a/nojson.wav", good)
        add("a/nojson.json", b"{broken")
        add("a/listjson.wav", good)
        add("a/listjson.json", b"[1, 2]")
        add("a/textonly.json", b'{"text": "no audio"}')
        add("../escape.wav", good)
        add("a/ok.flac", good)  # the same key again, later: a duplicate item
    frame = read_manifest(shard, errors="collect")
    errors = dict(zip(frame["item_id"].to_list(), frame["error"].to_list()))
    assert frame["item_id"].to_list() == ["a/ok", "a/nojson", "a/listjson", "a/textonly", "../escape", "a/ok"]
    assert frame["error"][0] is None
    assert errors["a/nojson"].startswith("sample 'a/nojson' (member 3): a/nojson.json: not valid JSON")
    assert errors["a/listjson"] == "sample 'a/listjson' (member 5): a/listjson.json: holds list, expected a JSON object"
    assert errors["a/textonly"] == "sample 'a/textonly' (member 7): no answer audio (a member a/textonly.<wav|flac|mp3|ogg|opus>)"
    assert errors["../escape"] == "sample '../escape' (member 8): unsafe member name '../escape.wav'"
    assert not (cache.parent / "escape.wav").exists() and not list(cache.rglob("escape*"))
    assert frame["error"][5] == "column 'item_id': 'a/ok' repeats row 1"
    with pytest.raises(ManifestError, match=r"row 2, sample 'a/nojson' \(member 3\): a/nojson.json: not valid JSON"):
        read_manifest(shard)


def test_a_file_that_is_not_a_tar_is_refused(tmp_path, cache):
    bogus = tmp_path / "broken.tar"
    bogus.write_bytes(b"not a tar archive at all" * 40)
    with pytest.raises(ManifestError, match="broken.tar: not a readable tar shard"):
        read_manifest(bogus)


def test_a_gzipped_shard_streams_too(tmp_path, cache):
    shard = write_shard(tmp_path / "s.tar", [{"__key__": "k1", "wav": wav_bytes(0.5, 16000, 1)}])
    import gzip

    packed = tmp_path / "s-gz.tar"
    with open(shard, "rb") as handle:
        packed.write_bytes(gzip.compress(handle.read()))
    frame = read_manifest(packed)
    assert frame["item_id"].to_list() == ["k1"] and isinstance(frame, pl.DataFrame)
    assert sf.info(frame["answer_audio_path"][0]).frames == 8000
