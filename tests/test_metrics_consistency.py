"""Speaker-consistency metrics against SpeakerSleuth Table 2, hand-computed cases and sklearn."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import f1_score, ndcg_score, precision_score, recall_score

from sdscore.metrics.consistency import (
    LOCALIZATION_KEYS,
    RELEVANCE,
    SCENARIOS,
    balanced,
    consistency_summary,
    detection_accuracy,
    discrimination_accuracy,
    exact_match,
    localization_scores,
    localization_summary,
    ndcg_at_k,
)

# SpeakerSleuth Table 2 (%): S1, S2, S3 detection accuracy, Bal; S1 F1, S2 F1, S3 F1, Bal F1.
TABLE2 = {
    "GPT-4o-audio": (72.9, 32.8, 29.5, 52.0, 71.5, 15.0, 11.1, 42.3),
    "Gemini-2.5-Pro": (73.9, 71.6, 39.3, 64.7, 65.2, 62.5, 47.5, 60.1),
    "Gemini-2.5-Flash": (97.4, 45.5, 12.0, 63.1, 64.4, 62.3, 45.0, 59.0),
    "Gemma-3n-E4B": (51.2, 50.6, 48.4, 50.4, 0.0, 32.0, 32.0, 16.0),
    "Omnivinci": (81.6, 46.1, 20.9, 57.5, 48.3, 23.6, 15.2, 33.8),
    "Pairwise (ECAPA)": (36.0, 88.4, 86.3, 61.7, 36.0, 46.5, 43.5, 40.5),
    "Centroid (WavLM)": (87.5, 38.2, 37.7, 62.7, 87.5, 31.6, 31.0, 59.4),
    "Reference (ECAPA)": (8.5, 95.5, 94.5, 51.8, 8.5, 39.0, 34.6, 22.6),
    # Reference (WavLM) is left out: its printed Bal F1 48.3 differs by 0.15 from ½(79.3 + (16.9 + 17.1)/2)
    # = 48.15, more than the inputs' rounding allows — an inconsistency in the paper's table.
}
ROUNDING = 0.1  # inputs rounded to 0.1 move Bal by ≤ 0.05, and Bal itself is rounded to 0.1


def test_gpt4o_audio_detection_row_from_instances():
    """1000 instances per scenario with the row's accuracies → Bal 52.0."""
    scenarios, predictions = [], []
    for scenario, percent in zip(SCENARIOS, (72.9, 32.8, 29.5)):
        n_right = round(percent * 10)
        truth = scenario != "S1"
        scenarios += [scenario] * 1000
        predictions += [truth] * n_right + [not truth] * (1000 - n_right)
    result = detection_accuracy(scenarios, predictions)
    assert (result["S1"], result["S2"], result["S3"]) == pytest.approx((0.729, 0.328, 0.295))
    assert round(100 * result["balanced"], 1) == 52.0


@pytest.mark.parametrize("model", list(TABLE2))
def test_balancing_reproduces_table2(model):
    s1, s2, s3, bal, f1_s1, f1_s2, f1_s3, bal_f1 = TABLE2[model]
    assert balanced(s1, s2, s3) == pytest.approx(bal, abs=ROUNDING)
    assert balanced(f1_s1, f1_s2, f1_s3) == pytest.approx(bal_f1, abs=ROUNDING)


def test_balanced_is_none_when_a_scenario_is_missing():
    assert balanced(0.5, None, 0.2) is None
    assert detection_accuracy(["S1", "S2"], [False, True]) == {"S1": 1.0, "S2": 1.0, "S3": None, "balanced": None}


