"""Dialogue selection against the authors' released rule, and each definition that changed with it.

The reference below is our own minimal re-implementation of `get_end_with_question` and the
metadata it feeds, as read in thomasthebaud/SPEAR-benchmark-code, bin/prepare_data_from_seamless.py
at commit 08ddcbf5be7248de76a49e1c4a25f2f336d76d2b (utterances of both speakers sorted by
(start, end, speaker, text); utterance i ending in '?' and followed by the other speaker's is a
question; the answer runs until the asker speaks again; N_max = 5 utterances including the
question; answers (their first start to the clip's end) of at least 1.0 s; dialogues named
<conversation>_<spk1>_<spk2>_<n>; context_end_time = the question's start and question_end_time
= its end, both relative to the clip's start; answer_start_time relative to the question's end;
speakers "spk1|spk2"; transcripts "speaker: text" joined by spaces). Nothing of theirs is imported.
"""

from __future__ import annotations

import math
import random

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from sdscore.protocols.naturalness.dialogue_turns import (
    Segment,
    find_dialogues,
    merge_turns,
    released_dialogues,
    select_conversation,
)
from sdscore.protocols.naturalness.selection import plan_dialogues, read_segments, select_dialogues

SR = 16000


# --- the reference ----------------------------------------------------------------------------------


def authors_selection(rows: list[dict]) -> dict[str, dict]:
    """The released selection of a segments table (rows: conversation_id, speaker, start, end, text),
    keyed by the authors' dialogue name; the dyad order is the order of each conversation's first rows."""
    conversations: dict[str, list[dict]] = {}
    for r in rows:
        conversations.setdefault(r["conversation_id"], []).append(r)
    out = {}
    for stem, group in conversations.items():
        spk1, spk2 = list(dict.fromkeys(r["speaker"] for r in group))[:2]
        turns = sorted(({**r, "text": r["text"].strip()} for r in group),
                       key=lambda t: (t["start"], t["end"], t["speaker"], t["text"]))
        idx = 0
        for row, turn in enumerate(turns[:-1]):
            if not (turn["text"].strip().endswith("?") and turn["speaker"] != turns[row + 1]["speaker"]):
                continue
            k = 1
            while row + k < len(turns) and turns[row + k]["speaker"] != turn["speaker"]:
                k += 1
            start_row = max(0, row - 5 + 1)
            selected = turns[start_row:row + k]
            start_audio, end_audio = selected[0]["start"], max(t["end"] for t in selected)
            answer_duration = end_audio - turns[row + 1]["start"]
            if answer_duration < 1.0:
                continue
            out[f"{stem}_{spk1}_{spk2}_{idx}"] = {
                "start_audio": start_audio, "end_audio": end_audio,
                "context_end_time": turn["start"] - start_audio, "question_end_time": turn["end"] - start_audio,
                "answer_duration": answer_duration, "answer_start_time": turns[row + 1]["start"] - turn["end"],
                "speakers": f"{spk1}|{spk2}",
                "transcript_question": " ".join(f"{t['speaker']}: {t['text']}" for t in turns[start_row:row + 1]),
                "transcript_answer": " ".join(f"{t['speaker']}: {t['text']}" for t in turns[row + 1:row + k]),
            }
            idx += 1
    return out


# --- a generated 200-conversation table ------------------------------------------------------------


def generated_rows(n: int = 200, seed: int = 30) -> list[dict]:
    """Random two-speaker conversations with the cases the rule must get right: overlaps, equal
    starts, short backchannels, long silences inside an answer, questions without context, answers
    near 1.0 s and times on a 10 ms grid (so 4.6 - 3.6 rounding occurs)."""
    rng = random.Random(seed)
    words = ["yes", "no", "well", "maybe", "right", "okay", "the", "train", "ticket", "so"]
    rows = []
    for c in range(n):
        names = rng.choice([("P0001", "P0002"), ("A", "B"), ("flite-slt", "hts-slt"), ("zed", "amy")])
        speaker, t = rng.randrange(2), rng.uniform(0.0, 0.5)
        for k in range(rng.randrange(4, 30)):
            if rng.random() < 0.55 or k == 1:  # both speakers speak
                speaker = 1 - speaker
            duration = rng.choice([rng.uniform(0.1, 0.5), rng.uniform(0.5, 4.0), 1.0])
            start = max(0.0, t + rng.choice([rng.uniform(-0.6, 0.0), rng.uniform(0.0, 1.5), 0.0]))
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 6)))
            text += "?" if rng.random() < 0.35 else rng.choice([".", "", "!"])
            rows.append({"conversation_id": f"conv{c:03d}", "speaker": names[speaker], "start": round(start, 2),
                         "end": round(start + duration, 2), "text": text, "audio_path": f"{names[speaker]}.wav",
                         "channel": None})
            t = max(t, start + duration) if rng.random() < 0.8 else start + duration
    return rows


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("generated")
    rows = generated_rows()
    pl.DataFrame(rows).write_parquet(folder / "segments.parquet")
    return folder, rows


