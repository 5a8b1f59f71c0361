"""SPEARBench dialogue selection: the paper's turn rule, valid dialogues, clip export and bad-row handling.

The released rule (the default) against a re-implementation of the authors' code, and each
definition that changed with it: tests/test_naturalness_selection_released.py."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import polars as pl
import pytest
import soundfile as sf
from sdscore import audio
from sdscore.cli import main
from sdscore.errors import AudioError, ManifestError
from sdscore.manifests import read_manifest
from sdscore.protocols.naturalness.dialogue_turns import (
    Segment,
    find_dialogues,
    merge_turns,
)
from sdscore.protocols.naturalness.selection import (
    METADATA_COLUMNS,
    select_dialogues,
)

SR = 16000


def seg(speaker: str, start: float, end: float, text: str = "", conversation: str = "c") -> Segment:
    return Segment(conversation, speaker, start, end, text)


def texts(turns) -> list[tuple[str, str]]:
    return [(t.speaker, t.text) for t in turns]


# --- turns ----------------------------------------------------------------------------------------


def test_backchannel_inside_an_utterance_or_a_short_gap_is_absorbed():
    segments = [
        seg("A", 0.0, 3.0, "I went to the shop,"),
        seg("B", 1.0, 1.3, "mm-hm"),  # inside A's utterance
        seg("A", 3.3, 5.0, "and then home."),
        seg("B", 3.05, 3.25, "yeah"),  # in A's 0.3 s silence
        seg("B", 5.4, 7.0, "Nice."),
    ]
    turns = merge_turns(segments)
    assert texts(turns) == [("A", "I went to the shop, and then home."), ("B", "Nice.")]
    assert [b.text for b in turns[0].backchannels] == ["mm-hm", "yeah"]


def test_a_silence_never_splits_a_turn():
    # the paper: two consecutive turns are from different speakers (the >= 0.5 s silence rule is gone)
    assert texts(merge_turns([seg("A", 0.0, 1.0, "one"), seg("A", 1.49, 2.0, "two")])) == [("A", "one two")]
    assert texts(merge_turns([seg("A", 0.0, 1.0, "one"), seg("A", 4.0, 5.0, "two")])) == [("A", "one two")]


def test_other_speaker_ends_a_turn_unless_short():
    # 0.5 s is not over backchannel_max: a backchannel; 0.6 s takes the floor
    turns = merge_turns([seg("A", 0.0, 3.0, "a1"), seg("B", 1.0, 1.5, "b"), seg("A", 3.2, 4.0, "a2")])
    assert texts(turns) == [("A", "a1 a2")]
    turns = merge_turns([seg("A", 0.0, 3.0, "a1"), seg("B", 1.0, 1.6, "b"), seg("A", 3.2, 4.0, "a2")])
    assert texts(turns) == [("A", "a1"), ("B", "b"), ("A", "a2")]
    # short, but A does not hold the floor past it: B's reply starts B's turn
    turns = merge_turns([seg("A", 0.0, 3.0, "q?"), seg("B", 2.9, 3.2, "yes"), seg("B", 3.3, 5.0, "it is")])
    assert texts(turns) == [("A", "q?"), ("B", "yes it is")]
    # short, in A's silence: A speaks again before B takes the floor, so it is a backchannel
    turns = merge_turns([seg("A", 0.0, 2.0, "a1"), seg("B", 2.1, 2.4, "mm"), seg("A", 2.6, 4.0, "a2")])
    assert texts(turns) == [("A", "a1 a2")] and [b.text for b in turns[0].backchannels] == ["mm"]
    turns = merge_turns([seg("A", 0.0, 2.0, "a1"), seg("B", 2.1, 2.4, "mm"), seg("A", 2.4, 4.0, "a2")])
    assert texts(turns) == [("A", "a1 a2")]


def test_overlapping_answer_ends_the_question_turn():
    segments = [seg("B", 0.0, 2.0, "Hi."), seg("A", 2.3, 4.0, "Ready?"), seg("B", 3.6, 6.0, "Yes, let's go.")]
    turns = merge_turns(segments)
    assert texts(turns) == [("B", "Hi."), ("A", "Ready?"), ("B", "Yes, let's go.")]
    (dialogue,) = find_dialogues(turns, ("B", "A"))
    assert dialogue.answer.start - dialogue.question.end == pytest.approx(-0.4)
    assert dialogue.item_id == "c_B_A_0"


def test_three_speakers_are_refused_naming_the_row():
    segments = [seg("A", 0, 1), seg("B", 1.5, 2), Segment("c", "C", 3, 4, "", label="t.csv row 3")]
    with pytest.raises(ManifestError, match=r"t.csv row 3: third speaker 'C' in conversation 'c' \(after 'A', 'B'\)"):
        merge_turns(segments)


# --- dialogues -------------------------------------------------------------------------------------


def alternating(n_turns: int, per_turn: int = 1, answer_seconds: float = 2.0, question_at: int | None = None):
    """n_turns alternating A/B turns of per_turn utterances; turn question_at ends with '?'."""
    segments, t = [], 0.0
    for k in range(n_turns):
        speaker = "AB"[k % 2]
        for i in range(per_turn):
            duration = answer_seconds if k == (question_at or -2) + 1 else 1.0
            last = i == per_turn - 1
            segments.append(seg(speaker, t, t + duration, f"t{k}u{i}" + ("?" if k == question_at and last else ".")))
            t += duration + 0.2
        t += 0.6
    return segments


AB = ("A", "B")


def test_context_is_capped_at_the_latest_segments():
    segments = alternating(5, per_turn=2, question_at=3)
    (dialogue,) = find_dialogues(merge_turns(segments), AB)
    assert [s.text for s in dialogue.context] == ["t1u0.", "t1u1.", "t2u0.", "t2u1."]
    (short,) = find_dialogues(merge_turns(segments), AB, max_context_segments=2)
    assert [s.text for s in short.context] == ["t2u0.", "t2u1."]
    assert short.question.text == "t3u0. t3u1?" and short.answer.text == "t4u0. t4u1."


def test_question_needs_context_an_answer_by_the_other_speaker_and_a_long_enough_answer():
    assert find_dialogues(merge_turns(alternating(2, question_at=0)), AB) == []  # no context
    assert len(find_dialogues(merge_turns(alternating(3, question_at=1)), AB)) == 1
    assert find_dialogues(merge_turns(alternating(2, question_at=1)), AB) == []  # no answer
    assert find_dialogues(merge_turns(alternating(3, question_at=1, answer_seconds=0.99)), AB) == []
    assert len(find_dialogues(merge_turns(alternating(3, question_at=1, answer_seconds=1.0)), AB)) == 1
    assert find_dialogues(merge_turns(alternating(3, question_at=1, answer_seconds=1.5)), AB,
                          min_answer_seconds=2) == []
    # the asker goes on after a long silence: one turn that does not end in '?'
    same = [seg("B", 0, 1, "Hi."), seg("A", 1.5, 2.5, "Ready?"), seg("A", 3.5, 6.0, "Let's go."), seg("B", 6.2, 9, "Ok.")]
    assert texts(merge_turns(same))[1] == ("A", "Ready? Let's go.")
    assert find_dialogues(merge_turns(same), ("B", "A")) == []


def test_question_is_the_merged_turn_text():
    segments = [seg("B", 0, 1, "Hi."), seg("A", 1.5, 2.5, "Ready?"), seg("A", 2.7, 3.5, "I am."),
                seg("B", 4, 6, "Good.")]
    assert find_dialogues(merge_turns(segments), ("B", "A")) == []
    segments[2] = seg("A", 2.7, 3.5, "  Are you?  ")
    (dialogue,) = find_dialogues(merge_turns(segments), ("B", "A"))
    assert dialogue.question.text == "Ready? Are you?"


# --- end to end on the synthetic conversations ------------------------------------------------------


@pytest.fixture(scope="module")
def selected(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("selected") / "out"
    summary = select_dialogues(tiny_corpus / "conversations.parquet", out)
    truth = json.loads((tiny_corpus / "corpus.json").read_text())["truth"]["conversations"]
    return out, summary, truth


def test_selection_finds_exactly_the_synthetic_truth(selected, tiny_corpus):
    out, summary, truth = selected
    assert truth["settings"] == {"turn_rule": "released", "max_context_segments": 4, "min_answer_seconds": 1.0}
    assert summary["skipped"] == [] and summary["conversations"] == len(truth["conversations"])
    metadata = pl.read_csv(out / "metadata.csv")
    assert tuple(metadata.columns) == METADATA_COLUMNS
    assert sorted(metadata["item_id"]) == sorted(d["item_id"] for d in truth["dialogues"])
    assert summary["dialogues"] == len(truth["dialogues"]) > 0
    by_id = {d["item_id"]: d for d in truth["dialogues"]}
    for row in metadata.iter_rows(named=True):
        d = by_id[row["item_id"]]
        asker, answerer = d["asker"], d["answerer"]
        assert row["transcript_question"].endswith(f"{asker}: {d['question']}")
        assert row["transcript_question"].count(": ") == d["context_segments"] + 1
        assert row["transcript_answer"].startswith(f"{answerer}: ")
        assert row["transcript_answer"].replace(f"{answerer}: ", "") == d["answer"]
        assert set(row["speakers"].split("|")) == {asker, answerer} and row["finish_reason"] == "stop"
        assert row["context_end_time"] == pytest.approx(d["question_start_s"] - d["context_start_s"], abs=1e-6)
        assert row["question_end_time"] == pytest.approx(d["question_end_s"] - d["context_start_s"], abs=1e-6)
        assert row["answer_start_time"] == pytest.approx(d["answer_start_s"] - d["question_end_s"], abs=1e-6)
        assert row["answer_duration"] == pytest.approx(d["answer_end_s"] - d["answer_start_s"], abs=1e-6)
    assert (metadata["answer_start_time"] < 0).any()  # an overlapping answer
    assert {d["context_segments"] for d in truth["dialogues"]} >= {4}  # the cap is reached


def test_metadata_reads_as_the_naturalness_protocol(selected):
    out, _, _ = selected
    frame = read_manifest(out / "metadata.csv")
    assert frame.height == pl.read_csv(out / "metadata.csv").height
    manifest = read_manifest(out / "metadata.csv", "naturalness", errors="collect")
    assert "error" not in manifest.columns or manifest["error"].is_null().all()
    batch = audio.load_many([*frame["audio_path"], *frame["answer_audio_path"], *frame["dialogue_path"]])
    assert batch.errors == [None] * (3 * frame.height)


def test_clips_match_the_metadata_and_the_channels(selected, tiny_corpus):
    out, _, truth = selected
    segments = pl.read_parquet(tiny_corpus / "conversations.parquet")
    for row in pl.read_csv(out / "metadata.csv").iter_rows(named=True):
        d = next(d for d in truth["dialogues"] if d["item_id"] == row["item_id"])
        channel_of = {
            speaker: audio.load(tiny_corpus / path, SR)
            for speaker, path in segments.filter(pl.col("conversation_id") == row["conversation_id"])
            .select("speaker", "audio_path").unique().rows()
        }
        spk1, spk2 = row["speakers"].split("|")
        asker, answerer = channel_of[d["asker"]], channel_of[d["answerer"]]
        s0, qe = round(d["context_start_s"] * SR), round(d["question_end_s"] * SR)
        a0, ae = round(d["answer_start_s"] * SR), round(d["answer_end_s"] * SR)

        question, sr = sf.read(out / row["audio_path"], dtype="float32")
        assert sr == SR and question.shape == (qe - s0, 2)  # stereo: one channel per speaker, dyad order
        assert len(question) == round(row["question_end_time"] * SR)
        np.testing.assert_array_equal(question[:, 0], channel_of[spk1][s0:qe])  # 16-bit in, 16-bit out: exact
        np.testing.assert_array_equal(question[:, 1], channel_of[spk2][s0:qe])

        answer, _ = sf.read(out / row["answer_audio_path"], dtype="float32")
        assert len(answer) == round(row["answer_duration"] * SR) == ae - a0
        np.testing.assert_array_equal(answer, answerer[a0:ae])

        dialogue, _ = sf.read(out / row["dialogue_path"], dtype="float32")
        assert dialogue.shape == (max(ae, qe) - s0, 2)
        np.testing.assert_array_equal(dialogue[:, 0], asker[s0:max(ae, qe)])
        np.testing.assert_array_equal(dialogue[:, 1], answerer[s0:max(ae, qe)])
        assert row["context_end_time"] <= row["question_end_time"]


def test_cli_selects_refuses_an_existing_folder_and_overwrites(tiny_corpus, tmp_path, capsys):
    table = tiny_corpus / "conversations.parquet"
    out = tmp_path / "out"
    assert main(["corpus", "select-dialogues", str(table), "--out", str(out)]) == 0
    n = pl.read_csv(out / "metadata.csv").height
    assert f"{n} dialogues from 3 of 3 conversations" in " ".join(capsys.readouterr().err.split())
    assert main(["corpus", "select-dialogues", str(table), "--out", str(out)]) == 2
    assert "--out exists (an earlier sdscore output); pass --overwrite" in " ".join(capsys.readouterr().err.split())
    # a file sdscore did not write there keeps the folder from being replaced, even with --overwrite
    stale = out / "audio" / "answer" / "stale.wav"
    stale.write_bytes(b"")
    assert main(["corpus", "select-dialogues", str(table), "--out", str(out), "--overwrite"]) == 2
    assert "sdscore did not write there (e.g. audio/answer/stale.wav)" in " ".join(capsys.readouterr().err.split())
    assert stale.exists() and pl.read_csv(out / "metadata.csv").height == n
    stale.unlink()
    assert main(["corpus", "select-dialogues", str(table), "--out", str(out), "--overwrite",
                 "--min-answer-seconds", "100"]) == 0
    assert pl.read_csv(out / "metadata.csv").height == 0
    assert not list((out / "audio").rglob("*.wav"))
    assert json.loads((out / "selection.json").read_text())["settings"]["min_answer_seconds"] == 100


# --- hand-built tables and audio --------------------------------------------------------------------


def tone(seconds: float, hz: float, seed: int) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    rng = np.random.default_rng(seed)
    return (0.3 * np.sin(2 * math.pi * hz * t) + 0.01 * rng.standard_normal(len(t))).astype(np.float32)


def write_conversation(folder, name: str, stereo: bool = False) -> list[dict]:
    """Channel audio for one conversation (A asks at 2.0-3.0 s, B answers 3.2-5.0 s) and its rows."""
    a, b = tone(6.0, 220, 1), tone(6.0, 330, 2)
    a[round(3.0 * SR):] = 0
    if stereo:
        sf.write(folder / f"{name}.wav", np.stack([a, b], axis=1), SR, subtype="PCM_16")
        paths, channels = (f"{name}.wav", f"{name}.wav"), (0, 1)
    else:
        sf.write(folder / f"{name}-a.wav", a, SR, subtype="PCM_16")
        sf.write(folder / f"{name}-b.wav", b, SR, subtype="PCM_16")
        paths, channels = (f"{name}-a.wav", f"{name}-b.wav"), (None, None)
    times = [("B", 0.2, 1.6, "Hello there."), ("A", 2.0, 3.0, "Ready?"), ("B", 3.2, 5.0, "Yes, let's go.")]
    return [{"conversation_id": name, "speaker": spk, "start": s, "end": e, "text": text,
             "audio_path": paths[spk == "B"], "channel": channels[spk == "B"]} for spk, s, e, text in times]


def test_bad_rows_skip_their_conversation_and_name_the_row(tmp_path):
    rows = write_conversation(tmp_path, "good") + write_conversation(tmp_path, "bad")
    rows[4]["end"] = 1.5  # table row 5: end before start
    pl.DataFrame(rows).write_csv(tmp_path / "segments.csv")
    with pytest.warns(UserWarning, match=r"conversation 'bad' skipped: .*segments.csv row 5: end 1.5 is before start 2"):
        summary = select_dialogues(tmp_path / "segments.csv", tmp_path / "out")
    assert summary["dialogues"] == 1 and summary["conversations"] == 2
    assert summary["skipped"] == [{"conversation_id": "bad", "problems": [
        f"{tmp_path / 'segments.csv'} row 5: end 1.5 is before start 2"]}]
    assert pl.read_csv(tmp_path / "out" / "metadata.csv")["conversation_id"].to_list() == ["good"]
    with pytest.raises(ManifestError, match="segments.csv row 5: end 1.5 is before start 2"):
        select_dialogues(tmp_path / "segments.csv", tmp_path / "out2", errors="raise")


def write_csv(path, rows: list[dict]) -> None:
    """Rows as CSV with every cell as text (None: an empty cell)."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([{k: "" if v is None else v for k, v in r.items()} for r in rows])