@pytest.mark.parametrize(
    ("flagged", "true", "expected"),
    [
        ([], [], (0.0, 0.0, 1.0)),  # both empty: P = 0, R = 0 by convention, F1 = 1
        ([3], [], (0.0, 0.0, 0.0)),  # S1 with a false flag
        ([], [2], (0.0, 0.0, 0.0)),  # missed the converted turn
        ([2], [2], (1.0, 1.0, 1.0)),
        ([1, 2], [2], (0.5, 1.0, 2 / 3)),
        ([0, 1, 2, 3, 4], [2], (0.2, 1.0, 1 / 3)),
        ([1], [2], (0.0, 0.0, 0.0)),  # P = R = 0 with non-empty sets: F1 = 0
        ([2, 2], [2], (1.0, 1.0, 1.0)),  # duplicates are one turn
    ],
)
def test_localization_hand_computed(flagged, true, expected):
    precision, recall, f1 = localization_scores([flagged], [true])
    assert (precision[0], recall[0], f1[0]) == pytest.approx(expected)


def test_localization_matches_sklearn_samples_average():
    """sklearn's per-sample scores with zero_division 0 (P, R) and 1 (F1) are the paper's conventions."""
    rng = np.random.default_rng(0)
    n_turns = 5
    flagged = [sorted(rng.choice(n_turns, size=rng.integers(0, 4), replace=False).tolist()) for _ in range(150)]
    true = [sorted(rng.choice(n_turns, size=rng.integers(0, 2), replace=False).tolist()) for _ in range(150)]
    precision, recall, f1 = localization_scores(flagged, true)
    for i, (f, t) in enumerate(zip(flagged, true)):
        y_pred, y_true = np.zeros((1, n_turns), int), np.zeros((1, n_turns), int)
        y_pred[0, f], y_true[0, t] = 1, 1
        assert precision[i] == pytest.approx(precision_score(y_true, y_pred, average="samples", zero_division=0))
        assert recall[i] == pytest.approx(recall_score(y_true, y_pred, average="samples", zero_division=0))
        assert f1[i] == pytest.approx(f1_score(y_true, y_pred, average="samples", zero_division=1.0))


def test_localization_summary_is_macro_per_instance():
    scenarios = ["S1", "S1", "S2", "S2", "S3", "S3"]
    flagged = [[], [0], [1], [1, 2], [], [3]]
    true = [[], [], [1], [2], [3], [3]]
    result = localization_summary(scenarios, flagged, true)
    assert list(result) == list(LOCALIZATION_KEYS)
    assert result["S1_f1"] == pytest.approx(0.5)
    assert result["S2_precision"] == pytest.approx((1 + 0.5) / 2)
    assert result["S2_recall"] == pytest.approx(1.0)
    assert result["S2_f1"] == pytest.approx((1 + 2 / 3) / 2)  # not the harmonic mean of 0.75 and 1.0
    assert (result["S3_precision"], result["S3_recall"], result["S3_f1"]) == pytest.approx((0.5, 0.5, 0.5))
    assert result["balanced_f1"] == pytest.approx(0.5 * (0.5 + ((1 + 2 / 3) / 2 + 0.5) / 2))


def test_s1_f1_equals_s1_detection_for_flag_any_methods():
    """As for the paper's embedding methods: inconsistent iff a turn is flagged → S1 F1 = S1 accuracy."""
    rng = np.random.default_rng(1)
    flagged = [sorted(rng.choice(5, size=rng.integers(0, 3), replace=False).tolist()) for _ in range(200)]
    scenarios = ["S1"] * 200
    detection = detection_accuracy(scenarios, [len(f) > 0 for f in flagged])
    localization = localization_summary(scenarios, flagged, [[]] * 200)
    assert localization["S1_f1"] == pytest.approx(detection["S1"])


PERMUTATIONS = [list(p) for p in itertools.permutations(SCENARIOS)]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_ndcg_matches_sklearn_with_exponential_gains(k):
    # sklearn's gain is linear in y_true, so pass 2^rel − 1 as y_true; candidates in order S1, S2, S3.
    gains = np.array([[2.0 ** RELEVANCE[s] - 1 for s in SCENARIOS]])
    for ranking in PERMUTATIONS:
        scores = np.array([[len(SCENARIOS) - ranking.index(s) for s in SCENARIOS]], dtype=float)
        assert ndcg_at_k([ranking], k)[0] == pytest.approx(ndcg_score(gains, scores, k=k))


