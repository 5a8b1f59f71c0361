"""Scoring definitions taken from the authors' released code (issue 30): the asker read from their
metadata.csv ("spk1|spk2" and "speaker: text" transcripts), pitch normalised per asker, the
question's trailing silence on the asker's channel, both latency definitions, and the question's
arousal/valence/dominance from the question turn only.

References (thomasthebaud/SPEAR-benchmark-code): normalize_features_by_answered_speaker.py
(commit adf7f4e9: the answered speaker is the last "([A-Za-z0-9]+):" tag of transcript_question),
naturalness/extract_features.py (commit 059f232c: the question from context_end_time to the clip's
end, channels averaged; questions under 0.5 s skipped).
"""

from __future__ import annotations

import random
import re

import polars as pl
import pytest
from sdscore.audio import load
from sdscore.manifests import read_manifest
from sdscore.protocols.naturalness.evaluate import speaker_normalised
from sdscore.protocols.naturalness.results import RESULTS
from sdscore.protocols.naturalness.dialogue_activity import flat
from sdscore.protocols.naturalness.scorer import NaturalnessScorer, asker, question_turn
from sdscore.protocols.naturalness.selection import select_dialogues


def _their_answered_speaker(transcript_question: str) -> str:
    matches = re.findall(r"([A-Za-z0-9]+):", transcript_question)
    return matches[-1] if matches else ""


def test_asker_is_the_last_tag_of_transcript_question():
    assert asker("P0001|P0002", "P0002: Hi. P0001: Well. P0002: Ready?") == "P0002"
    assert asker("P0001|P0002", "P0001: Ready?") == "P0001"
    # ids with other characters: the whole id (their regex would keep only 'slt')
    assert asker("flite-slt|hts-slt", "hts-slt: So. flite-slt: Why?") == "flite-slt"
    assert asker("A|AB", "A: x AB: y?") == "AB" and asker("A|AB", "AB: x A: y?") == "A"
    assert asker("P0001|P0002", "no tags here?") is None and asker("P0001|P0002", None) is None
    assert asker("asker,answerer") == "asker"  # sdscore's earlier metadata
    assert asker(None) is None and asker("") is None
    rng = random.Random(1)
    for _ in range(500):  # their rule on Seamless ids
        tags = [rng.choice(["P0001", "P0002"]) for _ in range(rng.randrange(1, 6))]
        text = " ".join(f"{t}: {rng.choice(['yes.', 'a b', 'why?', 'P0003 said'])}" for t in tags)
        assert asker("P0001|P0002", text) == _their_answered_speaker(text)
    # a colon inside the text: theirs takes the word before it, ours only the dyad's names
    assert _their_answered_speaker("P0001: note: why?") == "note" and asker("P0001|P0002", "P0001: note: why?") == "P0001"


def test_pitch_is_normalised_per_asker_not_per_dyad():
    rows = [{"item_id": f"i{k}", "system": "human", "f0_min": f0, "f0_mean": f0,
             "asker": asker("P0001|P0002", question)} for k, (f0, question) in enumerate(
        [(100.0, "P0002: Hi. P0001: Ready?"), (300.0, "P0001: Hi. P0002: Why?"), (200.0, "P0001: So?")])]
    assert [r["asker"] for r in rows] == ["P0001", "P0002", "P0001"]
    out = speaker_normalised(pl.DataFrame(rows, schema=RESULTS))
    # P0001's mean f0 is 150 (100, 200), P0002's 300; one group for the dyad would divide all by 200
    assert out["f0_min"].to_list() == [pytest.approx(100 / 150), 1.0, pytest.approx(200 / 150)]