@pytest.mark.parametrize(("column", "value", "message"), [
    ("start", "-1.0", "start -1 is negative"),
    ("end", "nan", "end is nan"),
    ("end", None, "end is missing"),
    ("start", "soon", "start 'soon' is not a number"),
    ("speaker", None, "speaker is missing"),
    ("conversation_id", " ", "conversation_id is missing"),
    ("audio_path", None, "audio_path is missing"),
    ("speaker", "A|B", "speaker 'A|B' contains '|'"),
    ("speaker", "P1:", "speaker 'P1:' contains ':'"),
    ("channel", "-1", "unknown channel '-1'"),
    ("channel", "0.5", "unknown channel '0.5'"),
    ("channel", "left", "unknown channel 'left'"),
])
def test_each_bad_cell_is_named(tmp_path, column, value, message):
    rows = write_conversation(tmp_path, "c")
    rows[1][column] = value
    write_csv(tmp_path / "segments.csv", rows)
    with pytest.raises(ManifestError, match=f"segments.csv row 2: {message}"):
        select_dialogues(tmp_path / "segments.csv", tmp_path / "out", errors="raise")


def test_jsonl_rows_are_named_by_row_and_line(tmp_path):
    rows = write_conversation(tmp_path, "c")
    rows[1]["start"] = -2
    lines = [json.dumps(r) for r in rows]
    (tmp_path / "segments.jsonl").write_text(lines[0] + "\n\n" + "\n".join(lines[1:]) + "\n")
    with pytest.raises(ManifestError, match=r"segments.jsonl row 2 \(line 3\): start -2 is negative"):
        select_dialogues(tmp_path / "segments.jsonl", tmp_path / "out", errors="raise")