def test_ndcg_hand_computed():
    # Ideal DCG@2 = 3/log2(2) + 1/log2(3); ranking S3, S1, S2 gives 1 + 3/log2(3).
    ideal = 3 + 1 / np.log2(3)
    assert ndcg_at_k([["S3", "S1", "S2"]], 2)[0] == pytest.approx((1 + 3 / np.log2(3)) / ideal)
    assert ndcg_at_k([["S3", "S1", "S2"]], 1)[0] == pytest.approx(1 / 3)
    assert ndcg_at_k([["S1", "S2", "S3"]], 1)[0] == 1.0


def test_exact_match_only_for_s1_s3_s2():
    assert exact_match(PERMUTATIONS).tolist() == [p == ["S1", "S3", "S2"] for p in PERMUTATIONS]


def test_discrimination_average_is_over_instances():
    result = discrimination_accuracy(["S1", "S1", "S2", "S1"], ["AMI", "AMI", "AMI", "Daily"])
    assert result == {"AMI": pytest.approx(2 / 3), "Daily": 1.0, "average": 0.75}


def _summary_frame() -> pl.DataFrame:
    rows = [
        # task, id, dataset, scenario, inconsistent_pred, flagged, true, ranking, choice, error
        ("detection", "d1", "AMI", "S1", False, [], [], None, None, None),
        ("detection", "d2", "AMI", "S1", True, [4], [], None, None, None),
        ("detection", "d3", "AMI", "S2", True, [2], [2], None, None, None),
        ("detection", "d4", "AMI", "S2", False, [], [2], None, None, None),
        ("detection", "d5", "Daily", "S3", True, [1, 3], [3], None, None, None),
        ("detection", "d6", "Daily", "S3", None, None, [3], None, None, "timeout"),
        ("discrimination", "r1", "AMI", "S1", None, None, None, ["S1", "S3", "S2"], None, None),
        ("discrimination", "r2", "AMI", "S1", None, None, None, ["S3", "S1", "S2"], None, None),
        ("discrimination", "r3", "Daily", "S1", None, None, None, ["S2", "S1", "S3"], "S1", None),
    ]
    schema = {
        "task": pl.String, "instance_id": pl.String, "dataset": pl.String, "scenario": pl.String,
        "inconsistent_pred": pl.Boolean, "flagged_turns": pl.List(pl.Int64), "true_turns": pl.List(pl.Int64),
        "ranking": pl.List(pl.String), "choice": pl.String, "error": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def test_consistency_summary_end_to_end():
    summary = consistency_summary(_summary_frame())
    assert summary["n_errors"] == 1
    assert summary["detection"] == {"S1": 0.5, "S2": 0.5, "S3": 1.0, "balanced": 0.5 * (0.5 + 0.75)}
    loc = summary["localization"]
    assert list(loc) == list(LOCALIZATION_KEYS)
    assert loc["S1_f1"] == 0.5 and loc["S2_f1"] == 0.5 and loc["S3_precision"] == 0.5 and loc["S3_f1"] == pytest.approx(2 / 3)
    disc = summary["discrimination"]
    # r3's separate single-choice answer (S1) overrides the top of its ranking (S2).
    assert disc["accuracy"] == {"AMI": 0.5, "Daily": 1.0, "average": pytest.approx(2 / 3)}
    ideal2 = 3 + 1 / np.log2(3)
    assert disc["ndcg@1"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    assert disc["ndcg@2"] == pytest.approx((1 + (1 + 3 / np.log2(3)) / ideal2 + (3 / np.log2(3)) / ideal2) / 3)
    assert disc["exact_match"] == pytest.approx(1 / 3)
    assert summary["counts"] == {"detection": {"S1": 2, "S2": 2, "S3": 1}, "localization": 5, "discrimination": 3}


def test_consistency_summary_without_localization_or_discrimination():
    frame = _summary_frame().filter(pl.col("task") == "detection").drop("flagged_turns")
    summary = consistency_summary(frame)
    assert summary["localization"] == {key: None for key in LOCALIZATION_KEYS}
    assert summary["discrimination"]["accuracy"] is None and summary["discrimination"]["ndcg@2"] is None


# --- errors -------------------------------------------------------------------------------


def test_unknown_scenario_is_named():
    with pytest.raises(ValueError, match=r"scenarios has unknown label 'S4' at position 1"):
        detection_accuracy(["S1", "S4"], [True, False])


def test_detection_length_mismatch_quotes_both():
    with pytest.raises(ValueError, match="scenarios has 2, inconsistent_pred has 1"):
        detection_accuracy(["S1", "S2"], [True])


def test_localization_length_mismatch_quotes_both():
    with pytest.raises(ValueError, match="flagged_turns has 1, true_turns has 2"):
        localization_scores([[1]], [[1], [2]])


def test_localization_rejects_non_lists_and_non_integers():
    with pytest.raises(ValueError, match=r"flagged_turns\[0\] must be a list of turn indices, got None"):
        localization_scores([None], [[1]])
    with pytest.raises(ValueError, match=r"true_turns\[0\] must hold integer turn indices"):
        localization_scores([[1]], [[1.5]])


def test_localization_true_sets_must_match_scenarios():
    with pytest.raises(ValueError, match=r"instance 0: S1 must have no true inconsistent turns, got \[2\]"):
        localization_summary(["S1"], [[]], [[2]])
    with pytest.raises(ValueError, match=r"instance 0: S3 needs true turns, got \[\]"):
        localization_summary(["S3"], [[]], [[]])


def test_bad_rankings_are_named():
    with pytest.raises(ValueError, match=r"rankings\[0\] must order each of \['S1', 'S2', 'S3'\] once"):
        ndcg_at_k([["S1", "S1", "S2"]], 2)
    with pytest.raises(ValueError, match=r"rankings\[1\] must order each of"):
        exact_match([["S1", "S3", "S2"], ["S1", "S3"]])


def test_ndcg_k_out_of_range():
    with pytest.raises(ValueError, match="k must be an integer in 1..3, got 4"):
        ndcg_at_k([["S1", "S3", "S2"]], 4)


def test_dataset_named_average_is_refused():
    with pytest.raises(ValueError, match="dataset names must be set and differ from 'average'"):
        discrimination_accuracy(["S1"], ["average"])


def test_discrimination_unknown_choice():
    with pytest.raises(ValueError, match="choices has unknown label 'S9'"):
        discrimination_accuracy(["S9"], ["AMI"])


def test_summary_errors():
    with pytest.raises(ValueError, match=r"consistency frame lacks column\(s\) \['task'\]"):
        consistency_summary(pl.DataFrame({"scenario": ["S1"]}))
    with pytest.raises(ValueError, match=r"detection frame lacks column\(s\) \['scenario'\]"):
        consistency_summary(pl.DataFrame({"task": ["detection"], "inconsistent_pred": [True]}))
    with pytest.raises(ValueError, match="task has unknown label 'ranking'"):
        consistency_summary(pl.DataFrame({"task": ["ranking"], "scenario": ["S1"]}))
    frame = _summary_frame().with_columns(pl.lit(None, dtype=pl.String).alias("error"))
    with pytest.raises(ValueError, match="detection rows need inconsistent_pred"):
        consistency_summary(frame)
    with pytest.raises(ValueError, match=r"discrimination frame lacks column\(s\) \['ranking'\]"):
        consistency_summary(_summary_frame().drop("ranking"))
