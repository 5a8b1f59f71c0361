"""The synthetic corpus's 10-turn consistency set (SpeakerSleuth's extended condition): its rows, turn
counts and labels, and `sdscore score consistency` with the embedding judge on it."""

from __future__ import annotations

import json

import polars as pl
import pytest

from sdscore.cli import main
from sdscore.manifests import manifest_spec, validate_manifest
from sdscore.synth.build import CONSISTENCY_10TURN_TABLE, SIZES
from sdscore.synth.consistency_instances import DATASET_10TURN, build_consistency
from sdscore.synth.voices import VOICES_BY_ID


def _voice(path: str) -> str:
    """Voice id of a TTS render path audio/tts/<voice>/<hash>.wav."""
    parts = path.split("/")
    assert parts[:2] == ["audio", "tts"], path
    return parts[2]


@pytest.fixture(scope="module")
def extended(tiny_corpus) -> pl.DataFrame:
    return pl.read_parquet(tiny_corpus / CONSISTENCY_10TURN_TABLE)


def test_the_set_is_in_the_built_corpus_with_ten_turns_per_speaker(tiny_corpus, extended):
    summary = json.loads((tiny_corpus / "corpus.json").read_text())
    n_speakers = SIZES["tiny"].consistency_speakers_10turn
    assert summary["counts"][CONSISTENCY_10TURN_TABLE] == extended.height == 4 * n_speakers
    assert extended.schema == manifest_spec("consistency").schema
    validate_manifest(extended, "consistency", CONSISTENCY_10TURN_TABLE)
    assert extended["dataset"].unique().to_list() == [DATASET_10TURN]
    main_ids = set(pl.read_parquet(tiny_corpus / "consistency.parquet")["instance_id"])
    assert extended["instance_id"].n_unique() == extended.height and not main_ids & set(extended["instance_id"])
    detection = extended.filter(pl.col("task") == "detection")
    assert sorted(detection["scenario"].to_list()) == sorted(["S1", "S2", "S3"] * n_speakers)
    assert set(detection["turn_paths"].list.len().to_list()) == {10}
    discrimination = extended.filter(pl.col("task") == "discrimination")
    assert discrimination.height == n_speakers and set(discrimination["turn_paths"].list.len().to_list()) == {9}


def test_labels_say_which_turn_another_speaker_voices(tiny_corpus, extended):
    summary = json.loads((tiny_corpus / "corpus.json").read_text())
    similar = summary["truth"]["consistency_10turn"]["similar_voice"]
    by_base: dict[str, dict[str, dict]] = {}
    for row in extended.iter_rows(named=True):
        base, kind = row["instance_id"].rsplit("-", 1)
        by_base.setdefault(base, {})[row["scenario"] or kind] = row
    for rows in by_base.values():
        s1, disc = rows["S1"], rows["disc"]
        target = VOICES_BY_ID[s1["speaker_id"]]
        assert s1["true_turns"] == [] and len(set(s1["turn_paths"])) == 10
        assert {_voice(p) for p in s1["turn_paths"]} == {target.id}
        for scenario in ("S2", "S3"):
            row = rows[scenario]
            (k,) = row["true_turns"]
            assert [i for i, (a, b) in enumerate(zip(s1["turn_paths"], row["turn_paths"])) if a != b] == [k]
            voice = VOICES_BY_ID[_voice(row["turn_paths"][k])]
            assert voice.identity != target.identity
            assert (voice.gender == target.gender) == (scenario == "S3")
            if scenario == "S3":
                assert voice.id == similar[target.id]["voice"]
        k = disc["masked_turn"]
        assert k == rows["S2"]["true_turns"][0] and disc["turn_paths"] == s1["turn_paths"][:k] + s1["turn_paths"][k + 1:]
        versions = {s: rows[s]["turn_paths"][k] for s in ("S1", "S2", "S3")}
        assert dict(zip(disc["candidate_scenarios"], disc["candidate_paths"])) == versions


def test_build_consistency_refuses_a_turn_count_it_cannot_fill():
    with pytest.raises(ValueError, match=r"n_turns must be an integer in 2\.\.48, got 49"):
        build_consistency(None, None, 1, {}, n_turns=49)


def test_score_consistency_runs_on_the_10_turn_set(tiny_corpus, extended, tmp_path):
    results = tmp_path / "ten.parquet"
    code = main(["score", "consistency", str(tiny_corpus / CONSISTENCY_10TURN_TABLE), "--out", str(results),
                 "--embedder", "ge2e", "--threshold", "0.6", "--cache-dir", str(tmp_path / "cache")])
    frame = pl.read_parquet(results)
    assert code == 0 and frame.height == extended.height and frame["error"].null_count() == frame.height
    detection = frame.filter(pl.col("task") == "detection")
    assert set(detection["turn_scores"].list.len().to_list()) == {10}
    # as on the 5-turn set (test_cli): the gender-switched turn is the least similar to the other nine
    s2 = detection.filter(pl.col("scenario") == "S2")
    for scores, (true_turn,) in zip(s2["turn_scores"].to_list(), s2["true_turns"].to_list()):
        assert min(range(len(scores)), key=scores.__getitem__) == true_turn
    assert main(["eval", "consistency", str(results), "--out", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert set(metrics["detection"]) >= {"S1", "S2", "S3", "balanced"}
