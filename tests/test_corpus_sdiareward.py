"""SDiaReward chosen/rejected rows (JSON, JSONL, Parquet, HF dataset folders) → REWARD_PAIRS."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sdscore.corpus import ERROR_COLUMN, REWARD_PAIRS, sdiareward_format
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest


@pytest.fixture(autouse=True, params=["by_columns", "by_rows"])
def converter(request, monkeypatch):
    """Run every test through both converters: they must agree on values and on messages."""
    if request.param == "by_rows":
        monkeypatch.setattr(sdiareward_format, "columnar_pairs", lambda frame, id_prefix="": None)
    return request.param


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def audio(path: str) -> dict:
    return {"type": "audio", "audio": path}


def pair(answer_good: str = "good.wav", answer_bad: str = "bad.wav", **extra) -> dict:
    return {
        "chosen": [
            {"role": "user", "content": [audio("q.wav")]},
            {"role": "assistant", "content": [audio(answer_good)]},
        ],
        "rejected": [
            {"role": "user", "content": [audio("q.wav")]},
            {"role": "assistant", "content": [audio(answer_bad)]},
        ],
        **extra,
    }


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_jsonl_rows_become_turn_structs(tmp_path):
    row = pair(margin=2, category="wild", source="fisher", subset="Wild")
    row["chosen"][1]["content"] = [text("hello"), audio("good.wav"), text("there")]
    path = write_jsonl(tmp_path / "pairs.jsonl", [row])
    out = read_manifest(path, resolve_audio=False)
    assert out.schema == REWARD_PAIRS
    record = out.row(0, named=True)
    assert record["pair_id"] == "0"
    assert record["criterion"] == "modality"
    assert (record["subset"], record["category"], record["source"], record["margin"]) == ("Wild", "wild", "fisher", 2.0)
    assert record["chosen"] == [
        {"role": "user", "text": None, "audio_path": "q.wav"},
        {"role": "assistant", "text": "hello there", "audio_path": "good.wav"},
    ]
    assert record["rejected"][1] == {"role": "assistant", "text": None, "audio_path": "bad.wav"}


def test_json_array_reads_the_same_as_jsonl(tmp_path):
    rows = [pair(), pair(id="p-7", criterion="colloquialness")]
    (tmp_path / "pairs.json").write_text(json.dumps(rows))
    write_jsonl(tmp_path / "pairs.jsonl", rows)
    from_json = read_manifest(tmp_path / "pairs.json")
    from_jsonl = read_manifest(tmp_path / "pairs.jsonl")
    assert from_json.equals(from_jsonl)
    assert from_json["pair_id"].to_list() == ["0", "p-7"]


@pytest.mark.parametrize(
    ("extra", "criterion"),
    [
        ({}, "modality"),
        ({"subset": "Colloquial"}, "colloquialness"),
        ({"category": "colloquial-style"}, "colloquialness"),
        ({"subset": "Colloquial", "criterion": "modality"}, "modality"),
    ],
)
def test_criterion_defaults(tmp_path, extra, criterion):
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair(**extra)])
    assert read_manifest(path)["criterion"].to_list() == [criterion]


def test_string_content_is_text(tmp_path):
    row = pair()
    row["chosen"].insert(0, {"role": "system", "content": "Judge the spoken reply."})
    path = write_jsonl(tmp_path / "pairs.jsonl", [row])
    assert read_manifest(path)["chosen"][0][0] == {
        "role": "system",
        "text": "Judge the spoken reply.",
        "audio_path": None,
    }


def test_hf_audio_dicts_give_their_path(tmp_path):
    row = pair()
    row["chosen"][1]["content"] = [{"type": "audio", "audio": {"path": "good.wav", "array": None}}]
    path = write_jsonl(tmp_path / "pairs.jsonl", [row])
    assert read_manifest(path, resolve_audio=False)["chosen"][0][1]["audio_path"] == "good.wav"


def test_two_audio_items_in_a_turn_name_the_row(tmp_path):
    bad = pair()
    bad["rejected"][1]["content"] = [audio("a.wav"), audio("b.wav")]
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair(), pair(), bad])
    with pytest.raises(
        ManifestError,
        match=re.escape("pairs.jsonl: row 3, column 'rejected': turn 2 has 2 audio items; a turn holds at most one"),
    ):
        read_manifest(path)


def test_bad_rows_are_kept_in_collect_mode(tmp_path):
    bad = pair()
    bad["chosen"][0]["content"] = [audio("a.wav"), audio("b.wav")]
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(pair()) + "\n{not json\n" + json.dumps(bad) + "\n" + json.dumps(pair()) + "\n")
    out = read_manifest(path, errors="collect")
    assert out.height == 4
    assert out["pair_id"].to_list() == ["0", "1", "2", "3"]
    errors = out[ERROR_COLUMN].to_list()
    assert errors[0] is None and errors[3] is None
    assert errors[1].startswith("not valid JSON")
    assert errors[2] == "column 'chosen': turn 1 has 2 audio items; a turn holds at most one"
    assert out["chosen"][2] is None and out["rejected"][2] is not None


def test_invalid_json_line_is_named(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(pair()) + "\n\n{oops\n")
    with pytest.raises(ManifestError, match=r"pairs\.jsonl: row 2 \(line 3\), not valid JSON"):
        read_manifest(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"chosen": "q.wav"}, "row 1, column 'chosen': is str, expected a list of turns"),
        ({"chosen": ["q.wav"]}, "row 1, column 'chosen': turn 1 is str, expected an object with role and content"),
        (
            {"chosen": [{"role": "user", "content": 3}]},
            "row 1, column 'chosen': turn 1 has content of type int, expected a list",
        ),
        (
            {"rejected": [{"role": "user", "content": [{"type": "image", "image": "x.png"}]}]},
            "row 1, column 'rejected': turn 1 has a content item of type 'image'; expected 'text' or 'audio'",
        ),
        (
            {"rejected": [{"role": "user", "content": [{"type": "audio", "audio": {"bytes": "..."}}]}]},
            "row 1, column 'rejected': turn 1 has audio without a path (embedded audio is not supported)",
        ),
        (
            {"rejected": [{"role": "user", "content": [{"type": "audio", "audio": {"bytes": "...", "path": None}}]}]},
            "row 1, column 'rejected': turn 1 has audio without a path (embedded audio is not supported)",
        ),
        (
            {
                "chosen": [
                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": None}, {"type": "video"}]}
                ]
            },
            "row 1, column 'chosen': turn 1 has a content item of type None; expected 'text' or 'audio'",
        ),
        (
            {
                "chosen": [
                    {"role": "user", "content": [audio("a.wav")]},
                    {"role": "user", "content": [audio("a"), audio("b"), audio("c")]},
                ]
            },
            "row 1, column 'chosen': turn 2 has 3 audio items; a turn holds at most one",
        ),
        ({"margin": "big"}, "row 1, column 'margin': 'big' is not a number"),
        (
            {"chosen": [{"role": "robot", "content": [audio("q.wav")]}]},
            "row 1, column 'chosen': turn 1 has role 'robot'",
        ),
    ],
)
def test_malformed_pairs_are_reported(tmp_path, change, message):
    path = write_jsonl(tmp_path / "pairs.jsonl", [{**pair(), **change}])
    with pytest.raises(ManifestError, match=re.escape(f"pairs.jsonl: {message}")):
        read_manifest(path)


def test_a_row_that_is_not_an_object(tmp_path):
    (tmp_path / "pairs.json").write_text(json.dumps([pair(), [1, 2]]))
    with pytest.raises(
        ManifestError, match=re.escape("pairs.json: row 2, row is list, expected an object with chosen and rejected")
    ):
        read_manifest(tmp_path / "pairs.json")


def test_missing_turn_lists_are_reported_as_missing(tmp_path):
    row = pair()
    del row["rejected"]
    path = write_jsonl(tmp_path / "pairs.jsonl", [row])
    with pytest.raises(ManifestError, match=re.escape("pairs.jsonl: row 1, column 'rejected': is missing")):
        read_manifest(path)


def test_sdiareward_files_belong_to_the_reward_protocol(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [pair()])
    with pytest.raises(ManifestError, match=r"pairs\.jsonl: holds SDiaReward rows for protocol 'reward', not 'judge'"):
        read_manifest(path, "judge")


def test_parquet_with_sdiareward_turns_is_converted(tmp_path):
    rows = [pair(margin=1.0, id=None), pair(margin=None, id="x")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    out = read_manifest(tmp_path / "train.parquet", resolve_audio=False)
    assert out["pair_id"].to_list() == ["0", "x"]
    assert out["chosen"][0][1] == {"role": "assistant", "text": None, "audio_path": "good.wav"}


def _write_arrow_stream(path: Path, rows: list) -> None:
    table = pa.Table.from_pylist(rows)
    with pa.ipc.new_stream(path, table.schema) as writer:
        writer.write_table(table)


def test_hf_save_to_disk_folder(tmp_path):
    root = tmp_path / "esdr"
    for split, count in (("train", 3), ("test", 2)):
        (root / split).mkdir(parents=True)
        _write_arrow_stream(root / split / "data-00000-of-00001.arrow", [pair(f"{split}{i}.wav") for i in range(count)])
        (root / split / "state.json").write_text("{}")
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    out = read_manifest(root)
    assert out.height == 5
    assert out["split"].to_list() == ["train"] * 3 + ["test"] * 2
    assert out["pair_id"].to_list() == ["train/0", "train/1", "train/2", "test/0", "test/1"]
    assert out["chosen"][4][1]["audio_path"] == str(root / "test1.wav")


def test_folder_of_split_files(tmp_path):
    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    write_jsonl(root / "data" / "train-00000-of-00002.jsonl", [pair(), pair()])
    write_jsonl(root / "data" / "train-00001-of-00002.jsonl", [pair()])
    (root / "validation.json").write_text(json.dumps([pair(subset="Colloquial")]))
    (root / "dataset_info.json").write_text("{}")
    out = read_manifest(root)
    assert sorted(zip(out["split"], out["pair_id"], strict=True)) == [
        ("train", "train/0"),
        ("train", "train/1"),
        ("train", "train/2"),
        ("validation", "validation/0"),
    ]
    assert out.filter(pl.col("split") == "validation")["criterion"].to_list() == ["colloquialness"]


def test_folder_errors_name_the_split_row(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    write_jsonl(root / "train.jsonl", [pair(), pair()])
    write_jsonl(root / "test.jsonl", [pair(), pair(criterion="tone")])
    with pytest.raises(ManifestError, match=r"ds: row 4 \(test row 2\), column 'criterion': 'tone' is not one of"):
        read_manifest(root)


def test_folder_without_splits(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match=r"empty: the folder holds no dataset splits"):
        read_manifest(tmp_path / "empty")


def test_clean_files_take_the_columnar_path(tmp_path, converter, monkeypatch):
    """Homogeneous files never touch the row converter (the slow path) unless it is forced."""
    calls = []
    row_converter = sdiareward_format.pairs_frame

    def counting(*args, **kwargs):
        calls.append(1)
        return row_converter(*args, **kwargs)

    monkeypatch.setattr(sdiareward_format, "pairs_frame", counting)
    rows = [pair(margin=1.0, id="a"), pair(margin=None, id=None)]
    write_jsonl(tmp_path / "pairs.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pairs.parquet")
    assert read_manifest(tmp_path / "pairs.jsonl").equals(read_manifest(tmp_path / "pairs.parquet"))
    assert read_manifest(tmp_path / "pairs.parquet", lazy=True).collect().height == 2
    assert (len(calls) > 0) == (converter == "by_rows")


def test_both_converters_agree_on_a_mixed_file(tmp_path, converter):
    good = pair(margin=0.5, category="Colloquial")
    good["chosen"][0]["content"].insert(0, text("hi"))
    bad = pair()
    bad["rejected"][1]["content"].append(audio("again.wav"))
    path = write_jsonl(tmp_path / "pairs.jsonl", [good, bad, pair(criterion="tone")])
    out = read_manifest(path, errors="collect", resolve_audio=False)
    assert out.to_dicts() == [
        {
            "pair_id": "0",
            "criterion": "colloquialness",
            "subset": None,
            "category": "Colloquial",
            "source": None,
            "chosen": [
                {"role": "user", "text": "hi", "audio_path": "q.wav"},
                {"role": "assistant", "text": None, "audio_path": "good.wav"},
            ],
            "rejected": [
                {"role": "user", "text": None, "audio_path": "q.wav"},
                {"role": "assistant", "text": None, "audio_path": "bad.wav"},
            ],
            "margin": 0.5,
            "error": None,
        },
        {
            "pair_id": "1",
            "criterion": "modality",
            "subset": None,
            "category": None,
            "source": None,
            "chosen": [
                {"role": "user", "text": None, "audio_path": "q.wav"},
                {"role": "assistant", "text": None, "audio_path": "good.wav"},
            ],
            "rejected": None,
            "margin": None,
            "error": "column 'rejected': turn 2 has 2 audio items; a turn holds at most one",
        },
        {
            "pair_id": "2",
            "criterion": "tone",
            "subset": None,
            "category": None,
            "source": None,
            "chosen": [
                {"role": "user", "text": None, "audio_path": "q.wav"},
                {"role": "assistant", "text": None, "audio_path": "good.wav"},
            ],
            "rejected": [
                {"role": "user", "text": None, "audio_path": "q.wav"},
                {"role": "assistant", "text": None, "audio_path": "bad.wav"},
            ],
            "margin": None,
            "error": "column 'criterion': 'tone' is not one of modality, colloquialness",
        },
    ]