def test_audio_problems_name_the_rows(tmp_path):
    rows = write_conversation(tmp_path, "c")
    rows[2]["audio_path"] = rows[0]["audio_path"] = "missing.wav"
    pl.DataFrame(rows).write_parquet(tmp_path / "segments.parquet")
    with pytest.warns(UserWarning, match=r"segments.parquet row 1 \(and 1 more rows of speaker 'B'\): .*missing.wav"):
        summary = select_dialogues(tmp_path / "segments.parquet", tmp_path / "out")
    assert summary["dialogues"] == 0 and summary["skipped"][0]["conversation_id"] == "c"
    with pytest.raises(AudioError, match="missing.wav"):
        select_dialogues(tmp_path / "segments.parquet", tmp_path / "out", overwrite=True, errors="raise")

    rows = write_conversation(tmp_path, "late")
    rows[2]["end"] = 6.2  # the file lasts 6.0 s
    pl.DataFrame(rows).write_parquet(tmp_path / "late.parquet")
    with pytest.raises(AudioError, match=r"late.parquet row 3: ends at 6.2 s, after the end of its audio"):
        select_dialogues(tmp_path / "late.parquet", tmp_path / "out3", errors="raise")


def test_channels_of_a_multichannel_file(tmp_path):
    rows = write_conversation(tmp_path, "st", stereo=True)
    pl.DataFrame(rows).write_csv(tmp_path / "segments.tsv", separator="\t")
    summary = select_dialogues(tmp_path / "segments.tsv", tmp_path / "out")
    assert summary["dialogues"] == 1
    row = pl.read_csv(tmp_path / "out" / "metadata.csv").row(0, named=True)
    stereo, _ = sf.read(tmp_path / "st.wav", dtype="float32")
    answer, _ = sf.read(tmp_path / "out" / row["answer_audio_path"], dtype="float32")
    np.testing.assert_array_equal(answer, stereo[round(3.2 * SR):round(5.0 * SR), 1])
    assert row["answer_start_time"] == pytest.approx(0.2) and row["context_end_time"] == pytest.approx(1.8)
    assert row["question_end_time"] == pytest.approx(2.8) and row["speakers"] == "B|A"

    rows[0]["channel"] = rows[2]["channel"] = 3
    pl.DataFrame(rows).write_csv(tmp_path / "bad.csv")
    with pytest.raises(AudioError, match=r"bad.csv row 1 \(and 1 more rows of speaker 'B'\): .*unknown channel 3 "
                                         r"\(the file has 2 channel\(s\)\)"):
        select_dialogues(tmp_path / "bad.csv", tmp_path / "out2", errors="raise")


