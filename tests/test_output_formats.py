"""`--format jsonl|versa|scp`: score output written from the finished results Parquet."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from lhotse import CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet
from runtime_toy_scorer import ToyScorer, write_arena_manifest
from sdscore.cli import main
from sdscore.corpus.output_formats import (
    default_destination,
    result_keys,
    write_results_as,
)
from sdscore.errors import SdscoreError
from sdscore.protocols.arena.spec import SPEC as ARENA
from sdscore.protocols.consistency.spec import SPEC as CONSISTENCY
from sdscore.protocols.naturalness.spec import SPEC as NATURALNESS
from sdscore.runtime.run import score_manifest
from sdscore.runtime.scorer import ScoringJob


@pytest.fixture(scope="module")
def arena_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("formats")
    manifest = write_arena_manifest(d / "battles.parquet", n_rows=23, bad_every=7)
    out = d / "results.parquet"
    score_manifest(ScoringJob(ARENA, ToyScorer, {"scale": 0.5}), manifest, out, window_rows=8)
    return out


def read_scp(path) -> list[tuple[str, str]]:
    """Kaldi's text table format: `<key> <value>` a line, key up to the first whitespace."""
    return [tuple(line.split(maxsplit=1)) for line in path.read_text().splitlines()]


def test_jsonl_holds_every_column_of_every_row(arena_results, tmp_path):
    target = write_results_as(arena_results, "jsonl", ARENA, tmp_path / "r.jsonl")
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    expected = pl.read_parquet(arena_results)
    assert len(lines) == expected.height
    assert [row["battle_id"] for row in lines] == expected["battle_id"].to_list()
    assert [row["value"] for row in lines] == expected["value"].to_list()
    assert [row["pair"] for row in lines] == expected["pair"].to_list()
    assert [row["error"] for row in lines] == expected["error"].to_list()


def test_versa_is_one_object_per_key_with_the_numeric_metrics_and_text_beside_it(arena_results, tmp_path):
    target = write_results_as(arena_results, "versa", ARENA, tmp_path / "r.versa.jsonl")
    expected = pl.read_parquet(arena_results)
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    good = expected.filter(pl.col("error").is_null())
    assert 0 < good.height < expected.height
    assert [row["key"] for row in lines] == good["battle_id"].to_list()  # failed rows are left out
    for row, source in zip(lines, good.iter_rows(named=True)):
        assert row == {"key": source["battle_id"], "value": source["value"]}  # numbers only
    text = [json.loads(line) for line in (tmp_path / "r.versa.text.jsonl").read_text().splitlines()]
    assert [row["key"] for row in text] == expected["battle_id"].to_list()  # every row
    for row, source in zip(text, expected.iter_rows(named=True)):
        if source["error"] is None:
            assert row == {"key": source["battle_id"], "side": source["side"]}
        else:
            assert row == {"key": source["battle_id"], "error": source["error"]}


def versa_aggregate_results(logdir, scoredir, nj: int) -> None:
    """VERSA's own aggregation, reproduced from its source: wavlab-speech/versa
    versa/bin/aggregate_results.py (VERSA 1.0.0; the file last changed in 4352bd8, 2024-10-29, and is
    the same at c398480, 2026-05-19). It json.loads every line of <logdir>/result.<n>.txt, writes them
    to <scoredir>/utt_result.txt, and for every key of the FIRST line but "key" writes
    `key: sum(info[key] for info in lines) / len(lines)` to <scoredir>/avg_result.txt — so a text value
    (str + int) or a key missing from a later line crashes it."""
    score_info = []
    for i in range(nj):
        with open(f"{logdir}/result.{i + 1}.txt") as f:
            for line in f:
                score_info.append(json.loads(line.strip()))
    with open(f"{scoredir}/utt_result.txt", "w") as f, open(f"{scoredir}/avg_result.txt", "w") as f2:
        for info in score_info:
            f.write(f"{info}\n")
        for key in score_info[0].keys():
            if key == "key":
                continue
            avg = sum([info[key] for info in score_info]) / len(score_info)
            f2.write(f"{key}: {avg}\n")


