"""Turn-taking naturalness: the reconstructed dialogue's voice activity, the model-free n-gram
baseline against independent computations (scipy entropy, a plain-Python n-gram), its leave-one-
conversation-out fit, and its place in Table III, the LaTeX table and Fig. 2."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import polars as pl
import pytest
from scipy import stats
from sdscore.protocols.naturalness.dialogue_activity import (
    activity_columns,
    dialogue_frames,
    flat,
    pairs,
    question_frames,
)
from sdscore.protocols.naturalness.evaluate import evaluate_files, evaluate_naturalness, format_table
from sdscore.protocols.naturalness.latex_table import format_latex
from sdscore.protocols.naturalness.results import RESULTS
from sdscore.protocols.naturalness.turn_taking_ngram import (
    ADD_K,
    FRAME_HZ,
    ORDER,
    NgramModel,
    counts,
    histories,
    with_ngram_scores,
)

# --- the dialogue's activity ---------------------------------------------------------------------


def test_dialogue_frames_by_hand():
    # a 3-s question clip; the answer clip starts 0.3 s before the question ends (an interruption)
    built = dialogue_frames([0.0, 1.0, 2.0, 3.0], [1.2, 1.8, 2.8, 3.0], [0.1, 0.8],
                            question_duration_s=3.0, answer_offset_s=2.7, answer_duration_s=1.0, fps=10)
    expected_asker = np.zeros(37, bool)
    expected_asker[0:10] = expected_asker[20:30] = True
    expected_answerer = np.zeros(37, bool)
    expected_answerer[12:18] = True  # the context; the clip's own answerer speech from 2.8 s is replaced ...
    expected_answerer[28:35] = True  # ... by the answer clip's [0.1, 0.8] s put at 2.7 s
    np.testing.assert_array_equal(built.asker, expected_asker)
    np.testing.assert_array_equal(built.answerer, expected_answerer)
    assert built.window == (27, 37)
    np.testing.assert_array_equal(built.states, expected_asker + 2 * expected_answerer.astype(int))
    # an answer clip that would start before the question clip: the timeline starts at the answer
    early = dialogue_frames([0.0, 0.5], [], [0.0, 0.2], question_duration_s=0.5, answer_offset_s=-0.2,
                            answer_duration_s=0.4, fps=10)
    assert early.window == (0, 4) and early.asker.tolist() == [False, False, True, True, True, True, True]
    assert early.answerer.tolist()[:3] == [True, True, False]
    # the question clip alone, the human dialogue the baseline is fitted on
    assert question_frames([0.0, 0.2], [0.1, 0.3], 0.4, 10).tolist() == [1, 3, 2, 0]


def test_segments_flat_and_back():
    assert flat([[0.0, 1.5], [2.0, 2.5]]) == [0.0, 1.5, 2.0, 2.5] and flat(None) is None
    assert pairs([0.0, 1.5, 2.0, 2.5]) == [(0.0, 1.5), (2.0, 2.5)] and pairs(None) == []
    with pytest.raises(ValueError, match="odd number of bounds"):
        pairs([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="non-finite bound"):
        pairs([0.0, math.nan])


def test_activity_columns_need_a_stereo_question_clip_and_the_asker():
    row = {"question_end_time": 3.0, "answer_start_time": -0.3}
    answer = {"vad_segments": [[0.1, 0.8]]}
    stereo = {"duration_s": 3.05, "vad_channels": [[[1.2, 1.8]], [[0.0, 1.0], [2.0, 3.0]]]}
    columns, why = activity_columns(row, answer, stereo, 1)
    assert why is None and columns == {
        "question_duration_s": 3.05, "question_va_asker": [0.0, 1.0, 2.0, 3.0], "question_va_answerer": [1.2, 1.8],
        "answer_va": [0.1, 0.8], "answer_offset_s": pytest.approx(2.7)}
    # no question_end_time: the clip ends at the question's end
    assert activity_columns({"answer_start_time": 0.5}, answer, stereo, 0)[0]["answer_offset_s"] == 3.55
    assert activity_columns(row, answer, None, 1) == ({}, "no question clip (audio_path)")
    assert activity_columns(row, answer, {"duration_s": 3.0, "vad_segments": []}, 1)[1].startswith(
        "the question clip is not stereo")
    assert activity_columns(row, answer, stereo, None)[1].startswith("the asker's channel is unknown")
    assert activity_columns({"answer_start_time": None}, answer, stereo, 1) == ({}, "no answer_start_time")


# --- the n-gram against independent computations --------------------------------------------------


def test_order_one_surprisal_is_the_cross_entropy_scipy_computes():
    rng = np.random.default_rng(1)
    train = rng.choice(4, size=300, p=[0.5, 0.2, 0.2, 0.1])
    scored = rng.choice(4, size=80, p=[0.25, 0.25, 0.25, 0.25])
    model = NgramModel(order=1, k=0.5)
    model.add("train", train)
    got = model.score(scored, (0, len(scored)), "other").value
    c = np.bincount(train, minlength=4)
    p = (c + 0.5) / (c.sum() + 4 * 0.5)
    q = np.bincount(scored, minlength=4) / len(scored)
    assert got == pytest.approx(stats.entropy(q) + stats.entropy(q, p), rel=1e-12)  # H(q) + KL(q || p)


def _python_ngram(train: list[list[int]], sequence: list[int], window: tuple[int, int], order: int, k: float) -> float:
    """A plain-Python n-gram: counts of (previous order-1 states, state), silence before the start."""
    grams: Counter = Counter()
    for seq in train:
        padded = [0] * (order - 1) + list(seq)
        for t in range(len(seq)):
            grams[tuple(padded[t:t + order])] += 1
    padded = [0] * (order - 1) + list(sequence)
    total = 0.0
    for t in range(*window):
        history = tuple(padded[t:t + order - 1])
        seen = sum(grams[history + (s,)] for s in range(4))
        total += -math.log((grams[history + (sequence[t],)] + k) / (seen + 4 * k))
    return total / (window[1] - window[0])


@pytest.mark.parametrize("order", [2, 3, 5])
def test_surprisal_equals_a_plain_python_ngram_leaving_the_conversation_out(order):
    rng = np.random.default_rng(order)
    clips = {name: [rng.choice(4, size=int(rng.integers(5, 60))) for _ in range(2)] for name in "abc"}
    model = NgramModel(order=order, k=ADD_K)
    for name, sequences in clips.items():
        for seq in sequences:
            model.add(name, seq)
    sequence = rng.choice(4, size=40)
    for conversation in ("a", "b", "unseen"):
        train = [seq.tolist() for name, seqs in clips.items() if name != conversation for seq in seqs]
        expected = _python_ngram(train, sequence.tolist(), (12, 40), order, ADD_K)
        assert model.score(sequence, (12, 40), conversation).value == pytest.approx(expected, rel=1e-12)
    # batched equals one by one, in any order
    items = [(sequence, (12, 40), "a"), (clips["b"][0], (0, len(clips["b"][0])), "b"), (sequence, (0, 5), "c")]
    one_by_one = [model.score(*item).value for item in items]
    assert [s.value for s in model.scores(items)] == one_by_one
    assert [s.value for s in model.scores(items[::-1])] == one_by_one[::-1]


def test_histories_and_counts_by_hand():
    s = np.array([1, 1, 0, 2, 2, 3, 0])
    # order 3: (s[t-2], s[t-1]) in base 4, silence before the start
    assert histories(s, 3).tolist() == [0, 1, 5, 4, 2, 10, 11]
    assert counts(s, 1).tolist() == [[2, 2, 2, 1]]
    assert counts(s, 2).sum() == len(s) and counts(s, 2)[2, 3] == 1  # one 2 -> 3 transition


def test_empty_fit_and_window_and_bad_settings():
    model = NgramModel(order=2)
    model.add("only", np.array([0, 1, 1, 0]))
    assert model.score(np.array([0, 1]), (0, 2), "only").reason.startswith("no question clip of another conversation")
    assert model.score(np.array([0, 1]), (1, 1), "other").reason == "the answer window holds no frame"
    with pytest.raises(ValueError, match="order >= 1 and k > 0"):
        NgramModel(order=0)
    with pytest.raises(ValueError, match="order >= 1 and k > 0"):
        NgramModel(order=2, k=0)


# --- in the evaluation -----------------------------------------------------------------------------


def _dialogue(system: str, conversation: str, gap: float, answerer_extra: float = 0.0) -> dict:
    """One answer to a 6-s question clip of `conversation` (asker 0-2 s and 4-6 s, answerer 2.3-3.7 s),
    its speech `gap` s after the question's end."""
    return {"item_id": f"{system}-{conversation}", "system": system, "conversation_id": conversation,
            "asker": "A", "question_key": f"clips/{conversation}.wav", "answer_duration_s": 3.0,
            "question_duration_s": 6.0, "question_va_asker": [0.0, 2.0, 4.0, 6.0],
            "question_va_answerer": [2.3, 3.7 + answerer_extra], "answer_va": [gap, 3.0],
            "answer_offset_s": 6.0}