def test_table_and_setting_errors(tmp_path):
    rows = write_conversation(tmp_path, "c")
    pl.DataFrame(rows).drop("text").write_csv(tmp_path / "notext.csv")
    with pytest.raises(ManifestError, match="missing column.* text; a segments table needs"):
        select_dialogues(tmp_path / "notext.csv", tmp_path / "out")
    with pytest.raises(ManifestError, match="no such file"):
        select_dialogues(tmp_path / "nope.csv", tmp_path / "out")
    for kw, message in [({"max_context_segments": 0}, "max_context_segments must be an integer >= 1"),
                        ({"min_answer_seconds": -1}, "min_answer_seconds must be a non-negative"),
                        ({"backchannel_max": float("nan")}, "backchannel_max must be a non-negative"),
                        ({"errors": "ignore"}, "errors must be 'skip' or 'raise'"),
                        ({"sample_rate": 0}, "sample_rate must be in")]:
        with pytest.raises(ValueError, match=message):
            select_dialogues(tmp_path / "notext.csv", tmp_path / "out", **kw)
    shared = write_conversation(tmp_path, "s")
    shared[1]["audio_path"] = shared[0]["audio_path"]
    pl.DataFrame(shared).write_csv(tmp_path / "shared.csv")
    with pytest.raises(ManifestError, match="shared.csv row 2: speakers 'B' and 'A' share the audio"):
        select_dialogues(tmp_path / "shared.csv", tmp_path / "out", errors="raise")
    moved = write_conversation(tmp_path, "m")
    moved[2]["audio_path"] = "m-a.wav"
    pl.DataFrame(moved).write_csv(tmp_path / "moved.csv")
    with pytest.raises(ManifestError, match="moved.csv row 3: speaker 'B' has audio .*m-a.wav.* here but"):
        select_dialogues(tmp_path / "moved.csv", tmp_path / "out", errors="raise")
    three = write_conversation(tmp_path, "t") + [{**rows[2], "conversation_id": "t", "speaker": "C", "start": 5.5,
                                                    "end": 5.9}]
    pl.DataFrame(three).write_csv(tmp_path / "three.csv")
    with pytest.warns(UserWarning, match="three.csv row 4: third speaker 'C'"):
        summary = select_dialogues(tmp_path / "three.csv", tmp_path / "out")
    assert summary["dialogues"] == 0 and summary["skipped"][0]["conversation_id"] == "t"
