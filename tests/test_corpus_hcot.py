"""HCoT human labels (TRACE) → JUDGE_ITEMS: the real files and small hand-made ones."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from sdscore.corpus import JUDGE_ITEMS
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest

HCOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hcot"
LABELS = {"1", "2", "both_good", "both_bad"}


def hcot_file(name: str) -> Path:
    path = HCOT / name
    if not path.is_file():
        pytest.skip(f"HCoT labels not found at {path} (the tests expect ../shared beside the repository)")
    return path


def item(index: int, **changes) -> dict:
    row = {
        "index": index,
        "instruction_path": f"audio/{index}/instruction.wav",
        "instruction_text": "Say it slowly.",
        "model_a": "moshi",
        "model_b": "gpt4o",
        "audio1_path": f"audio/{index}/a.wav",
        "audio2_path": f"audio/{index}/b.wav",
        "label": {"content": "1", "voice_quality": "2", "paralinguistics": "both_bad", "overall": "1"},
        "instruction_id": 7,
    }
    return {**row, **changes}


@pytest.mark.parametrize(("name", "rows"), [("speakbench.json", 497), ("s2sarena.json", 314)])
def test_real_hcot_files(name, rows):
    path = hcot_file(name)
    out = read_manifest(path)
    assert out.height == rows
    assert out.schema == JUDGE_ITEMS
    assert out["dataset"].unique().to_list() == [name.removesuffix(".json")]
    assert out["item_id"].n_unique() == rows
    for column in ("content", "voice_quality", "paralinguistics", "overall"):
        assert set(out[column].to_list()) == LABELS
    raw = json.loads(path.read_text())[0]
    first = out.row(0, named=True)
    assert first["item_id"] == str(raw["index"])
    assert first["instruction_id"] == str(raw["instruction_id"])
    assert first["overall"] == raw["label"]["overall"]
    assert first["audio1_path"] == str(HCOT / raw["audio1_path"])


def test_real_hcot_files_concatenate_without_id_clashes():
    both = pl.concat([read_manifest(hcot_file("speakbench.json")), read_manifest(hcot_file("s2sarena.json"))])
    assert both.height == 497 + 314
    assert both.select("dataset", "item_id").is_unique().all()


def test_small_hcot_file(tmp_path):
    path = tmp_path / "mybench.json"
    path.write_text(json.dumps([item(3), item(5, label={"content": 1, "voice_quality": 2})]))
    out = read_manifest(path, resolve_audio=False)
    assert out["item_id"].to_list() == ["3", "5"]
    assert out["dataset"].to_list() == ["mybench", "mybench"]
    assert out["instruction_id"].to_list() == ["7", "7"]
    assert out.row(1, named=True)["content"] == "1"
    assert out.row(1, named=True)["voice_quality"] == "2"
    assert out.row(1, named=True)["overall"] is None
    assert out["audio2_path"].to_list() == ["audio/3/b.wav", "audio/5/b.wav"]


def test_hcot_jsonl(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text("".join(json.dumps(item(i)) + "\n" for i in range(3)))
    out = read_manifest(path)
    assert out["item_id"].to_list() == ["0", "1", "2"] and out["dataset"].unique().to_list() == ["bench"]


def test_hcot_without_index_uses_row_numbers(tmp_path):
    rows = [item(0), item(0)]
    for row in rows:
        del row["index"]
    (tmp_path / "b.json").write_text(json.dumps(rows))
    assert read_manifest(tmp_path / "b.json")["item_id"].to_list() == ["0", "1"]


def test_unknown_label_is_named(tmp_path):
    path = tmp_path / "speakbench.json"
    path.write_text(json.dumps([item(0), item(1, label={"content": "tie"})]))
    with pytest.raises(
        ManifestError,
        match=re.escape("speakbench.json: row 2, column 'content': 'tie' is not one of 1, 2, both_good, both_bad"),
    ):
        read_manifest(path)


def test_repeated_index_is_named(tmp_path):
    path = tmp_path / "speakbench.json"
    path.write_text(json.dumps([item(4), item(4)]))
    with pytest.raises(ManifestError, match=re.escape("speakbench.json: row 2, column 'item_id': '4' repeats row 1")):
        read_manifest(path)


def test_label_that_is_not_an_object(tmp_path):
    path = tmp_path / "speakbench.json"
    path.write_text(json.dumps([item(0, label="1")]))
    with pytest.raises(
        ManifestError, match=re.escape("speakbench.json: row 1, column 'label': is str, expected an object")
    ):
        read_manifest(path)


def test_missing_response_path(tmp_path):
    path = tmp_path / "speakbench.json"
    path.write_text(json.dumps([item(0, audio2_path=None)]))
    with pytest.raises(ManifestError, match=re.escape("speakbench.json: row 1, column 'audio2_path': is missing")):
        read_manifest(path)


def test_hcot_rows_belong_to_the_judge_protocol(tmp_path):
    path = tmp_path / "speakbench.json"
    path.write_text(json.dumps([item(0)]))
    with pytest.raises(ManifestError, match=r"speakbench\.json: holds HCoT rows for protocol 'judge', not 'arena'"):
        read_manifest(path, "arena")