def test_versas_aggregate_script_reads_our_versa_output(tmp_path):
    results = tmp_path / "n.parquet"
    pl.DataFrame({
        "item_id": ["u1", "u2", "u3", "u4"],
        "mos_dnsmos_ovrl": [3.5, 2.25, None, 4.0],
        "wer_pocketsphinx": [0.5, 0.25, None, None],
        "interrupted": [True, False, None, False],
        "transcript_pocketsphinx": ["a", "b", None, "d"],
        "language": ["en", "en", None, "fr"],
        "error": [None, None, "answer: cannot decode", None],
    }).write_parquet(results)
    target = write_results_as(results, "versa", NATURALNESS, tmp_path / "logdir" / "result.1.txt")
    (tmp_path / "score").mkdir()
    versa_aggregate_results(tmp_path / "logdir", tmp_path / "score", 1)
    averages = dict(line.split(": ") for line in (tmp_path / "score" / "avg_result.txt").read_text().splitlines())
    assert float(averages["mos_dnsmos_ovrl"]) == pytest.approx((3.5 + 2.25 + 4.0) / 3)
    assert float(averages["interrupted"]) == pytest.approx(1 / 3)
    assert math.isnan(float(averages["wer_pocketsphinx"]))  # u4 has no WER: NaN, as VERSA writes a missing one
    assert sorted(averages) == ["interrupted", "mos_dnsmos_ovrl", "wer_pocketsphinx"]
    text = [json.loads(line) for line in (tmp_path / "logdir" / "result.1.text.txt").read_text().splitlines()]
    assert text[0] == {"key": "u1", "transcript_pocketsphinx": "a", "language": "en"}
    assert text[2] == {"key": "u3", "error": "answer: cannot decode"}
    # the reproduction is VERSA's: the output with text in it (what --format versa wrote before) crashes it
    target.write_text(json.dumps({"key": "u1", "mos": 3.5, "language": "en"}) + "\n")
    with pytest.raises(TypeError, match="unsupported operand"):
        versa_aggregate_results(tmp_path / "logdir", tmp_path / "score", 1)


def test_versa_text_file_is_planned_with_the_output(arena_results, tmp_path):
    (tmp_path / "r.versa.text.jsonl").write_text("mine\n")
    with pytest.raises(SdscoreError, match=r"r.versa.text.jsonl: --format-out's text file exists; pass --overwrite"):
        write_results_as(arena_results, "versa", ARENA, tmp_path / "r.versa.jsonl")
    assert not (tmp_path / "r.versa.jsonl").exists() and (tmp_path / "r.versa.text.jsonl").read_text() == "mine\n"


def test_scp_folder_has_one_sorted_file_per_numeric_column(tmp_path):
    results = tmp_path / "r.parquet"
    pl.DataFrame({
        "item_id": ["utt_b", "utt_a", "utt_c", "utt_d"],
        "mos": [3.25, 4.5, None, float("nan")],
        "wer": [0.1, 0.0, 0.5, 1.0],
        "frames": [10, 20, 30, 40],
        "interrupted": [True, False, None, False],
        "transcript": ["x", "y", "z", "w"],
        "arousal": pl.Series([None] * 4, dtype=pl.Float64),
        "error": [None, None, "boom", None],
    }).write_parquet(results)
    folder = write_results_as(results, "scp", NATURALNESS)
    assert folder == default_destination(results, "scp") == tmp_path / "r_scp"
    assert sorted(p.name for p in folder.iterdir()) == [".sdscore-output.json", "frames.scp", "interrupted.scp",
                                                        "mos.scp", "wer.scp"]  # the marker lists what sdscore wrote
    assert json.loads((folder / ".sdscore-output.json").read_text())["files"] == [
        "frames.scp", "interrupted.scp", "mos.scp", "wer.scp"]
    assert read_scp(folder / "mos.scp") == [("utt_a", "4.5"), ("utt_b", "3.25")]  # null and NaN left out
    assert read_scp(folder / "wer.scp") == [("utt_a", "0.0"), ("utt_b", "0.1"), ("utt_c", "0.5"), ("utt_d", "1.0")]
    assert read_scp(folder / "frames.scp")[0] == ("utt_a", "20")
    assert read_scp(folder / "interrupted.scp") == [("utt_a", "0"), ("utt_b", "1"), ("utt_d", "0")]
    for key, value in read_scp(folder / "wer.scp"):
        assert math.isfinite(float(value))
    # writing again is refused without overwrite; with it the folder (all sdscore's) is replaced:
    # a metric that is gone leaves no stale file
    pl.read_parquet(results).drop("frames").write_parquet(results)
    with pytest.raises(SdscoreError, match=r"r_scp: --format-out exists .*pass --overwrite"):
        write_results_as(results, "scp", NATURALNESS)
    write_results_as(results, "scp", NATURALNESS, overwrite=True)
    assert not (folder / "frames.scp").exists()


