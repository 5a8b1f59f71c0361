"""HF datasets with embedded audio (`datasets` Audio columns: {"bytes", "path"} structs) are read:
each embedded file goes to a content-addressed cache once and the row points at it, so it loads
exactly as the original file; structs in lists and in turn structs too; a path-only struct keeps
its (relative) path; an unwritable cache is a clear error."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from sdscore.audio import load
from sdscore.corpus.embedded_audio import CACHE_ENV
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest

datasets = pytest.importorskip("datasets")

AUDIO = pl.Struct({"bytes": pl.Binary, "path": pl.String})


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


def _audio(path):
    return {"bytes": path.read_bytes(), "path": path.name}


@pytest.mark.parametrize("saved_as", ["save_to_disk", "to_parquet"])
def test_hf_audio_column_loads_as_the_original_file(clips, tmp_path, saved_as):
    from datasets import Audio, Dataset

    ds = Dataset.from_dict({"item_id": [f"i{k}" for k in range(3)], "answer_audio_path": [_audio(p) for p in clips]})
    ds = ds.cast_column("answer_audio_path", Audio(decode=False))  # the storage `datasets` writes for Audio
    target = tmp_path / ("ds" if saved_as == "save_to_disk" else "ds.parquet")
    getattr(ds, saved_as)(str(target))
    frame = read_manifest(target, "naturalness")
    assert frame.schema["answer_audio_path"] == pl.String
    cached = frame["answer_audio_path"].to_list()
    assert all(str(tmp_path / "cache" / "embedded-audio") in p for p in cached)
    for path, original in zip(cached, clips):
        np.testing.assert_array_equal(load(path, 16000), load(original, 16000))
    again = read_manifest(target, "naturalness")["answer_audio_path"].to_list()
    assert again == cached  # content-addressed: the same files, not new copies
    assert len(list((tmp_path / "cache" / "embedded-audio").iterdir())) == 3


def test_structs_in_lists_and_turns_and_path_only(clips, tmp_path):
    consistency = pl.DataFrame({
        "instance_id": ["s0"], "task": ["detection"], "scenario": ["S1"],
        "turn_paths": [[_audio(clips[0]), {"bytes": None, "path": clips[1].name}, _audio(clips[0])]],
        "true_turns": [[]],
    }, schema_overrides={"turn_paths": pl.List(AUDIO)})
    consistency.write_parquet(tmp_path / "c.parquet")
    turns = read_manifest(tmp_path / "c.parquet", "consistency")["turn_paths"][0].to_list()
    np.testing.assert_array_equal(load(turns[0]), load(clips[0]))
    assert turns[1] == str(clips[1])  # a path-only struct is a relative path, resolved as usual
    assert turns[2] == turns[0]

    turn = pl.Struct({"role": pl.String, "text": pl.String, "audio_path": AUDIO})
    reward = pl.DataFrame({
        "pair_id": ["p0"], "criterion": ["modality"],
        "chosen": [[{"role": "user", "text": "hi", "audio_path": _audio(clips[2])},
                    {"role": "assistant", "text": "hello", "audio_path": None}]],
        "rejected": [[{"role": "user", "text": "hi", "audio_path": _audio(clips[2])},
                      {"role": "assistant", "text": "go away", "audio_path": _audio(clips[0])}]],
    }, schema_overrides={"chosen": pl.List(turn), "rejected": pl.List(turn)})
    reward.write_parquet(tmp_path / "r.parquet")
    row = read_manifest(tmp_path / "r.parquet", "reward").row(0, named=True)
    np.testing.assert_array_equal(load(row["chosen"][0]["audio_path"]), load(clips[2]))
    assert row["chosen"][0]["audio_path"] == row["rejected"][0]["audio_path"]  # one file for equal bytes
    assert row["chosen"][1]["audio_path"] is None


def test_reward_scoring_runs_on_an_embedded_dataset(clips, tmp_path):
    from sdscore.protocols.registry import score

    turn = pl.Struct({"role": pl.String, "text": pl.String, "audio_path": AUDIO})
    rows = [{"pair_id": f"p{k}", "criterion": "modality",
             "chosen": [{"role": "user", "text": "hi", "audio_path": _audio(clips[k])},
                        {"role": "assistant", "text": "hello there", "audio_path": _audio(clips[2])}],
             "rejected": [{"role": "user", "text": "hi", "audio_path": _audio(clips[k])},
                          {"role": "assistant", "text": "no", "audio_path": None}]} for k in range(2)]
    pl.DataFrame(rows, schema_overrides={"chosen": pl.List(turn), "rejected": pl.List(turn)}).write_parquet(
        tmp_path / "pairs.parquet")
    summary = score("reward", tmp_path / "pairs.parquet", tmp_path / "out.parquet")
    out = pl.read_parquet(tmp_path / "out.parquet")
    assert summary.failed == 0 and out["error"].null_count() == 2
    assert out["chosen_reward"].is_finite().all() and out["rejected_reward"].is_finite().all()


def test_unwritable_cache_is_a_clear_error(clips, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv(CACHE_ENV, str(blocker))
    pl.DataFrame({"item_id": ["i0"], "answer_audio_path": [_audio(clips[0])]},
                 schema_overrides={"answer_audio_path": AUDIO}).write_parquet(tmp_path / "n.parquet")
    with pytest.raises(ManifestError, match=r"n.parquet: cannot write embedded audio of column 'answer_audio_path'"):
        read_manifest(tmp_path / "n.parquet", "naturalness")
