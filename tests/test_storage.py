"""Storage by URI (sdscore.storage): manifests and audio on a local S3 endpoint (moto on 127.0.0.1,
with IAM on: tests/s3_server.py) read as their local copies are; a missing, a denied and a truncated
object are the item's error naming its URI; a slice fetches only its bytes; the cache key of an
object comes from its ETag, not its bytes; credentials never show in errors."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from s3_server import BUCKET, running_s3, use_s3

from sdscore import audio, storage
from sdscore.corpus import write_manifest
from sdscore.errors import AudioError, ManifestError
from sdscore.features.cache import file_digest, hash_file
from sdscore.manifests import read_manifest

SR = 16000


@pytest.fixture(scope="module")
def s3():
    yield from running_s3()


@pytest.fixture(autouse=True)
def s3_env(s3, monkeypatch, tmp_path):
    use_s3(s3, monkeypatch)
    monkeypatch.setenv("SDSCORE_CACHE_DIR", str(tmp_path / "cache"))


def _wav(path, seconds: float, freq: float = 220.0, rate: int = SR, subtype: str = "PCM_16") -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, subtype=subtype)
    return path.read_bytes()


# -- locations ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("location", "expected"), [
    ("plain/a.wav", "plain/a.wav"),
    ("/abs/a.wav", "/abs/a.wav"),
    ("file:///data/a%20b.wav", "/data/a b.wav"),
    ("file://localhost/data/a.wav", "/data/a.wav"),
    ("s3://bucket/key.wav", "s3://bucket/key.wav"),
    ("gs://bucket/key.wav", "gs://bucket/key.wav"),
])
def test_normalize_keeps_object_uris_and_turns_file_uris_into_paths(location, expected):
    assert storage.normalize(location) == expected
    assert storage.is_remote(location) == location.startswith(("s3://", "gs://"))


@pytest.mark.parametrize(("location", "message"), [
    ("https://host/a.wav", r"https://host/a\.wav: unsupported location scheme 'https://'"),
    ("file://server/a.wav", r"a file:// URI must name a local path \(file:///path\), not host 'server'"),
])
def test_other_locations_are_refused_by_name(location, message):
    with pytest.raises(storage.StorageError, match=message):
        storage.normalize(location)


def test_a_uri_without_a_bucket_is_refused():
    with pytest.raises(storage.StorageError, match=r"s3:///key\.wav: no bucket in the URI \(expected s3://BUCKET/KEY\)"):
        storage.stat("s3:///key.wav")


# -- audio --------------------------------------------------------------------------------------

def test_audio_objects_decode_as_their_local_files(s3, tmp_path):
    wav = tmp_path / "a.wav"
    flac = tmp_path / "b.flac"
    _wav(wav, 0.7, rate=22050)
    _wav(flac, 0.4, freq=330.0)
    uris = [s3.put_file("audio/a.wav", wav), s3.put_file("audio/b.flac", flac)]
    remote = audio.load_many(uris + [f"file://{wav}"], SR)
    local = audio.load_many([str(wav), str(flac), str(wav)], SR)
    assert remote.errors == [None, None, None]
    np.testing.assert_array_equal(remote.offsets, local.offsets)
    np.testing.assert_array_equal(remote.data, local.data)
    np.testing.assert_array_equal(audio.load(uris[0], SR), audio.load(str(wav), SR))


def test_a_slice_fetches_only_its_bytes(s3, tmp_path, monkeypatch):
    path = tmp_path / "long.wav"
    size = len(_wav(path, 10.0, subtype="FLOAT"))  # 640 kB of samples
    uri = s3.put_file("audio/long.wav", path)
    readers = []
    opened = storage.open_ranged

    def counting(location, *args, **kwargs):
        reader = opened(location, *args, **kwargs)
        readers.append(reader)
        return reader

    monkeypatch.setattr(storage, "open_ranged", counting)
    sliced = audio.load(uri, SR, offset=4.0, duration=0.5)
    np.testing.assert_array_equal(sliced, audio.load(str(path), SR, offset=4.0, duration=0.5))
    fetched = sum(reader.bytes_fetched for reader in readers)
    slice_bytes = int(0.5 * SR) * 4
    assert slice_bytes <= fetched <= slice_bytes + storage.READ_AHEAD  # the header's request, then the frames'
    assert sum(reader.requests for reader in readers) == 2
    assert fetched < size / 10


def test_missing_denied_and_truncated_objects_are_their_items_errors(s3, tmp_path):
    good = _wav(tmp_path / "good.wav", 0.5)
    ok = s3.put("audio/good.wav", good)
    denied = s3.put("denied/secret.wav", good)
    truncated = s3.put("audio/truncated.wav", good[: len(good) // 2])  # the header declares twice as many bytes
    missing = s3.uri("audio/missing.wav")
    batch = audio.load_many([ok, missing, denied, truncated], SR)
    assert batch.errors[0] is None and len(batch[0]) == int(0.5 * SR)
    assert batch.errors[1] == f"{missing}: no such object"
    assert batch.errors[2].startswith(f"{denied}: access denied")
    assert re.match(rf"{re.escape(truncated)}: truncated or lying header", batch.errors[3])
    sliced = audio.load_many([ok, missing, denied], SR, offsets=[0.1, 0.1, 0.1], durations=[0.2, 0.2, 0.2])
    assert sliced.errors == [None, f"{missing}: no such object", sliced.errors[2]]
    assert sliced.errors[2].startswith(f"{denied}: access denied")
    with pytest.raises(AudioError, match=re.escape(f"{missing}: no such object")):
        audio.load(missing, SR)


class _ShortStore:
    """A store whose replies stop short of the length it announced (a connection cut mid-body)."""

    def __init__(self, data: bytes, announced: int):
        self.data, self.announced = data, announced

    def open_input_file(self, path):
        store = self

        class Handle:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return None

            def size(self):
                return store.announced

            def read(self):
                return store.data

            def read_at(self, count, position):
                return store.data[position: position + count]

            def close(self):
                return None

        return Handle()


def test_a_short_read_is_an_error_never_a_short_file(s3, tmp_path, monkeypatch):
    data = _wav(tmp_path / "a.wav", 1.0)
    cut = _ShortStore(data[:20000], len(data))
    monkeypatch.setattr(storage, "filesystem", lambda uri: (cut, "bucket/a.wav"))
    uri = "s3://bucket/a.wav"
    with pytest.raises(storage.StorageError, match=rf"{uri}: truncated read: 20000 of {len(data)} bytes arrived"):
        storage.read_bytes(uri)
    assert audio.load_many([uri], SR).errors == [f"{uri}: truncated read: 20000 of {len(data)} bytes arrived"]
    error = audio.load_many([uri], SR, offsets=[0.8], durations=[0.1]).errors[0]
    assert re.match(rf"{re.escape(uri)}: truncated read: 0 of \d+ bytes arrived at byte \d+", error)


def test_errors_never_show_the_credentials(s3, monkeypatch):
    uri = s3.put("audio/any.bin", b"x" * 10)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-" + s3.secret_key[:8])
    with pytest.raises(storage.StorageError) as caught:
        storage.read_bytes(uri)
    assert str(caught.value) == f"{uri}: access denied (cannot read it with the credentials in the environment)"
    echoed = storage.storage_error(uri, OSError(f"InvalidAccessKeyId: key {s3.access_key} is unknown"))
    assert s3.access_key not in str(echoed) and "***" in str(echoed)


def test_no_credentials_means_anonymous_requests(s3, monkeypatch):
    uri = s3.put("audio/public-or-not.bin", b"x" * 10)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(storage.StorageError, match="access denied"):  # moto's IAM refuses unsigned requests
        storage.read_bytes(uri)


# -- the content cache key ----------------------------------------------------------------------

def test_an_objects_cache_key_is_its_uri_and_version_not_its_bytes(s3, tmp_path, monkeypatch):
    data = _wav(tmp_path / "a.wav", 0.3)
    uri = s3.put("audio/keyed.wav", data)
    calls = []
    monkeypatch.setattr(storage, "read_bytes", lambda *a: calls.append(a))  # keying must not download
    first = file_digest(uri)
    assert first == file_digest(uri) and first.startswith("o") and not calls
    assert first != file_digest(s3.put("audio/copy.wav", data))  # another URI: another entry
    s3.put("audio/keyed.wav", data[:-2] + b"\x01\x02")  # rewritten: a new ETag
    assert file_digest(uri) != first
    assert file_digest(f"file://{tmp_path / 'a.wav'}") == hash_file(tmp_path / "a.wav")
    with pytest.raises(OSError, match="no such object"):  # callers turn OSError into the row's error
        file_digest(s3.uri("audio/none.wav"))


# -- manifests ----------------------------------------------------------------------------------

def _judge_items(folder, s3) -> pl.DataFrame:
    rows = []
    (folder / "clips").mkdir(exist_ok=True)
    for i in range(3):
        for side in (1, 2):
            s3.put(f"judge/clips/{i}-{side}.wav", _wav(folder / "clips" / f"{i}-{side}.wav", 0.2, freq=200 + 40 * i))
        rows.append({"item_id": f"i{i}", "instruction_text": f"say {i}", "model_a": "a", "model_b": "b",
                     "audio1_path": f"clips/{i}-1.wav", "audio2_path": f"clips/{i}-2.wav"})
    return pl.DataFrame(rows)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".csv"])
def test_a_manifest_by_uri_reads_as_its_local_copy_with_audio_under_its_prefix(s3, tmp_path, suffix):
    frame = _judge_items(tmp_path, s3)
    local = tmp_path / f"items{suffix}"
    if suffix == ".csv":
        frame.write_csv(local)
    else:
        write_manifest(frame, local)
    uri = s3.put_file(f"judge/items{suffix}", local)
    remote, here = read_manifest(uri, "judge"), read_manifest(local, "judge")
    assert remote["audio1_path"].to_list() == [s3.uri(f"judge/clips/{i}-1.wav") for i in range(3)]
    paths = ["audio1_path", "audio2_path"]
    assert remote.drop(paths).equals(here.drop(paths))
    decoded, expected = audio.load_many(remote["audio2_path"].to_list(), SR), audio.load_many(here["audio2_path"].to_list(), SR)
    assert decoded.errors == expected.errors == [None] * 3
    np.testing.assert_array_equal(decoded.data, expected.data)


def test_a_manifest_object_is_downloaded_once_per_version(s3, tmp_path, monkeypatch):
    write_manifest(_judge_items(tmp_path, s3), tmp_path / "m.parquet")
    uri = s3.put_file("judge/once.parquet", tmp_path / "m.parquet")
    downloads = []
    original = storage.download
    monkeypatch.setattr(storage, "download", lambda *a: downloads.append(a[0]) or original(*a))
    read_manifest(uri, "judge")
    read_manifest(uri, "judge")
    assert downloads == [uri]
    s3.put_file("judge/once.parquet", tmp_path / "m.parquet")  # the same bytes written again: a new version?
    read_manifest(uri, "judge")
    assert len(downloads) == 1  # the same ETag and size: the cached copy is still this version


def test_a_kaldi_directory_by_folder_uri(s3, tmp_path):
    s3.put("kaldi/wavs/r1.wav", _wav(tmp_path / "r1.wav", 2.0))
    s3.put("kaldi/data/wav.scp", b"r1 ../wavs/r1.wav\n")
    s3.put("kaldi/data/segments", b"u1 r1 0.0 0.5\nu2 r1 0.5 1.5\n")
    s3.put("kaldi/data/text", b"u1 hello\nu2 there\n")
    frame = read_manifest(s3.uri("kaldi/data"), "naturalness")
    assert frame["answer_audio_path"].to_list() == [s3.uri("kaldi/data/../wavs/r1.wav")] * 2
    assert frame["transcript_answer"].to_list() == ["hello", "there"]


def test_manifest_uri_errors_name_the_uri(s3):
    s3.put("denied/items.parquet", b"PAR1")
    missing = s3.uri("judge/none.parquet")
    with pytest.raises(ManifestError, match=re.escape(f"{missing}: no such file or folder")):
        read_manifest(missing, "judge")
    with pytest.raises(ManifestError, match=re.escape(f"{s3.uri('denied/items.parquet')}: access denied")):
        read_manifest(s3.uri("denied/items.parquet"), "judge")
    s3.put("judge/bad.jsonl", b'{"item_id": "x"}\nnot json\n')
    with pytest.raises(ManifestError, match=re.escape(s3.uri("judge/bad.jsonl")) + r".*line 2"):
        read_manifest(s3.uri("judge/bad.jsonl"), "judge")
    with pytest.raises(ManifestError, match=r"https://host/m\.parquet: unsupported location scheme"):
        read_manifest("https://host/m.parquet", "judge")


def test_write_and_list_and_delete_objects(s3):
    uri = s3.uri("tmp/one.bin")
    storage.write_bytes(uri, b"abc")
    assert storage.read_bytes(uri) == b"abc" and storage.exists(uri)
    assert set(storage.list_files(s3.uri("tmp"))) == {"one.bin"}
    storage.delete(uri)
    storage.delete(uri)  # already gone: not an error
    assert not storage.exists(uri)
    assert storage.remove_empty_prefix(s3.uri("tmp"))
    assert not [key for key in s3.keys() if key.startswith("tmp")]
    info = storage.stat(s3.put("tmp/two.bin", b"12345"))
    assert (info.size, info.uri) == (5, s3.uri("tmp/two.bin")) and info.etag
    assert io.BytesIO(storage.read_bytes(info.uri)).read() == b"12345"
    assert BUCKET in info.uri


def test_a_lhotse_supervision_set_by_uri_brings_its_recordings_and_slices_cut_by_ranged_reads(s3, tmp_path):
    from sdscore.protocols.consistency.spec import SPEC as CONSISTENCY
    from sdscore.runtime.audio_slices import cut_slices

    local = tmp_path / "call.wav"
    _wav(local, 6.0, rate=22050)
    s3.put_file("lhotse/call.wav", local)
    recording = {"id": "call", "sources": [{"type": "file", "channels": [0], "source": "call.wav"}],
                 "sampling_rate": 22050, "num_samples": 6 * 22050, "duration": 6.0}
    supervisions = [{"id": f"call-{i}", "recording_id": "call", "start": 0.25 + 1.5 * i, "duration": 1.0,
                     "channel": 0, "speaker": "alice"} for i in range(3)]
    s3.put("lhotse/c_recordings_x.jsonl", (json.dumps(recording) + "\n").encode())
    s3.put("lhotse/c_supervisions_x.jsonl", "".join(json.dumps(s) + "\n" for s in supervisions).encode())
    frame = read_manifest(s3.uri("lhotse/c_supervisions_x.jsonl"), "consistency")
    assert frame["turn_paths"].to_list() == [[s3.uri("lhotse/call.wav")] * 3]
    staged = cut_slices(frame, CONSISTENCY, str(tmp_path / "slices"))
    assert staged["error"].to_list() == [None]
    for path, offset in zip(staged["turn_paths"][0], [0.25, 1.75, 3.25]):
        np.testing.assert_array_equal(audio.load(path, 22050), audio.load(str(local), 22050, offset=offset, duration=1.0))


def test_a_hf_dataset_folder_by_uri_with_embedded_audio(s3, tmp_path):
    from datasets import Audio, Dataset

    clips = [tmp_path / f"c{k}.wav" for k in range(2)]
    for k, clip in enumerate(clips):
        _wav(clip, 0.3, freq=250 + 50 * k)
    ds = Dataset.from_dict({"item_id": ["i0", "i1"],
                            "answer_audio_path": [{"bytes": c.read_bytes(), "path": c.name} for c in clips]})
    ds.cast_column("answer_audio_path", Audio(decode=False)).save_to_disk(str(tmp_path / "ds"))
    for file in (tmp_path / "ds").rglob("*"):
        if file.is_file():
            s3.put_file(f"hf/ds/{file.relative_to(tmp_path / 'ds').as_posix()}", file)
    s3.put("hf/ds/clips/not-a-manifest.wav", b"RIFF")  # audio under the prefix is not copied with it
    frame = read_manifest(s3.uri("hf/ds"), "naturalness")
    assert frame["item_id"].to_list() == ["i0", "i1"]
    for path, clip in zip(frame["answer_audio_path"].to_list(), clips):
        np.testing.assert_array_equal(audio.load(path, SR), audio.load(str(clip), SR))
    copies = list((tmp_path / "cache" / "remote-manifests").rglob("*"))
    assert not [c for c in copies if c.suffix == ".wav"]


def test_a_webdataset_shard_by_uri(s3, tmp_path):
    import tarfile

    shard = tmp_path / "shard-000.tar"
    with tarfile.open(shard, "w") as tar:
        for key in ("a", "b"):
            clip = tmp_path / f"{key}.wav"
            _wav(clip, 0.25)
            tar.add(clip, arcname=f"{key}.wav")
            meta = tmp_path / f"{key}.json"
            meta.write_text(json.dumps({"text": f"say {key}"}))
            tar.add(meta, arcname=f"{key}.json")
    frame = read_manifest(s3.put_file("wds/shard-000.tar", shard), "naturalness")
    assert frame["transcript_answer"].to_list() == ["say a", "say b"]
    for path, key in zip(frame["answer_audio_path"].to_list(), ("a", "b")):
        np.testing.assert_array_equal(audio.load(path, SR), audio.load(str(tmp_path / f"{key}.wav"), SR))
