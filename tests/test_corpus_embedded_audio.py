"""HF datasets with embedded audio (`datasets` Audio columns: {"bytes", "path"} structs) are read in
place: each clip becomes a reference to its cell (embedded://file#row/column...) that the audio
loaders resolve by reading the bytes from the file and decoding them from memory, so it loads
exactly as the original file and no clip file is ever written; structs in lists and in turn structs
too; a path-only struct keeps its (relative) path; scoring gives the results of the path manifest;
a corrupt clip is its row's error, naming the file, row and column."""

from __future__ import annotations

import os

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from sdscore.audio import load, load_many
from sdscore.audio.checks import sound_info
from sdscore.audio.embedded_clips import SCHEME, describe, make_reference, read_embedded
from sdscore.corpus.embedded_audio import CACHE_ENV
from sdscore.errors import AudioError
from sdscore.features.cache import file_digest, hash_file
from sdscore.manifests import read_manifest

datasets = pytest.importorskip("datasets")

AUDIO = pl.Struct({"bytes": pl.Binary, "path": pl.String})
TURN = pl.Struct({"role": pl.String, "text": pl.String, "audio_path": AUDIO})


@pytest.fixture
def clips(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    paths = []
    for i, (rate, fmt) in enumerate([(16000, "wav"), (22050, "flac"), (48000, "ogg")]):
        path = tmp_path / f"clip{i}.{fmt}"
        sf.write(path, (0.2 * rng.standard_normal(rate // 2)).astype(np.float32), rate)
        paths.append(path)
    return paths


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A fresh TMPDIR (and the cache folder): the tests check that nothing is written there."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return folder


def _files(folder) -> list:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def _audio(path):
    return {"bytes": path.read_bytes(), "path": path.name}


def _hf_dataset(rows: dict, audio_columns: list[str]):
    from datasets import Audio, Dataset

    ds = Dataset.from_dict(rows)
    for name in audio_columns:
        ds = ds.cast_column(name, Audio(decode=False))  # the storage `datasets` writes for Audio
    return ds


@pytest.mark.parametrize("saved_as", ["save_to_disk", "to_parquet"])
def test_hf_audio_column_loads_as_the_original_file_and_nothing_is_written(clips, tmp_path, scratch, saved_as):
    ds = _hf_dataset({"item_id": [f"i{k}" for k in range(3)], "answer_audio_path": [_audio(p) for p in clips]},
                     ["answer_audio_path"])
    target = tmp_path / ("ds" if saved_as == "save_to_disk" else "ds.parquet")
    getattr(ds, saved_as)(str(target))
    frame = read_manifest(target, "naturalness")
    assert frame.schema["answer_audio_path"] == pl.String
    refs = frame["answer_audio_path"].to_list()
    assert all(ref.startswith(SCHEME) for ref in refs)
    batch = load_many(refs, 16000)
    assert batch.errors == [None, None, None]
    for k, (ref, original) in enumerate(zip(refs, clips)):
        expected = load(original, 16000)
        np.testing.assert_array_equal(load(ref, 16000), expected)  # the same decoder: equal samples
        np.testing.assert_array_equal(batch[k], expected)
        np.testing.assert_array_equal(load(ref, 16000, offset=0.1, duration=0.2),
                                      load(original, 16000, offset=0.1, duration=0.2))
        assert file_digest(ref) == hash_file(original)  # feature caches: the entries of the original file
        assert sound_info(ref).frames == sf.info(original).frames
        assert f"row {k + 1}, column 'answer_audio_path'" in describe(ref)
    assert read_manifest(target, "naturalness")["answer_audio_path"].to_list() == refs
    assert not (tmp_path / "cache").exists() and _files(scratch) == []


def test_structs_in_lists_and_turns_and_path_only(clips, tmp_path, scratch):
    consistency = pl.DataFrame({
        "instance_id": ["s0"], "task": ["detection"], "scenario": ["S1"],
        "turn_paths": [[_audio(clips[0]), {"bytes": None, "path": clips[1].name}, _audio(clips[0])]],
        "true_turns": [[]],
    }, schema_overrides={"turn_paths": pl.List(AUDIO)})
    consistency.write_parquet(tmp_path / "c.parquet")
    turns = read_manifest(tmp_path / "c.parquet", "consistency")["turn_paths"][0].to_list()
    np.testing.assert_array_equal(load(turns[0]), load(clips[0]))
    assert turns[1] == str(clips[1])  # a path-only struct is a relative path, resolved as usual
    assert turns[2] == make_reference(str(tmp_path / "c.parquet"), 0, ["turn_paths", "2"])
    np.testing.assert_array_equal(load(turns[2]), load(clips[0]))

    reward = pl.DataFrame({
        "pair_id": ["p0"], "criterion": ["modality"],
        "chosen": [[{"role": "user", "text": "hi", "audio_path": _audio(clips[2])},
                    {"role": "assistant", "text": "hello", "audio_path": None}]],
        "rejected": [[{"role": "user", "text": "hi", "audio_path": _audio(clips[2])},
                      {"role": "assistant", "text": "go away", "audio_path": _audio(clips[0])}]],
    }, schema_overrides={"chosen": pl.List(TURN), "rejected": pl.List(TURN)})
    reward.write_parquet(tmp_path / "r.parquet")
    row = read_manifest(tmp_path / "r.parquet", "reward").row(0, named=True)
    np.testing.assert_array_equal(load(row["chosen"][0]["audio_path"]), load(clips[2]))
    np.testing.assert_array_equal(load(row["rejected"][1]["audio_path"]), load(clips[0]))
    assert "column 'rejected' item 2 field 'audio_path'" in describe(row["rejected"][1]["audio_path"])
    assert row["chosen"][0]["text"] == "hi" and row["chosen"][1]["audio_path"] is None
    assert not (tmp_path / "cache").exists() and _files(scratch) == []


def test_bad_references_are_clear_errors(clips, tmp_path):
    pl.DataFrame({"item_id": ["i0"], "answer_audio_path": [_audio(clips[0])]},
                 schema_overrides={"answer_audio_path": AUDIO}).write_parquet(tmp_path / "n.parquet")
    ref = read_manifest(tmp_path / "n.parquet", "naturalness")["answer_audio_path"][0]
    with pytest.raises(AudioError, match=r"n\.parquet row 2, column 'answer_audio_path': cannot read"):
        read_embedded(make_reference(str(tmp_path / "n.parquet"), 1, ["answer_audio_path"]))
    with pytest.raises(AudioError, match=r"row 1, column 'nope': cannot read the embedded audio"):
        read_embedded(make_reference(str(tmp_path / "n.parquet"), 0, ["nope"]))
    with pytest.raises(AudioError, match="not an embedded-audio reference"):
        read_embedded(SCHEME + "/x.arrow#row/col")
    os.remove(tmp_path / "n.parquet")
    batch = load_many([ref, clips[0]])
    assert "n.parquet row 1, column 'answer_audio_path': the dataset file is gone" in batch.errors[0]
    assert batch.errors[1] is None  # the other items load


def _score_both_ways(protocol: str, tmp_path, path_rows: list[dict], embedded_rows: list[dict],
                     schema: dict, audio_columns: list[str], **options):
    """Score the path manifest (Parquet) and the same rows as a HF dataset with embedded audio."""
    from sdscore.protocols.registry import score

    pl.DataFrame(path_rows).write_parquet(tmp_path / "paths.parquet")
    ds = _hf_dataset(pl.DataFrame(embedded_rows, schema_overrides=schema).to_dict(as_series=False), audio_columns)
    ds.save_to_disk(str(tmp_path / "hf"))
    score(protocol, tmp_path / "paths.parquet", tmp_path / "by_path.parquet", **options)
    score(protocol, tmp_path / "hf", tmp_path / "embedded.parquet", **options)
    return pl.read_parquet(tmp_path / "by_path.parquet"), pl.read_parquet(tmp_path / "embedded.parquet")


def test_reward_scores_equal_the_path_manifest_and_a_corrupt_clip_is_its_rows_error(clips, tmp_path, scratch):
    corrupt = {"bytes": b"RIFF\x00\x00\x00\x00WAVEjunk", "path": "bad.wav"}

    def rows(audio):
        return [{"pair_id": f"p{k}", "criterion": "modality",
                 "chosen": [{"role": "user", "text": "hi", "audio_path": audio(clips[k])},
                            {"role": "assistant", "text": "hello there", "audio_path": audio(clips[2])}],
                 "rejected": [{"role": "user", "text": "hi", "audio_path": audio(clips[k])},
                              {"role": "assistant", "text": "no", "audio_path": None}]} for k in range(2)]

    by_path, embedded = _score_both_ways("reward", tmp_path, rows(str), rows(_audio),
                                         {"chosen": pl.List(TURN), "rejected": pl.List(TURN)}, [])
    assert embedded["error"].null_count() == 2
    assert embedded.equals(by_path)
    assert not (tmp_path / "cache").exists() and _files(scratch) == []

    (tmp_path / "bad.wav").write_bytes(corrupt["bytes"])
    bad_paths, bad_embedded = rows(str), rows(_audio)
    bad_paths[1]["chosen"][1]["audio_path"] = str(tmp_path / "bad.wav")
    bad_embedded[1]["chosen"][1]["audio_path"] = corrupt
    for name in ("paths.parquet", "hf", "by_path.parquet", "embedded.parquet"):
        os.rename(tmp_path / name, tmp_path / f"good-{name}")
    by_path, embedded = _score_both_ways("reward", tmp_path, bad_paths, bad_embedded,
                                         {"chosen": pl.List(TURN), "rejected": pl.List(TURN)}, [])
    assert embedded["error"][0] is None and by_path["error"][0] is None
    assert embedded.drop("error").equals(by_path.drop("error"))  # the good row keeps its scores
    assert "bad.wav" in by_path["error"][1]
    assert "data-00000-of-00001.arrow row 2, column 'chosen' item 2 field 'audio_path'" in embedded["error"][1]


def test_consistency_scores_equal_the_path_manifest(clips, tmp_path, scratch):
    def rows(audio):
        return [{"instance_id": "s0", "task": "detection", "scenario": "S2",
                 "turn_paths": [audio(clips[0]), audio(clips[1]), audio(clips[0]), audio(clips[2])],
                 "true_turns": [3]}]

    by_path, embedded = _score_both_ways("consistency", tmp_path, rows(str), rows(_audio),
                                         {"turn_paths": pl.List(AUDIO)}, [],
                                         cache_dir=tmp_path / "features")
    assert embedded["error"].to_list() == [None]
    assert embedded.equals(by_path)
    assert _files(scratch) == []


def test_the_runtime_stages_references_not_audio(clips, tmp_path):
    from sdscore.manifests import manifest_spec
    from sdscore.runtime.manifest_windows import ManifestWindows

    pl.DataFrame({"item_id": ["i0", "i1", "i2"], "answer_audio_path": [_audio(p) for p in clips]},
                 schema_overrides={"answer_audio_path": AUDIO}).write_parquet(tmp_path / "n.parquet")
    (tmp_path / "staging").mkdir()
    windows = ManifestWindows(tmp_path / "n.parquet", manifest_spec("naturalness"), tmp_path / "staging")
    assert windows.scan_path != str(tmp_path / "n.parquet")  # the structs are not scanned in place
    assert pl.read_parquet(windows.scan_path).schema["answer_audio_path"] == pl.String
    assert sum(f.stat().st_size for f in _files(tmp_path / "staging")) < min(p.stat().st_size for p in clips)
    window = windows.window(1, 3)
    for ref, original in zip(window["answer_audio_path"], clips[1:]):
        np.testing.assert_array_equal(load(ref), load(original))