def _results(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=RESULTS)


def test_table_iii_turn_taking_column_leaves_each_conversation_out(tmp_path):
    human = [_dialogue("human", c, 0.3, i * 0.2) for i, c in enumerate("abcd")]
    late = [_dialogue("late-bot", c, 2.5, i * 0.2) for i, c in enumerate("abcd")]
    metrics = evaluate_naturalness(_results(human + late))
    scored = with_ngram_scores(_results(human + late), set())
    for row in scored.iter_rows(named=True):  # each row: the other conversations' clips only
        model = NgramModel(ORDER, ADD_K)
        for other in human:
            if other["conversation_id"] != row["conversation_id"]:
                model.add(other["conversation_id"], question_frames(
                    other["question_va_asker"], other["question_va_answerer"], 6.0, FRAME_HZ))
        built = dialogue_frames(row["question_va_asker"], row["question_va_answerer"], row["answer_va"],
                                question_duration_s=6.0, answer_offset_s=6.0, answer_duration_s=3.0, fps=FRAME_HZ)
        assert row["turn_taking_ngram"] == pytest.approx(model.score(built.states, built.window, "x").value)
    values = {name: m["turn_taking_ngram"] for name, m in metrics["systems"].items()}
    expected = scored.group_by("system").agg(pl.col("turn_taking_ngram").mean().alias("mean"),
                                             pl.col("turn_taking_ngram").std().alias("std"))
    for name, mean, std in expected.iter_rows():
        assert values[name]["value"] == pytest.approx(mean) and values[name]["std"] == pytest.approx(std)
        assert values[name]["n"] == 4
    # the late answers are less typical of these dialogues (0.3 s gaps) than the human ones
    assert values["late-bot"]["value"] > values["human"]["value"]
    assert metrics["paired_tests"]["late-bot"]["turn_taking_ngram"]["n_pairs"] == 4
    assert "turn_taking_ngram" in metrics["definitions"] and "nats per frame" in metrics["definitions"]["turn_taking_ngram"]
    assert "TT-ngram" in format_table(metrics)
    tex = format_latex(metrics)
    assert r"\multicolumn{2}{c}{Turn-Taking}" in tex and r"N-gram surpr.\ (nats)$\downarrow$" in tex
    # the per-row scores are the same however the rows are ordered (batched == one by one)
    shuffled = with_ngram_scores(_results((human + late)[::-1]), set())
    assert shuffled["turn_taking_ngram"].to_list()[::-1] == scored["turn_taking_ngram"].to_list()
    # Fig. 2 (top): per-answer histograms; the VAP one only where the Scorer gave VAP values
    path = tmp_path / "r.parquet"
    _results(human + late).write_parquet(path)
    drawn = evaluate_files([path], tmp_path / "m.json", plot=tmp_path / "figs")
    assert (tmp_path / "figs" / "fig2_turn_taking.png").stat().st_size > 1000
    assert drawn["figures"]["fig2_turn_taking"]["path"].endswith("fig2_turn_taking.png")
    assert drawn["figures"]["fig2_turn_taking_vap"]["skipped"].endswith("turn_taking_vap is null on every scored row")
    assert drawn["systems"]["human"]["turn_taking_vap"]["value"] is None
    vap = [{**row, "turn_taking_vap": 5.0 + 0.1 * i} for i, row in enumerate(human + late)]
    _results(vap).write_parquet(path)
    drawn = evaluate_files([path], tmp_path / "m2.json", plot=tmp_path / "figs2")
    assert (tmp_path / "figs2" / "fig2_turn_taking_vap.png").stat().st_size > 1000
    assert drawn["systems"]["late-bot"]["turn_taking_vap"] == {"value": pytest.approx(5.55), "n": 4,
                                                               "std": pytest.approx(np.std([5.4, 5.5, 5.6, 5.7], ddof=1))}
    assert drawn["paired_tests"]["late-bot"]["turn_taking_vap"]["n_pairs"] == 4