def test_generated_table_covers_the_hard_cases(generated):
    _, rows = generated
    reference = authors_selection(rows)
    assert len({r["conversation_id"] for r in rows}) == 200 and len(reference) > 300
    assert any(d["context_end_time"] == 0 for d in reference.values())  # a question without context
    assert any(d["answer_start_time"] < 0 for d in reference.values())  # an overlapping answer
    assert any(d["transcript_answer"].count(": ") > 2 for d in reference.values())  # answers of many utterances
    starts = [(r["conversation_id"], r["start"]) for r in rows]
    assert len(starts) > len(set(starts))  # equal starts: the tie-break decides the order
    short = [r for r in rows if r["end"] - r["start"] < 1.0 <= round(r["end"] - r["start"], 9)]
    assert short  # durations a float rounding below 1.0 s


def test_generated_table_same_dialogues_and_boundaries_as_the_authors(generated):
    folder, rows = generated
    reference = authors_selection(rows)
    plan = plan_dialogues(read_segments(folder / "segments.parquet"))
    assert plan.skipped == {}
    ours = {d.item_id: d for dialogues in plan.dialogues.values() for d in dialogues}
    assert sorted(ours) == sorted(reference)
    for name, d in ours.items():
        ref = reference[name]
        got = {
            "start_audio": d.start, "end_audio": d.answer_end, "context_end_time": d.context_end - d.start,
            "question_end_time": d.question.end - d.start, "answer_duration": d.answer_duration,
            "answer_start_time": d.answer.start - d.question.end, "speakers": "|".join(d.speakers),
            "transcript_question": " ".join(f"{s.speaker}: {s.text}" for s in (*d.context, *d.question.segments)),
            "transcript_answer": " ".join(f"{s.speaker}: {s.text}" for s in d.answer.segments),
        }
        assert got == ref, name  # the same floats: the same arithmetic on the same table values


def test_generated_table_exported_clips_have_the_authors_bounds(tmp_path):
    rows = [r for r in generated_rows() if r["conversation_id"] < "conv015"]
    last = max(r["end"] for r in rows)
    rng = np.random.default_rng(0)
    for name in {r["speaker"] for r in rows}:
        sf.write(tmp_path / f"{name}.wav", (0.1 * rng.standard_normal(round((last + 1) * SR))).astype(np.float32),
                 SR, subtype="PCM_16")
    pl.DataFrame(rows).write_parquet(tmp_path / "segments.parquet")
    summary = select_dialogues(tmp_path / "segments.parquet", tmp_path / "out")
    reference = authors_selection(rows)
    metadata = pl.read_csv(tmp_path / "out" / "metadata.csv")
    assert summary["dialogues"] == metadata.height == len(reference) > 10
    _check_metadata_and_clips(metadata, reference, tmp_path / "out")


def _check_metadata_and_clips(metadata: pl.DataFrame, reference: dict, out) -> None:
    """Every metadata row equals the reference's within one sample; clip lengths as theirs (±1 sample)."""
    assert sorted(metadata["item_id"]) == sorted(reference)
    for row in metadata.iter_rows(named=True):
        ref = reference[row["item_id"]]
        for column in ("context_end_time", "question_end_time", "answer_duration", "answer_start_time"):
            assert row[column] == pytest.approx(ref[column], abs=1.0 / SR), (row["item_id"], column)
        for column in ("speakers", "transcript_question", "transcript_answer"):
            assert row[column] == ref[column], (row["item_id"], column)
        question = sf.info(out / row["audio_path"])
        answer = sf.info(out / row["answer_audio_path"])
        assert question.channels == 2 and question.samplerate == SR  # stereo, one channel per speaker
        assert abs(question.frames - round(ref["question_end_time"] * SR)) <= 1
        assert abs(answer.frames - round(ref["answer_duration"] * SR)) <= 1
        assert question.frames == round(row["question_end_time"] * SR)
        assert answer.frames == round(row["answer_duration"] * SR)