def test_scp_writes_the_columns_the_report_shows_in_percent_as_percent(tmp_path):
    assert "wer_pocketsphinx" in NATURALNESS.percent_columns and "cer_clean_whisper" in NATURALNESS.percent_columns
    pl.DataFrame({"item_id": ["u1", "u2", "u3"], "wer_pocketsphinx": [0.1, 1 / 3, None],
                  "mos_dnsmos_ovrl": [3.5, 2.0, 1.0]}).write_parquet(tmp_path / "n.parquet")
    folder = write_results_as(tmp_path / "n.parquet", "scp", NATURALNESS)
    assert sorted(p.name for p in folder.glob("*.scp")) == ["mos_dnsmos_ovrl.scp", "wer_pocketsphinx_pct.scp"]
    wer = read_scp(folder / "wer_pocketsphinx_pct.scp")
    assert [key for key, _ in wer] == ["u1", "u2"]
    assert [float(v) for _, v in wer] == pytest.approx([10.0, 100 / 3], rel=1e-10)
    assert read_scp(folder / "mos_dnsmos_ovrl.scp")[0] == ("u1", "3.5")  # other columns keep their units


def test_keys_carry_the_dataset_where_the_protocol_keys_by_it(tmp_path):
    frame = pl.DataFrame({"instance_id": ["1", "1", "2"], "dataset": ["vctk", "libri", None], "score": [0.1, 0.2, 0.3]})
    assert result_keys(frame, CONSISTENCY).to_list() == ["vctk/1", "libri/1", "2"]
    frame.write_parquet(tmp_path / "c.parquet")
    write_results_as(tmp_path / "c.parquet", "scp", CONSISTENCY, tmp_path / "scp")
    assert read_scp(tmp_path / "scp" / "score.scp") == [("2", "0.3"), ("libri/1", "0.2"), ("vctk/1", "0.1")]


def test_keys_an_scp_cannot_hold_are_refused(tmp_path):
    pl.DataFrame({"item_id": ["a b", "c"], "mos": [1.0, 2.0]}).write_parquet(tmp_path / "space.parquet")
    with pytest.raises(SdscoreError, match=r"row 1: key 'a b' holds whitespace"):
        write_results_as(tmp_path / "space.parquet", "scp", NATURALNESS)
    pl.DataFrame({"item_id": ["a", "c", "a"], "mos": [1.0, 2.0, 3.0]}).write_parquet(tmp_path / "dup.parquet")
    with pytest.raises(SdscoreError, match=r"rows 1 and 3 share the key 'a'; cannot write versa"):
        write_results_as(tmp_path / "dup.parquet", "versa", NATURALNESS)
    pl.DataFrame({"item_id": ["a"], "text": ["x"]}).write_parquet(tmp_path / "none.parquet")
    with pytest.raises(SdscoreError, match="no numeric columns to write as scp files"):
        write_results_as(tmp_path / "none.parquet", "scp", NATURALNESS)
    with pytest.raises(ValueError, match="unknown output format 'csv'"):
        write_results_as(tmp_path / "none.parquet", "csv", NATURALNESS)


def test_cli_scores_a_lhotse_cutset_and_writes_versa(tmp_path):
    rng = np.random.default_rng(0)
    sf.write(tmp_path / "talk.wav", (0.1 * rng.standard_normal(16000 * 20)).astype(np.float32), 16000)
    recording = Recording.from_file(tmp_path / "talk.wav", recording_id="talk")
    turns = [SupervisionSegment(id=f"t{i}", recording_id="talk", start=2.0 * i, duration=1.5, speaker="AB"[i % 2])
             for i in range(8)]
    cuts = CutSet.from_manifests(RecordingSet.from_recordings([recording]), SupervisionSet.from_segments(turns))
    cuts.trim_to_supervisions().to_file(tmp_path / "cuts.jsonl.gz")
    out = tmp_path / "scores.parquet"
    code = main(["score", "consistency", str(tmp_path / "cuts.jsonl.gz"), "--out", str(out), "--format", "versa",
                 "--cache-dir", str(tmp_path / "cache")])
    assert code == 0
    results = pl.read_parquet(out)
    lines = [json.loads(line) for line in (tmp_path / "scores.versa.jsonl").read_text().splitlines()]
    assert [line["key"] for line in lines] == results["instance_id"].to_list() == ["A", "B"]
    assert [line["inconsistent_pred"] for line in lines] == results["inconsistent_pred"].to_list()
    assert all(len(scores) == 4 for scores in results["turn_scores"].to_list())
