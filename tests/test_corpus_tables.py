"""Flat tables: SPEARBench metadata CSV (naturalness) and battles CSV/JSONL/Parquet (arena)."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from sdscore.corpus import BATTLES, ERROR_COLUMN, NATURALNESS_ITEMS
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest

SPEAR_HEADER = (
    "audio_path,answer_audio_path,context_end_time,question_end_time,answer_duration,speakers,"
    "conversation_id,transcript_question,transcript_answer,answer_start_time,finish_reason"
)


def spear_csv(tmp_path, *lines: str, name: str = "metadata.csv"):
    path = tmp_path / name
    path.write_text("\n".join([SPEAR_HEADER, *lines]) + "\n")
    return path


def test_spearbench_metadata(tmp_path):
    path = spear_csv(
        tmp_path,
        'q/0.wav,a/0.wav,3.5,7.25,2.0,"A,B",c1,"How are you?",Fine.,-0.3,stop',
        "q/1.wav,/data/a/1.wav,1,2,0.5,A,c1,Why?,Because.,0.125,length",
    )
    out = read_manifest(path)
    assert out.schema == NATURALNESS_ITEMS
    assert out["item_id"].to_list() == ["0", "1"]
    assert out["answer_start_time"].to_list() == [-0.3, 0.125]
    assert out["context_end_time"].to_list() == [3.5, 1.0]
    assert out["speakers"].to_list() == ["A,B", "A"]
    assert out["answer_audio_path"].to_list() == [str(tmp_path / "a/0.wav"), "/data/a/1.wav"]
    assert out["dialogue_path"].to_list() == [None, None]


def test_spearbench_id_column_is_used(tmp_path):
    path = tmp_path / "metadata.csv"
    path.write_text("id,answer_audio_path\nx7,a.wav\nx9,b.wav\n")
    assert read_manifest(path)["item_id"].to_list() == ["x7", "x9"]


def test_spearbench_tsv(tmp_path):
    path = tmp_path / "metadata.tsv"
    path.write_text("answer_audio_path\tanswer_duration\na.wav\t1.5\n")
    assert read_manifest(path)["answer_duration"].to_list() == [1.5]


def test_spearbench_bad_number_names_row_and_column(tmp_path):
    path = spear_csv(tmp_path, "q.wav,a.wav,1,2,3,A,c,?,.,0.1,stop", "q.wav,a2.wav,1,2,three,A,c,?,.,0.1,stop")
    with pytest.raises(
        ManifestError, match=re.escape("metadata.csv: row 2, column 'answer_duration': 'three' is not a number")
    ):
        read_manifest(path)


def test_spearbench_missing_answer_audio(tmp_path):
    path = spear_csv(tmp_path, "q.wav,,1,2,3,A,c,?,.,0.1,stop")
    with pytest.raises(ManifestError, match=re.escape("metadata.csv: row 1, column 'answer_audio_path': is missing")):
        read_manifest(path)


def battle(i: int, winner: str = "model_a") -> dict:
    return {"model_a": "moshi", "model_b": "gpt4o", "winner": winner, "domain": "emotion", "length_a": 1.5 + i}


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet", "json"])
def test_battles_in_every_format(tmp_path, suffix):
    frame = pl.DataFrame([battle(0), battle(1, "tie (bothbad)"), battle(2, "model_b")])
    path = tmp_path / f"battles.{suffix}"
    {"csv": frame.write_csv, "jsonl": frame.write_ndjson, "parquet": frame.write_parquet, "json": frame.write_json}[
        suffix
    ](path)
    out = read_manifest(path)
    assert out.schema == BATTLES
    assert out["battle_id"].to_list() == ["0", "1", "2"]
    assert out["winner"].to_list() == ["model_a", "tie (bothbad)", "model_b"]
    assert out["length_a"].to_list() == [1.5, 2.5, 3.5]


def test_fastchat_battles_keep_their_extra_columns(tmp_path):
    rows = [{**battle(0), "judge": "human", "anony": True, "tstamp": 1.7e9, "language": "English"}]
    (tmp_path / "clean_battle.json").write_text(json.dumps(rows))
    out = read_manifest(tmp_path / "clean_battle.json")
    assert out.columns[-3:] == ["anony", "tstamp", "language"] and out["judge"].to_list() == ["human"]


def test_battle_winner_error_names_the_csv_row(tmp_path):
    path = tmp_path / "battles.csv"
    pl.DataFrame([battle(0), battle(1, "model_c")]).write_csv(path)
    with pytest.raises(ManifestError, match=re.escape("battles.csv: row 2, column 'winner': 'model_c' is not one of")):
        read_manifest(path)


def test_battles_collect_mode(tmp_path):
    path = tmp_path / "battles.csv"
    path.write_text("model_a,model_b,winner,length_a\na,b,model_a,1\na,b,both,2\na,b,tie,x\n")
    out = read_manifest(path, errors="collect")
    assert out.height == 3
    assert out[ERROR_COLUMN].to_list() == [
        None,
        "column 'winner': 'both' is not one of model_a, model_b, tie, tie (bothbad)",
        "column 'length_a': 'x' is not a number",
    ]
