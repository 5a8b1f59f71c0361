"""The Seamless Interaction reader (issue 30 item 2): a tiny corpus in the authors' on-disk layout
(both of their layouts, both subsets, several splits, malformed interactions) read into segments,
selected into dialogues, and the subset/split filters of select-dialogues and eval naturalness."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from fifo_guard import unblocking
from sdscore.cli import main
from sdscore.errors import ManifestError
from sdscore.protocols.naturalness.evaluate import evaluate_files
from sdscore.protocols.naturalness.results import RESULTS
from sdscore.protocols.naturalness.seamless_reader import read_seamless
from sdscore.protocols.naturalness.selection import METADATA_COLUMNS, read_source, select_dialogues

SR = 16000
#: improvised/dev, the download tools' layout: <batch>/<archive>/<file_id>.wav beside <file_id>.json
A = "V00_S0001_I00000001"
#: naturalistic/test, the per-modality layout: audio/<file_id>.wav, transcript/<file_id>.jsonl
B = "V01_S0002_I00000005"


def _wav(path: Path, seconds: float, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    noise = np.random.default_rng(seed).uniform(-0.3, 0.3, int(seconds * SR))
    sf.write(path, (noise * 32767).astype(np.int16), SR, subtype="PCM_16")


def _entry(text: str, start: float, end: float, *, words_only: bool = False) -> dict:
    words = [{"word": w, "start": start, "end": end, "score": 0.9} for w in text.split()]
    return {"words": words, "start": start, "end": end} if words_only else \
        {"transcript": text, "start": start, "end": end, "words": words}


def _bundle(folder: Path, file_id: str, entries, seconds: float = 7.0, seed: int = 0) -> None:
    _wav(folder / f"{file_id}.wav", seconds, seed)
    (folder / f"{file_id}.json").write_text(json.dumps(
        {"id": file_id, "metadata:transcript": entries, "metadata:vad": [{"start": 0.0, "end": 1.0}]}))


def _modality(split: Path, file_id: str, entries, seconds: float = 5.0, seed: int = 0) -> None:
    _wav(split / "audio" / f"{file_id}.wav", seconds, seed)
    (split / "transcript").mkdir(parents=True, exist_ok=True)
    (split / "transcript" / f"{file_id}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))


@pytest.fixture
def corpus(tmp_path) -> Path:
    root = tmp_path / "seamless_interaction"
    archive = root / "improvised" / "dev" / "0000" / "0003"
    _bundle(archive, f"{A}_P0001", [_entry("Hello there.", 0.0, 1.0), _entry("How was your weekend?", 1.2, 2.5),
                                     _entry("Nice.", 5.3, 5.8)], seed=1)
    _bundle(archive, f"{A}_P0002", [_entry("It was great, we went hiking.", 2.8, 5.0)], seed=2)
    (archive / f"{A}_P0001.npz").write_bytes(b"not read")
    (archive / f"{A}_P0001.mp4").write_bytes(b"not read")
    (root / "improvised" / "dev" / "1P-IS").mkdir(parents=True)
    (root / "improvised" / "dev" / "1P-IS" / f"{A}_P0001.json").write_text('{"annotations": ["not read"]}')
    # malformed, each in its own interaction: not JSON; one participant; no audio; bad times
    _bundle(archive, "V00_S0001_I00000002_P0001", [], seed=3)
    _bundle(archive, "V00_S0001_I00000002_P0002", [], seed=4)
    (archive / "V00_S0001_I00000002_P0002.json").write_text("{not json")
    _bundle(archive, "V00_S0001_I00000003_P0001", [_entry("Alone?", 0.0, 1.0)], seed=5)
    _bundle(archive, "V00_S0001_I00000004_P0001", [_entry("Where is it?", 0.0, 1.0)], seed=6)
    _bundle(archive, "V00_S0001_I00000004_P0002", [_entry("Over there, by the door.", 1.2, 3.0)], seed=7)
    (archive / "V00_S0001_I00000004_P0002.wav").unlink()
    _bundle(archive, "V00_S0001_I00000006_P0001", [_entry("Why?", 2.0, 1.0)], seed=8)
    _bundle(archive, "V00_S0001_I00000006_P0002", [_entry("Because.", 2.5, 4.0)], seed=9)
    split = root / "naturalistic" / "test"
    _modality(split, f"{B}_P0004", [_entry("Do you like tea?", 0.5, 1.5)], seed=10)
    _modality(split, f"{B}_P0003", [_entry("Yes, I drink it every morning.", 1.8, 3.5, words_only=True)], seed=11)
    (root / "naturalistic" / "dev").mkdir(parents=True)
    return root


PROBLEMS = {
    "V00_S0001_I00000002": r"V00_S0001_I00000002_P0002\.json: not JSON",
    "V00_S0001_I00000003": r"interaction V00_S0001_I00000003 has 1 participant\(s\) \(P0001: .*\); a dyad needs 2",
    "V00_S0001_I00000004": r"V00_S0001_I00000004_P0002\.wav is missing",
    "V00_S0001_I00000006": r"V00_S0001_I00000006_P0001\.json transcript entry 0: end 1 is before start 2",
}


def test_reads_both_layouts_with_subset_split_and_per_interaction_problems(corpus):
    read = read_seamless(corpus)
    assert read.conversations == {A: {"subset": "improvised", "split": "dev"},
                                  B: {"subset": "naturalistic", "split": "test"}}
    by = {(s.conversation_id, s.speaker, s.start): s for s in read.segments}
    assert len(by) == read.rows == 6
    answer = by[(A, "P0002", 2.8)]
    assert (answer.end, answer.text, answer.channel) == (5.0, "It was great, we went hiking.", None)
    assert answer.audio_path == str(corpus / "improvised/dev/0000/0003" / f"{A}_P0002.wav")
    assert by[(B, "P0003", 1.8)].text == "Yes, I drink it every morning."  # words joined: no "transcript"
    assert by[(B, "P0003", 1.8)].audio_path == str(corpus / "naturalistic/test/audio" / f"{B}_P0003.wav")
    assert [s.speaker for s in read.segments if s.conversation_id == B] == ["P0003", "P0004"]  # id order
    problems = dict(read.problems)
    assert set(problems) == set(PROBLEMS)
    for interaction, pattern in PROBLEMS.items():
        assert re.search(pattern, problems[interaction]), problems[interaction]


def test_subset_and_split_filters_read_only_those_folders(corpus):
    assert set(read_seamless(corpus, subsets=["naturalistic"]).conversations) == {B}
    only = read_seamless(corpus, splits=["dev"])
    assert set(only.conversations) == {A} and {p for p, _ in only.problems} == set(PROBLEMS)
    assert read_seamless(corpus, subsets=["naturalistic"], splits=["dev"]).segments == ()


@pytest.mark.parametrize("call, match", [
    (lambda root: read_seamless(root, splits=["validation"]), r"unknown Seamless Interaction split 'validation'"),
    (lambda root: read_seamless(root, subsets=[]), r"unknown Seamless Interaction subset '\(none given\)'"),
    (lambda root: read_seamless(root / "improvised"), r"improvised: no improvised/ or naturalistic/ folder"),
    (lambda root: read_seamless(root / "absent"), r"absent: not a folder"),
    (lambda root: read_source(root / "improvised"), r"improvised: a folder, but not a Seamless Interaction folder"),
])
def test_bad_roots_and_filters_are_refused(corpus, call, match):
    with pytest.raises(ManifestError, match=match):
        call(corpus)


def test_an_interaction_in_two_splits_is_skipped_as_a_problem(corpus):
    _bundle(corpus / "improvised" / "test", f"{A}_P0001", [_entry("Again?", 0.0, 1.0)])
    _bundle(corpus / "improvised" / "test", f"{A}_P0002", [_entry("Yes, once more.", 1.2, 3.0)])
    problems = dict(read_seamless(corpus, subsets=["improvised"]).problems)
    assert f"interaction {A} is also in {corpus / 'improvised' / 'dev'}" in problems[A]


def test_selection_over_the_folder_and_its_metadata(corpus, tmp_path):
    out = tmp_path / "selected"
    with pytest.warns(UserWarning, match="skipped"):
        summary = select_dialogues(corpus, out)
    assert summary["dialogues"] == 2 and summary["filters"] == {"subset": None, "split": None}
    assert {e["conversation_id"] for e in summary["skipped"]} == set(PROBLEMS)
    metadata = pl.read_csv(out / "metadata.csv")
    assert tuple(metadata.columns) == METADATA_COLUMNS
    rows = {r["item_id"]: r for r in metadata.iter_rows(named=True)}
    a, b = rows[f"{A}_P0001_P0002_0"], rows[f"{B}_P0003_P0004_0"]
    assert (a["subset"], a["split"], b["subset"], b["split"]) == ("improvised", "dev", "naturalistic", "test")
    # A: context "Hello there." (0-1), question 1.2-2.5 by P0001, answer 2.8-5.0 until P0001 speaks again
    assert a["speakers"] == "P0001|P0002" and a["conversation_id"] == A
    assert a["transcript_question"] == "P0001: Hello there. P0001: How was your weekend?"
    assert a["transcript_answer"] == "P0002: It was great, we went hiking."
    assert (a["context_end_time"], a["question_end_time"]) == pytest.approx((1.2, 2.5))
    assert (a["answer_start_time"], a["answer_duration"]) == pytest.approx((0.3, 2.2))
    # B: no context, the question by P0004 (spk2: participants in id order)
    assert b["speakers"] == "P0003|P0004" and b["transcript_question"] == "P0004: Do you like tea?"
    assert (b["context_end_time"], b["question_end_time"], b["answer_start_time"]) == pytest.approx((0.0, 1.0, 0.3))
    question, rate = sf.read(out / a["audio_path"])
    assert rate == SR and question.shape == (round(2.5 * SR), 2)
    answer, _ = sf.read(out / a["answer_audio_path"])
    source, _ = sf.read(corpus / "improvised/dev/0000/0003" / f"{A}_P0002.wav")
    np.testing.assert_array_equal(answer, source[round(2.8 * SR):round(5.0 * SR)])


def test_cli_split_and_subset_filters(corpus, tmp_path, capsys):
    out = tmp_path / "test_only"
    assert main(["corpus", "select-dialogues", str(corpus), "--out", str(out), "--split", "test"]) == 0
    assert pl.read_csv(out / "metadata.csv")["conversation_id"].to_list() == [B]
    out = tmp_path / "improvised_dev"
    assert main(["corpus", "select-dialogues", str(corpus), "--out", str(out), "--subset", "improvised",
                 "--split", "dev", "--split", "train"]) == 1  # the malformed interactions are skipped and named
    printed = "".join(capsys.readouterr().err.split())
    assert "V00_S0001_I00000002_P0002.json:notJSON" in printed and "1dialoguesfrom1of5conversations" in printed
    assert pl.read_csv(out / "metadata.csv")["conversation_id"].to_list() == [A]
    assert json.loads((out / "selection.json").read_text())["filters"] == {"subset": ["improvised"],
                                                                          "split": ["dev", "train"]}
    assert main(["corpus", "select-dialogues", str(corpus), "--out", str(tmp_path / "x"), "--split", "valid"]) == 2
    assert "unknown Seamless Interaction split 'valid'" in capsys.readouterr().err


def test_cli_filters_that_match_nothing_are_refused_and_write_nothing(corpus, tmp_path, capsys):
    out = tmp_path / "none"
    assert main(["corpus", "select-dialogues", str(corpus), "--out", str(out), "--subset", "naturalistic",
                 "--split", "dev"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--subset naturalistic; --split dev match no conversation" in err
    assert "improvised/dev" in err and "naturalistic/test" in err  # the folders that are there
    assert not out.exists() and not any(p.name.startswith(".") for p in tmp_path.iterdir() if p.name != corpus.name)
    with pytest.raises(ManifestError, match=r"--split train match no conversation; the subset/split folders "
                                            r"present are improvised/dev, naturalistic/dev \(empty\), naturalistic/test"):
        select_dialogues(corpus, tmp_path / "none2", subsets=["naturalistic"], splits=["train"])
    assert not (tmp_path / "none2").exists()


def _table(tmp_path: Path, corpus: Path, **extra) -> Path:
    read = read_seamless(corpus)
    rows = [{"conversation_id": s.conversation_id, "speaker": s.speaker, "start": s.start, "end": s.end,
             "text": s.text, "audio_path": s.audio_path,
             **{k: v(s.conversation_id) for k, v in extra.items()}} for s in read.segments]
    path = tmp_path / "segments.csv"
    pl.DataFrame(rows).write_csv(path)
    return path


def test_a_table_with_subset_and_split_columns_filters_the_same(corpus, tmp_path):
    labels = read_seamless(corpus).conversations
    table = _table(tmp_path, corpus, subset=lambda c: labels[c]["subset"], split=lambda c: labels[c]["split"])
    summary = select_dialogues(table, tmp_path / "out", subsets=["naturalistic"])
    metadata = pl.read_csv(tmp_path / "out" / "metadata.csv")
    assert summary["dialogues"] == 1 and metadata["subset"].to_list() == ["naturalistic"]
    assert metadata["split"].to_list() == ["test"]
    with pytest.raises(ManifestError, match=r"segments.csv: --subset naturalistic; --split dev match no conversation; "
                                            r"the subset/split values present are improvised/dev, naturalistic/test"):
        select_dialogues(table, tmp_path / "empty", subsets=["naturalistic"], splits=["dev"])
    assert not (tmp_path / "empty").exists()
    plain = _table(tmp_path, corpus)
    with pytest.raises(ManifestError, match=r"segments.csv: no split column \(or only nulls\) to filter by --split dev"):
        read_source(plain, splits=["dev"])
    select_dialogues(plain, tmp_path / "plain")
    assert pl.read_csv(tmp_path / "plain" / "metadata.csv")["subset"].null_count() == 2  # not known: null


def test_a_conversation_with_two_subsets_in_a_table_is_a_problem(corpus, tmp_path):
    flip = iter(["improvised", "naturalistic"] * 10)
    table = _table(tmp_path, corpus, subset=lambda c: next(flip) if c == A else "naturalistic")
    read = read_source(table)
    assert any(c == A and "has subset 'improvised' and 'naturalistic'; a conversation has one subset" in m
               for c, m in read.problems)


def _results(tmp_path: Path) -> Path:
    rows = [{"item_id": f"{system}-{key}", "system": system, "asker": "P1", "question_key": key, "subset": subset,
             "split": split, "latency_ms": latency, "interrupted": False, "interrupted_ms": 0.0,
             "answer_duration_s": 2.0}
            for system, offset in (("human", 0.0), ("bot", 100.0))
            for key, subset, split, latency in (("q1", "improvised", "dev", 400.0), ("q2", "improvised", "test", 600.0),
                                                ("q3", "naturalistic", "dev", 1000.0))
            for latency in [latency + offset]]
    path = tmp_path / "results.parquet"
    pl.DataFrame(rows, schema=RESULTS).write_parquet(path)
    return path


def test_eval_keeps_only_the_subset_and_split_asked(tmp_path):
    results = _results(tmp_path)
    metrics = evaluate_files([results], tmp_path / "all.json")
    assert metrics["systems"]["human"]["latency_ms"]["value"] == pytest.approx(2000 / 3)
    improvised = evaluate_files([results], tmp_path / "imp.json", subsets=("improvised",))
    assert improvised["filters"] == {"subset": ["improvised"], "split": None}
    assert improvised["systems"]["human"]["n_rows"] == 2
    assert improvised["systems"]["bot"]["latency_ms"]["value"] == pytest.approx(600.0)
    dev = evaluate_files([results], tmp_path / "dev.json", subsets=("improvised",), splits=("dev",))
    assert dev["systems"]["human"]["latency_ms"]["value"] == pytest.approx(400.0)
    with pytest.raises(ManifestError, match=r"results.parquet: no row of subset naturalistic; split test"):
        evaluate_files([results], tmp_path / "none.json", subsets=("naturalistic",), splits=("test",))
    bare = tmp_path / "bare.parquet"
    pl.read_parquet(results).drop("split").write_parquet(bare)
    with pytest.raises(ManifestError, match=r"bare.parquet: --split dev, but the results have no split values"):
        evaluate_files([bare], tmp_path / "bare.json", splits=("dev",))


def test_cli_eval_subset_and_split(tmp_path, capsys):
    results = _results(tmp_path)
    assert main(["eval", "naturalness", str(results), "--out", str(tmp_path / "m.json"), "--subset", "naturalistic",
                 "--split", "dev"]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["filters"] == {"subset": ["naturalistic"], "split": ["dev"]}
    assert metrics["systems"]["bot"]["n_rows"] == 1
    assert main(["eval", "naturalness", str(results), "--out", str(tmp_path / "n.json"), "--split", "train"]) == 2
    assert "no row of split train" in capsys.readouterr().err


def test_stance_results_carry_subset_and_split_and_eval_filters_them(tmp_path):
    from sdscore.protocols.naturalness.demo_stance_judge import MODEL, FakeStanceJudge
    from sdscore.protocols.naturalness.stance_scorer import StanceJudgeScorer

    clips = {}
    for name, amplitude in {"q": 0.1, "a": 0.1, "loud": 0.5}.items():
        clips[name] = str(tmp_path / f"{name}.wav")
        sf.write(clips[name], (amplitude * np.sin(2 * np.pi * 220.0 * np.arange(8000) / SR)).astype(np.float32), SR)
    rows = [{"item_id": f"{system}-{key}", "conversation_id": key, "subset": subset, "split": "dev",
             "system": system, "audio_path": clips["q"], "answer_audio_path": clips[answer],
             "transcript_question": "P1: well?"}
            for key, subset in (("c1", "improvised"), ("c2", "naturalistic"))
            for system, answer in ((None, "a"), ("loud-model", "loud"))]
    with FakeStanceJudge() as judge:
        scorer = StanceJudgeScorer(MODEL, judge.base_url, concurrency=2)
        try:
            out = scorer(pl.DataFrame(rows))
        finally:
            scorer.close()
    assert out["subset"].to_list() == ["improvised"] * 2 + ["naturalistic"] * 2
    assert out["split"].to_list() == ["dev"] * 4 and out["error"].null_count() == 4
    path = tmp_path / "stances.parquet"
    out.write_parquet(path)
    metrics = evaluate_files([path], tmp_path / "m.json", subsets=("naturalistic",))
    assert metrics["systems"]["loud-model"]["stances"]["n_rows"] == 1
    with pytest.raises(ManifestError, match=r"stances.parquet: no row of split test"):
        evaluate_files([path], tmp_path / "n.json", splits=("test",))


def test_a_conversations_table_adds_relationship_and_prompt_to_the_metadata(corpus, tmp_path):
    table = tmp_path / "conversations.csv"
    pl.DataFrame({"conversation_id": [A, B, "V09_S0009_I00000009"], "relationship": ["friends", None, "x"],
                  "conversation_prompt": ["Talk about your weekend.", "Talk about tea.", "x"],
                  "notes": ["ignored", "ignored", "ignored"]}).write_csv(table)
    with pytest.warns(UserWarning, match="skipped"):  # the malformed interactions of improvised/dev
        summary = select_dialogues(corpus, tmp_path / "out", splits=["test", "dev"], conversations=table)
    rows = {r["conversation_id"]: r for r in pl.read_csv(tmp_path / "out" / "metadata.csv").iter_rows(named=True)}
    assert (rows[A]["relationship"], rows[A]["conversation_prompt"]) == ("friends", "Talk about your weekend.")
    assert (rows[B]["relationship"], rows[B]["conversation_prompt"]) == (None, "Talk about tea.")
    assert summary["conversation_info"] == {"relationship": 1, "conversation_prompt": 2}
    # the CLI: the same table; a segments table of its own that disagrees skips that conversation
    labels = {A: "colleagues", B: None}
    segments = _table(tmp_path, corpus, relationship=lambda c: labels[c])
    out = tmp_path / "cli"
    assert main(["corpus", "select-dialogues", str(segments), "--out", str(out), "--conversations", str(table)]) == 1
    assert pl.read_csv(out / "metadata.csv")["conversation_id"].to_list() == [B]
    skipped = json.loads((out / "selection.json").read_text())["skipped"]
    assert skipped[0]["conversation_id"] == A
    assert f"conversation '{A}' has relationship 'friends' where {segments} has 'colleagues'" in skipped[0]["problems"][0]


@pytest.mark.parametrize("frame, match", [
    ({"conversation_id": ["a"], "notes": ["x"]}, r"conversations.csv: a conversations table needs conversation_id "
                                                 r"and one or more of relationship, conversation_prompt"),
    ({"conversation_id": ["a", "a"], "relationship": ["x", "y"]}, r"conversations.csv row 2: conversation 'a' is also "
                                                                  r"in row 1; one row per conversation"),
    ({"conversation_id": [None, "b"], "relationship": ["x", "y"]}, r"conversations.csv row 1: conversation_id is "
                                                                   r"missing"),
])
def test_bad_conversations_tables_are_refused(tmp_path, frame, match):
    from sdscore.protocols.naturalness.selection import read_conversations

    path = tmp_path / "conversations.csv"
    pl.DataFrame(frame, schema={c: pl.String for c in frame}).write_csv(path)
    with pytest.raises(ManifestError, match=match):
        read_conversations(path)


def test_a_conversations_table_that_names_no_conversation_of_the_corpus_is_refused(corpus, tmp_path):
    """Ids spelled otherwise (here without the V_S_I key's zeros) matched nothing, and every dialogue
    silently lacked its relationship and prompt."""
    table = tmp_path / "conversations.csv"
    pl.DataFrame({"conversation_id": ["V0_S1_I1", "V1_S2_I5"], "relationship": ["friends", "strangers"]}).write_csv(table)
    with pytest.raises(ManifestError, match=r"conversations\.csv: none of its 2 conversation_id values is a "
                                            r"conversation of .*seamless_interaction \(it has e\.g\. 'V0_S1_I1'; "
                                            r"the corpus 'V00_S0001_I00000001'\)"):
        select_dialogues(corpus, tmp_path / "out", conversations=table)
    assert not (tmp_path / "out").exists()

def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("spoil, match", [
    (lambda p: p.with_suffix(".json").write_text('{"metadata:transcript": [{"transcript": "x", "start": 1'
                                                 + "0" * 400 + ', "end": 2}]}'),
     r"P0002\.json transcript entry 0: start 1000+\.\.\. is not a non-negative number of seconds"),
    (lambda p: p.with_suffix(".json").write_text('{"metadata:transcript": [{"start": 1' + "0" * 5000 + "}]}"),
     r"P0002\.json: not JSON sdscore reads \(Exceeds the limit \(4300 digits\)"),
    (lambda p: p.with_suffix(".json").write_text("[" * 100_000 + "]" * 100_000),
     r"P0002\.json: not JSON sdscore reads \(nested too deeply\)"),
    (lambda p: _fifo(p.with_suffix(".json")), r"P0002\.json: not a regular file \(a FIFO"),
    (lambda p: _fifo(p.with_suffix(".wav")), r"P0002\.wav: not a regular file \(a FIFO"),
])
def test_hostile_participant_files_are_their_interactions_problem_not_a_crash_or_hang(tmp_path, spoil, match):
    root = tmp_path / "seamless"
    archive = root / "improvised" / "dev" / "0000"
    for key in (A, "V00_S0001_I00000009"):
        _bundle(archive, f"{key}_P0001", [_entry("Hello there.", 0.0, 1.0)], seconds=2.0, seed=1)
        _bundle(archive, f"{key}_P0002", [_entry("Hi.", 1.2, 2.0)], seconds=2.0, seed=2)
    spoil(archive / f"{A}_P0002")
    with unblocking(archive / f"{A}_P0002.json", archive / f"{A}_P0002.wav"):  # a blocked read fails, not hangs
        read = read_seamless(root)
    assert [key for key, _ in read.problems] == [A] and re.search(match, read.problems[0][1]), read.problems
    assert {s.conversation_id for s in read.segments} == {"V00_S0001_I00000009"}