def test_question_trailing_silence_on_the_askers_channel():
    """The answerer starts 0.2 s before the question clip ends: on the mix the question has no
    trailing silence, on the asker's channel it has 0.5 s."""
    q = {"vad_segments": [[0.1, 3.0]], "vad_channels": [[[2.8, 3.0]], [[0.1, 2.5]]], "duration_s": 3.0}
    a = {"vad_segments": [[0.1, 1.0]]}
    notes: list[str] = []
    timing = NaturalnessScorer._timing(a, q, -0.2, 1, notes)
    assert timing["question_trailing_silence_s"] == pytest.approx(0.5)
    assert timing["latency_ms"] == pytest.approx(600.0)  # 0.5 + 0.1 + max(-0.2, 0)
    assert timing["latency_paper_ms"] is None and notes[0].startswith("latency_paper_ms: an interrupted answer")
    mix = NaturalnessScorer._timing(a, q, -0.2, None, [])
    assert mix["question_trailing_silence_s"] == 0.0 and mix["latency_ms"] == pytest.approx(100.0)
    on_time = NaturalnessScorer._timing(a, q, 0.3, 1, [])
    assert on_time["latency_ms"] == on_time["latency_paper_ms"] == pytest.approx(900.0)


def test_question_turn_bounds():
    row = {"audio_path": "q.wav", "context_end_time": 2.0, "question_end_time": 3.0}
    assert question_turn(row) == (("q.wav", 2.0), None)
    assert question_turn({**row, "context_end_time": 2.7})[1].startswith("the question turn lasts 0.3 s, under 0.5 s")
    assert question_turn({**row, "context_end_time": None})[1].startswith("no context_end_time")
    assert question_turn({**row, "audio_path": None})[1] == "no question clip (audio_path)"


@pytest.fixture(scope="module")
def selected_rows(tiny_corpus, tmp_path_factory):
    """Three dialogues selected from the demo conversations, read as a naturalness manifest."""
    out = tmp_path_factory.mktemp("selected") / "out"
    select_dialogues(tiny_corpus / "conversations.parquet", out)
    manifest = read_manifest(out / "metadata.csv", "naturalness")
    return manifest.head(3).with_columns(pl.lit(None, pl.String).alias("error"))


def test_scoring_the_authors_metadata(selected_rows, tmp_path):
    import torch
    import transformers
    from test_naturalness_score import _hf_classifier

    emotion = _hf_classifier(tmp_path / "avd", ["valence", "Arousal", "dominance"], regression=True)
    rows = pl.concat([selected_rows, selected_rows.head(1).with_columns(
        pl.lit("short-turn").alias("item_id"), (pl.col("question_end_time") - 0.3).alias("context_end_time"))])
    scorer = NaturalnessScorer(emotion_dir=str(emotion), jobs=1)
    try:
        out = scorer(rows)
        questions = scorer.features.questions(list(rows["audio_path"]))
    finally:
        scorer.close()
    assert out["error"].null_count() == out.height
    model = transformers.AutoModelForAudioClassification.from_pretrained(emotion)
    fe = transformers.AutoFeatureExtractor.from_pretrained(emotion)
    for row, source in list(zip(out.iter_rows(named=True), rows.iter_rows(named=True)))[:3]:
        text = source["transcript_question"]
        assert row["asker"] == max(source["speakers"].split("|"), key=lambda name: text.rfind(f"{name}: "))
        assert len(questions[source["audio_path"]]["vad_channels"]) == 2  # stereo: each channel's VAD
        channels = questions[source["audio_path"]]["vad_channels"]  # the turn-taking scores' voice activity
        asker_channel = source["speakers"].split("|").index(row["asker"])
        assert row["question_va_asker"] == flat(channels[asker_channel])
        assert row["question_va_answerer"] == flat(channels[1 - asker_channel])
        assert row["answer_offset_s"] == pytest.approx(source["question_end_time"] + source["answer_start_time"])
        assert row["answer_va"] is not None and "turn_taking_vap: no VAP checkpoint folder" in row["unavailable"]
        turn = load(source["audio_path"], 16000, offset=source["context_end_time"])  # both channels mixed
        with torch.inference_mode():
            raw = model(**fe([turn], sampling_rate=16000, return_tensors="pt")).logits[0].double().numpy()
        assert row["arousal_question"] == pytest.approx(raw[1], abs=1e-5)
        assert row["valence_question"] == pytest.approx(raw[0], abs=1e-5)
    last = out.row(-1, named=True)
    assert last["item_id"] == "short-turn" and last["arousal_question"] is None
    assert "question emotion: the question turn lasts 0.3 s" in last["unavailable"]
    assert last["arousal_answer"] == pytest.approx(out.row(0, named=True)["arousal_answer"])
