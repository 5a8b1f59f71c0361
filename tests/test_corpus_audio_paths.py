"""Audio paths resolve against the manifest's folder; absolute paths and URIs are left alone."""

from __future__ import annotations

import os

import polars as pl
import pytest

from sdscore.corpus import TURN, write_manifest
from sdscore.corpus.audio_paths import resolve_path
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest, resolve_audio_paths


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a.wav", "/base/a.wav"),
        ("./a.wav", "/base/a.wav"),
        ("sub/dir/a.wav", "/base/sub/dir/a.wav"),
        ("../up/a.wav", "/base/../up/a.wav"),
        ("/abs/a.wav", "/abs/a.wav"),
        ("s3://bucket/a.wav", "s3://bucket/a.wav"),
        ("https://host/a.wav", "https://host/a.wav"),
        ("file:///x/a.wav", "file:///x/a.wav"),
        ("C:\\data\\a.wav", "C:\\data\\a.wav"),
        ("", ""),
        (None, None),
    ],
)
def test_resolve_path(given, expected):
    out = pl.DataFrame({"p": [given]}, schema={"p": pl.String}).select(resolve_path(pl.col("p"), "/base"))
    assert out.item() == expected


def test_home_paths_expand():
    out = pl.select(resolve_path(pl.lit("~/x.wav"), "/base")).item()
    assert out == os.path.join(os.path.expanduser("~"), "x.wav")


def test_relative_base_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = pl.select(resolve_path(pl.lit("a.wav"), "manifests")).item()
    assert out == str(tmp_path / "manifests" / "a.wav")


def test_paths_inside_turn_structs(tmp_path):
    frame = pl.DataFrame(
        [
            {
                "pair_id": "1",
                "criterion": "modality",
                "chosen": [
                    {"role": "user", "text": "hi", "audio_path": None},
                    {"role": "assistant", "text": None, "audio_path": "c.wav"},
                ],
                "rejected": [{"role": "assistant", "text": None, "audio_path": "gs://b/r.wav"}],
            }
        ]
    )
    sub = tmp_path / "sub"
    path = write_manifest(frame, sub / "pairs.parquet")
    out = read_manifest(path)
    assert out["chosen"][0].to_list() == [
        {"role": "user", "text": "hi", "audio_path": None},
        {"role": "assistant", "text": None, "audio_path": str(sub / "c.wav")},
    ]
    assert out["rejected"][0][0]["audio_path"] == "gs://b/r.wav"


def test_paths_inside_list_columns_and_scalars(tmp_path):
    frame = pl.DataFrame(
        [
            {
                "instance_id": "1",
                "task": "discrimination",
                "turn_paths": ["t.wav", "/abs/t.wav"],
                "reference_path": "r.wav",
                "candidate_paths": ["c1.wav", "s3://x/c2.wav"],
            }
        ]
    )
    path = write_manifest(frame, tmp_path / "inst.jsonl")
    row = read_manifest(path).row(0, named=True)
    assert row["turn_paths"] == [str(tmp_path / "t.wav"), "/abs/t.wav"]
    assert row["reference_path"] == str(tmp_path / "r.wav")
    assert row["candidate_paths"] == [str(tmp_path / "c1.wav"), "s3://x/c2.wav"]


def test_non_audio_columns_are_untouched(tmp_path):
    path = tmp_path / "meta.csv"
    path.write_text("answer_audio_path,audio_path,transcript_answer,conversation_id\na.wav,q.wav,b.wav,c.wav\n")
    row = read_manifest(path).row(0, named=True)
    assert row["answer_audio_path"] == str(tmp_path / "a.wav") and row["audio_path"] == str(tmp_path / "q.wav")
    assert row["transcript_answer"] == "b.wav" and row["conversation_id"] == "c.wav"


def test_resolution_can_be_turned_off(tmp_path):
    path = tmp_path / "meta.csv"
    path.write_text("answer_audio_path\nsub/a.wav\n")
    assert read_manifest(path, resolve_audio=False)["answer_audio_path"].to_list() == ["sub/a.wav"]


def test_lazy_frames_resolve_lazily():
    lazy = pl.LazyFrame({"answer_audio_path": ["a.wav"]})
    out = resolve_audio_paths(lazy, "naturalness", "/m")
    assert isinstance(out, pl.LazyFrame) and out.collect().item() == "/m/a.wav"


def test_protocols_without_audio_columns_are_unchanged():
    frame = pl.DataFrame({"battle_id": ["1"], "model_a": ["a.wav"]})
    assert resolve_audio_paths(frame, "arena", "/m").equals(frame)


def test_audio_paths_lists_columns_lists_and_turns_once_in_order():
    from sdscore.manifests import audio_paths

    turns = pl.DataFrame(
        {
            "pair_id": ["a"],
            "chosen": [[{"role": "user", "text": "hi", "audio_path": "/x/u.wav"},
                        {"role": "assistant", "text": None, "audio_path": "/x/c.wav"}]],
            "rejected": [[{"role": "user", "text": "hi", "audio_path": "/x/u.wav"},
                          {"role": "assistant", "text": "no", "audio_path": None}]],
        },
        schema_overrides={"chosen": pl.List(TURN), "rejected": pl.List(TURN)},
    )
    assert audio_paths(turns, "reward") == ["/x/u.wav", "/x/c.wav"]
    consistency = pl.DataFrame(
        {"turn_paths": [["/t1.wav", "/t2.wav"], ["/t2.wav"]], "reference_path": ["/r.wav", None]}
    )
    assert audio_paths(consistency, "consistency") == ["/t1.wav", "/t2.wav", "/r.wav"]
    with pytest.raises(ManifestError, match="unknown protocol 'speech'"):
        audio_paths(consistency, "speech")