def test_turn_taking_nulls_carry_their_reason():
    # one conversation only: nothing is left to fit on
    alone = evaluate_naturalness(_results([_dialogue("human", "a", 0.3)]))["systems"]["human"]["turn_taking_ngram"]
    assert alone["value"] is None and "no question clip of another conversation" in alone["reason"]
    # a mono question clip: the scorer's note
    mono = {**_dialogue("bot", "b", 0.3), "question_va_asker": None,
            "unavailable": "turn-taking: the question clip is not stereo (one channel per speaker is needed)"}
    record = evaluate_naturalness(_results([mono]))["systems"]["bot"]["turn_taking_ngram"]
    assert record["value"] is None and "the question clip is not stereo" in record["reason"]
    # results written before the activity columns existed
    old = pl.DataFrame([{k: v for k, v in _dialogue("bot", "c", 0.3).items() if "va" not in k}])
    record = evaluate_naturalness(old)["systems"]["bot"]["turn_taking_ngram"]
    assert record["value"] is None and "score them again" in record["reason"]


def test_malformed_activity_is_an_error_naming_the_row():
    bad = {**_dialogue("bot", "b", 0.3), "answer_va": [0.1, 0.5, 0.9]}
    with pytest.raises(ValueError, match="results row 'bot-b': answer_va: .*odd number of bounds"):
        evaluate_naturalness(_results([_dialogue("human", "a", 0.3), bad]))


@pytest.mark.parametrize("column", ["question_duration_s", "answer_offset_s", "answer_duration_s"])
def test_a_duration_past_a_day_is_an_error_naming_the_row_not_a_huge_allocation(column):
    huge = {**_dialogue("bot", "b", 0.3), column: -1e12 if column == "answer_offset_s" else 1e12}
    with pytest.raises(ValueError, match=rf"results row 'bot-b': {column} -?1e\+12 s is beyond 86400 s"):
        evaluate_naturalness(_results([_dialogue("human", "a", 0.3), huge]))