# --- the demo conversations (sdscore synth) ---------------------------------------------------------


@pytest.fixture(scope="module")
def demo_selection(tiny_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("released") / "out"
    summary = select_dialogues(tiny_corpus / "conversations.parquet", out)
    rows = pl.read_parquet(tiny_corpus / "conversations.parquet").to_dicts()
    return out, summary, rows


def test_demo_conversations_same_dialogues_and_clips_as_the_authors(demo_selection):
    out, summary, rows = demo_selection
    reference = authors_selection(rows)
    metadata = pl.read_csv(out / "metadata.csv")
    assert summary["skipped"] == [] and summary["dialogues"] == len(reference) > 0
    _check_metadata_and_clips(metadata, reference, out)


def test_demo_answer_with_a_long_pause_is_kept(demo_selection, tiny_corpus):
    """'Yeah, usually.' + a 1.2 s silence + the rest is one answer (the >= 0.5 s silence rule cut it
    to 'Yeah, usually.' and dropped it as shorter than 1 s)."""
    out, _, _ = demo_selection
    plan = plan_dialogues(read_segments(tiny_corpus / "conversations.parquet"))
    (d,) = [d for ds in plan.dialogues.values() for d in ds if d.answer.segments[0].text == "Yeah, usually."]
    first, second = d.answer.segments[:2]
    assert second.start - first.end == pytest.approx(1.2, abs=1e-6) and len(d.answer.segments) >= 2
    assert d.answer_duration > 5.0 and d.answer_duration == pytest.approx(d.answer.end - first.start)
    row = pl.read_csv(out / "metadata.csv").filter(pl.col("item_id") == d.item_id).row(0, named=True)
    assert row["answer_duration"] == pytest.approx(d.answer_duration, abs=1 / SR)
    assert sf.info(out / row["answer_audio_path"]).frames == round(row["answer_duration"] * SR)


# --- each definition that changed -------------------------------------------------------------------


def seg(speaker: str, start: float, end: float, text: str = "", conversation: str = "c") -> Segment:
    return Segment(conversation, speaker, start, end, text)


PAUSED_ANSWER = [seg("A", 0.0, 1.5, "Hi there."), seg("B", 1.8, 3.0, "Hello."), seg("A", 3.3, 4.5, "Will they?"),
                 seg("B", 4.8, 5.6, "Yeah, usually."), seg("B", 6.8, 10.8, "Once they find it they bring it.")]


@pytest.mark.parametrize("rule", ["released", "paper"])
def test_a_silence_does_not_end_the_answer(rule):
    (d,) = select_conversation(PAUSED_ANSWER, turn_rule=rule)
    assert d.answer.text == "Yeah, usually. Once they find it they bring it."
    assert d.answer_duration == pytest.approx(6.0)


def test_context_is_four_utterances_before_the_question():
    segments = [seg("AB"[k % 2], 2.0 * k, 2.0 * k + 1.5, f"u{k}.") for k in range(6)]
    segments += [seg("A", 12.0, 13.0, "Right?"), seg("B", 13.2, 15.0, "Sure.")]
    (d,) = released_dialogues(segments)
    assert [s.text for s in d.context] == ["u2.", "u3.", "u4.", "u5."]
    assert d.start == 4.0 and d.item_id == "c_A_B_0"
    (p,) = select_conversation(segments, turn_rule="paper")
    assert [s.text for s in p.context] == ["u2.", "u3.", "u4.", "u5."]


def test_context_end_time_is_the_questions_start(tmp_path):
    rows = _write_conversation(tmp_path, [("B", 0.2, 1.6, "Hello there."), ("A", 2.0, 3.0, "Ready?"),
                                          ("B", 3.2, 5.0, "Yes, let's go.")])
    select_dialogues(rows, tmp_path / "out")
    row = pl.read_csv(tmp_path / "out" / "metadata.csv").row(0, named=True)
    assert row["context_end_time"] == pytest.approx(1.8)  # 2.0 - 0.2 (the context's end, 1.4, before)
    assert row["question_end_time"] == pytest.approx(2.8) and row["answer_start_time"] == pytest.approx(0.2)


def test_question_clip_is_stereo_in_dyad_order_with_the_overlap(tmp_path):
    rows = _write_conversation(tmp_path, [("B", 0.2, 1.6, "Hello there."), ("A", 2.0, 3.0, "Ready?"),
                                          ("B", 2.8, 5.0, "Yes, let's go.")])
    select_dialogues(rows, tmp_path / "out")
    row = pl.read_csv(tmp_path / "out" / "metadata.csv").row(0, named=True)
    assert row["speakers"] == "B|A" and row["item_id"] == "c_B_A_0"  # dyad order: B's row comes first
    question, _ = sf.read(tmp_path / "out" / row["audio_path"], dtype="float32")
    b, _ = sf.read(tmp_path / "c-B.wav", dtype="float32")
    a, _ = sf.read(tmp_path / "c-A.wav", dtype="float32")
    s0, qe = round(0.2 * SR), round(3.0 * SR)
    assert question.shape == (qe - s0, 2)
    np.testing.assert_array_equal(question[:, 0], b[s0:qe])  # spk1 = B, the answerer: its overlap kept
    np.testing.assert_array_equal(question[:, 1], a[s0:qe])
    dialogue, _ = sf.read(tmp_path / "out" / row["dialogue_path"], dtype="float32")
    np.testing.assert_array_equal(dialogue[:, 0], a[s0:round(5.0 * SR)])  # asker, answerer
    np.testing.assert_array_equal(dialogue[:, 1], b[s0:round(5.0 * SR)])
    select_dialogues(rows, tmp_path / "masked", mask_answer_overlap=True)
    masked, _ = sf.read(tmp_path / "masked" / row["audio_path"], dtype="float32")
    np.testing.assert_array_equal(masked[:round(2.6 * SR), 0], b[s0:round(2.8 * SR)])
    assert not masked[round(2.6 * SR):, 0].any()
    np.testing.assert_array_equal(masked[:, 1], a[s0:qe])


def test_released_asker_backchannel_ends_the_answer_and_paper_ignores_it():
    segments = [seg("A", 0.0, 1.0, "Hi."), seg("B", 1.2, 2.0, "Hey."), seg("A", 2.2, 3.0, "Ready?"),
                seg("B", 3.2, 5.0, "Yes, and I"), seg("A", 4.0, 4.3, "mm-hm"), seg("B", 5.2, 7.0, "packed it all.")]
    (released,) = released_dialogues(segments)
    assert released.answer.text == "Yes, and I"  # the asker's 0.3 s 'mm-hm' ends it
    assert released.answer_duration == pytest.approx(1.8)
    (paper,) = select_conversation(segments, turn_rule="paper")
    assert paper.answer.text == "Yes, and I packed it all." and paper.answer_duration == pytest.approx(3.8)
    assert [b.text for b in paper.answer.backchannels] == ["mm-hm"]


def test_released_question_is_one_utterance_paper_the_whole_turn():
    segments = [seg("B", 0.0, 1.0, "Hi."), seg("A", 1.5, 2.5, "Ready?"), seg("A", 2.7, 3.5, "Are you?"),
                seg("B", 4.0, 6.0, "Good.")]
    (released,) = released_dialogues(segments)
    assert released.question.text == "Are you?" and [s.text for s in released.context] == ["Hi.", "Ready?"]
    (paper,) = select_conversation(segments, turn_rule="paper")
    assert paper.question.text == "Ready? Are you?" and [s.text for s in paper.context] == ["Hi."]


def test_released_keeps_an_opening_question_paper_needs_context():
    segments = [seg("A", 0.0, 1.0, "Ready?"), seg("B", 1.2, 3.0, "Yes.")]
    (d,) = released_dialogues(segments)
    assert d.context == () and d.start == 0.0 and d.item_id == "c_A_B_0"
    assert select_conversation(segments, turn_rule="paper") == []


def test_released_answer_ends_at_the_latest_end_and_counts_kept_dialogues_only():
    # B's 1-2 s answer lies inside A's question (0-5 s): the clip ends at 5 s, so it lasts 4 s
    segments = [seg("A", 0.0, 5.0, "Is it?"), seg("B", 1.0, 2.0, "Yes."), seg("A", 6.0, 7.0, "And that?"),
                seg("B", 7.1, 7.5, "No."), seg("A", 8.0, 9.0, "Why?"), seg("B", 9.2, 11.0, "Because.")]
    first, second = released_dialogues(segments)
    assert first.answer_end == 5.0 and first.answer_duration == 4.0 and first.item_id == "c_A_B_0"
    assert second.question.text == "Why?" and second.item_id == "c_A_B_1"  # 'And that?' (0.4 s) not counted


def test_released_answer_duration_is_compared_as_the_authors_do():
    # 4.6 - 3.6 is 0.9999999999999996: their code drops it, and so does the released rule
    segments = [seg("B", 0.0, 0.8, "Hi."), seg("A", 1.0, 3.0, "Ready?"), seg("B", 3.6, 4.6, "Yes.")]
    assert released_dialogues(segments) == []
    assert len(select_conversation(segments, turn_rule="paper")) == 1  # the paper rule allows 1 ns


def test_paper_turns_backchannels_and_floor_taking():
    segments = [seg("A", 0.0, 3.0, "I went to the shop,"), seg("B", 1.0, 1.3, "mm-hm"),
                seg("A", 3.3, 5.0, "and then home."), seg("B", 5.1, 5.4, "Oh?"), seg("A", 5.5, 7.0, "Yes, late."),
                seg("B", 7.2, 7.6, "So"), seg("B", 7.7, 9.0, "what did you buy?"), seg("A", 10.0, 12.0, "Bread.")]
    turns = merge_turns(segments)
    assert [(t.speaker, t.text) for t in turns] == [
        ("A", "I went to the shop, and then home. Yes, late."), ("B", "So what did you buy?"), ("A", "Bread.")]
    assert [b.text for b in turns[0].backchannels] == ["mm-hm", "Oh?"]
    (d,) = find_dialogues(turns, ("A", "B"))
    assert d.question.text == "So what did you buy?" and d.answer.text == "Bread." and d.item_id == "c_A_B_0"
    # an utterance of exactly backchannel_max is a backchannel; a longer one takes the floor
    assert len(merge_turns([seg("A", 0, 3, "a"), seg("B", 3.1, 3.6, "b"), seg("A", 3.7, 5, "c")])) == 1
    assert len(merge_turns([seg("A", 0, 3, "a"), seg("B", 3.1, 3.61, "b"), seg("A", 3.7, 5, "c")])) == 3


def test_selection_settings_are_checked(tmp_path):
    rows = _write_conversation(tmp_path, [("B", 0.2, 1.6, "Hello there."), ("A", 2.0, 3.0, "Ready?"),
                                          ("B", 3.2, 5.0, "Yes, let's go.")])
    with pytest.raises(ValueError, match="turn_rule must be one of released, paper, got 'turns'"):
        select_dialogues(rows, tmp_path / "out", turn_rule="turns")
    with pytest.raises(ValueError, match="mask_answer_overlap must be True or False, got 1"):
        select_dialogues(rows, tmp_path / "out", mask_answer_overlap=1)
    with pytest.raises(ValueError, match="turn_rule must be one of released, paper, got 'x'"):
        select_conversation(PAUSED_ANSWER, turn_rule="x")


def _write_conversation(folder, times: list[tuple[str, float, float, str]]):
    """One conversation 'c': each speaker's channel a tone (6 s), the rows as a segments CSV."""
    for k, speaker in enumerate(("A", "B")):
        t = np.arange(6 * SR) / SR
        sf.write(folder / f"c-{speaker}.wav", (0.3 * np.sin(2 * math.pi * (220 + 110 * k) * t)).astype(np.float32),
                 SR, subtype="PCM_16")
    rows = [{"conversation_id": "c", "speaker": s, "start": a, "end": b, "text": text, "audio_path": f"c-{s}.wav"}
            for s, a, b, text in times]
    pl.DataFrame(rows).write_csv(folder / "segments.csv")
    return folder / "segments.csv"
