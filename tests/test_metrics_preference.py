"""Reward preference metrics against SDiaReward Table 2 (Gemini 2.5 Pro row), sklearn and numpy."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import accuracy_score

from sdscore.metrics.preference import (
    margin_buckets,
    pairwise_correct,
    preference_accuracy,
    reward_summary,
)

# Gemini 2.5 Pro, ESDR-Bench Table 2 (%): per-subset accuracy, then the paper's aggregates.
GEMINI_SUBSETS = {"Wild": 76.12, "Semi-wild": 65.60, "Scripted": 69.77, "Colloquial": 98.80}
GEMINI_MODALITY_MACRO = 70.50
GEMINI_OVERALL_MACRO = 84.65


def _results(accuracies: dict[str, float], n: int = 10_000, errors_per_subset: int = 0) -> pl.DataFrame:
    """A scorer-shaped results frame whose per-subset accuracy is exactly ``accuracies`` (in %)."""
    rows = []
    for subset, percent in accuracies.items():
        criterion = "colloquialness" if subset == "Colloquial" else "modality"
        n_correct = round(percent * n / 100)
        for i in range(n):
            if i < n_correct:
                chosen, rejected = 1.0, 0.0
            elif i % 2:
                chosen, rejected = 0.0, 0.0  # a tie: wrong
            else:
                chosen, rejected = -1.0, 0.5
            rows.append((f"{subset}-{i}", criterion, subset, "cat", chosen, rejected, chosen > rejected, None))
        for i in range(errors_per_subset):
            rows.append((f"{subset}-err{i}", criterion, subset, "cat", None, None, None, "audio decode failed"))
    frame = pl.DataFrame(
        rows,
        schema={
            "pair_id": pl.String, "criterion": pl.String, "subset": pl.String, "category": pl.String,
            "chosen_reward": pl.Float64, "rejected_reward": pl.Float64, "correct": pl.Boolean, "error": pl.String,
        },
        orient="row",
    )
    return frame.with_columns((pl.col("chosen_reward") - pl.col("rejected_reward")).alias("margin"))


def test_reward_summary_reproduces_gemini_table2_row():
    summary = reward_summary(_results(GEMINI_SUBSETS))
    for name, percent in GEMINI_SUBSETS.items():
        assert summary["subsets"][name]["n"] == 10_000
        assert summary["subsets"][name]["accuracy"] == pytest.approx(percent / 100, abs=1e-12)
    assert round(100 * summary["modality_macro"], 2) == GEMINI_MODALITY_MACRO
    assert round(100 * summary["overall_macro"], 2) == GEMINI_OVERALL_MACRO
    assert summary["colloquial"] == pytest.approx(0.9880)
    # Equal subset sizes here, so the modality micro equals the macro; overall micro weighs all 4.
    assert summary["modality_micro"] == pytest.approx((0.7612 + 0.6560 + 0.6977) / 3)
    assert summary["overall_micro"] == pytest.approx((0.7612 + 0.6560 + 0.6977 + 0.9880) / 4)
    assert summary["n"] == 40_000 and summary["n_errors"] == 0


def test_reward_summary_micro_weights_pairs_and_macro_does_not():
    frame = pl.concat([_results({"Wild": 90.0}, n=100), _results({"Scripted": 50.0}, n=300), _results({"Colloquial": 80.0}, n=50)])
    summary = reward_summary(frame)
    assert summary["modality_micro"] == pytest.approx((90 + 150) / 400)
    assert summary["modality_macro"] == pytest.approx(0.70)
    assert summary["overall_micro"] == pytest.approx((90 + 150 + 40) / 450)
    assert summary["overall_macro"] == pytest.approx((0.70 + 0.80) / 2)
    assert list(summary["subsets"]) == ["Wild", "Scripted", "Colloquial"]


def test_error_rows_are_excluded_and_counted():
    clean = reward_summary(_results(GEMINI_SUBSETS, n=1000))
    with_errors = reward_summary(_results(GEMINI_SUBSETS, n=1000, errors_per_subset=3))
    assert with_errors["n_errors"] == 12 and with_errors["n"] == 4000
    assert with_errors["subsets"]["Wild"]["n_errors"] == 3
    for key in ("modality_micro", "modality_macro", "colloquial", "overall_micro", "overall_macro"):
        assert with_errors[key] == clean[key]


def test_reward_summary_without_colloquial_pairs_leaves_those_values_none():
    summary = reward_summary(_results({"Wild": 80.0}, n=10))
    assert summary["colloquial"] is None and summary["overall_macro"] is None
    assert summary["modality_macro"] == pytest.approx(0.8)


def test_pairwise_correct_counts_ties_as_wrong():
    correct = pairwise_correct([1.0, 0.5, 0.2, -3.0], [0.0, 0.5, 0.3, -4.0])
    assert correct.tolist() == [True, False, False, True]


def test_preference_accuracy_on_arrays_matches_sklearn():
    rng = np.random.default_rng(0)
    chosen, rejected = rng.normal(size=501), rng.normal(size=501)
    rejected[:20] = chosen[:20]  # ties
    expected = accuracy_score(np.ones(501, dtype=bool), chosen > rejected)
    assert preference_accuracy(chosen, rejected) == pytest.approx(expected)


def test_preference_accuracy_by_category_matches_sklearn_per_group():
    rng = np.random.default_rng(1)
    n = 300
    frame = pl.DataFrame({
        "pair_id": [str(i) for i in range(n)],
        "category": rng.choice(["a", "b", "c"], size=n),
        "chosen_reward": rng.normal(size=n),
        "rejected_reward": rng.normal(size=n),
    })
    grouped = preference_accuracy(frame, by="category")
    assert grouped.columns == ["category", "n", "accuracy"]
    for category, count, acc in grouped.iter_rows():
        part = frame.filter(pl.col("category") == category)
        truth = (part["chosen_reward"] > part["rejected_reward"]).to_numpy()
        assert count == part.height
        assert acc == pytest.approx(accuracy_score(np.ones(part.height, dtype=bool), truth))
    assert preference_accuracy(frame) == pytest.approx(float((frame["chosen_reward"] > frame["rejected_reward"]).mean()))


def test_preference_accuracy_uses_correct_column_without_rewards():
    frame = pl.DataFrame({"correct": [True, False, True, True], "error": [None, None, "", None]})
    assert preference_accuracy(frame) == pytest.approx(0.75)


def test_margin_buckets_match_numpy_histogram():
    rng = np.random.default_rng(2)
    margins = rng.uniform(-2, 2, size=1000)
    correct = margins + rng.normal(scale=0.5, size=1000) > 0
    edges = [-2.0, -1.0, 0.0, 0.5, 2.0]
    table = margin_buckets(margins, correct, edges)
    counts, _ = np.histogram(margins, bins=edges)
    hits, _ = np.histogram(margins, bins=edges, weights=correct.astype(float))
    assert table["n"].to_list() == counts.tolist()
    np.testing.assert_allclose(table["accuracy"].to_numpy(), hits / counts)
    assert table["lower"].to_list() == edges[:-1] and table["upper"].to_list() == edges[1:]


def test_margin_buckets_edge_values_and_empty_buckets():
    # [0, 1) [1, 2) [2, 3]: an inner edge opens the next bucket, the last edge closes the last.
    table = margin_buckets([0.0, 1.0, 2.0, 3.0, 3.0], [True, False, True, True, False], [0.0, 1.0, 2.0, 3.0])
    assert table["n"].to_list() == [1, 1, 3]
    assert table["accuracy"].to_list() == [1.0, 0.0, pytest.approx(2 / 3)]
    table = margin_buckets([0.5], [True], [0.0, 1.0, 2.0])
    assert table["n"].to_list() == [1, 0] and table["accuracy"].to_list() == [1.0, None]
    table = margin_buckets([5.0, -7.0], [True, False], [-np.inf, 0.0, np.inf])
    assert table["n"].to_list() == [1, 1]


# --- errors -------------------------------------------------------------------------------


def test_pairwise_correct_length_mismatch_quotes_both():
    with pytest.raises(ValueError, match="chosen has 3, rejected has 2"):
        pairwise_correct([1, 2, 3], [1, 2])


def test_pairwise_correct_rejects_nan():
    with pytest.raises(ValueError, match=r"rejected has a non-finite value nan at position 1"):
        pairwise_correct([1.0, 2.0], [0.0, np.nan])


def test_pairwise_correct_rejects_2d():
    with pytest.raises(ValueError, match=r"chosen must be 1-D, got shape \(2, 2\)"):
        pairwise_correct([[1, 2], [3, 4]], [1, 2])


def test_preference_accuracy_argument_errors():
    frame = pl.DataFrame({"chosen_reward": [1.0], "rejected_reward": [0.0]})
    with pytest.raises(ValueError, match="rejected is only for arrays"):
        preference_accuracy(frame, [0.0])
    with pytest.raises(ValueError, match="needs rejected rewards"):
        preference_accuracy([1.0, 2.0])
    with pytest.raises(ValueError, match="by= needs a results frame"):
        preference_accuracy([1.0], [0.0], by="category")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['category'\]"):
        preference_accuracy(frame, by="category")
    with pytest.raises(ValueError, match="no pairs given"):
        preference_accuracy([], [])
    with pytest.raises(ValueError, match="no rows without error"):
        preference_accuracy(frame.with_columns(pl.lit("boom").alias("error")))


def test_missing_reward_without_error_is_named():
    frame = pl.DataFrame({"pair_id": ["p0", "p1"], "chosen_reward": [1.0, None], "rejected_reward": [0.0, 0.0]})
    with pytest.raises(ValueError, match="pair_id 'p1' has a missing or non-finite reward"):
        preference_accuracy(frame)


def test_correct_column_disagreeing_with_rewards_is_named():
    frame = pl.DataFrame(
        {"pair_id": ["p0", "p1"], "chosen_reward": [1.0, 0.0], "rejected_reward": [0.0, 0.0], "correct": [True, True]}
    )
    message = r"pair_id 'p1': column correct is True but chosen_reward > rejected_reward is False"
    with pytest.raises(ValueError, match=message):
        preference_accuracy(frame)


def test_frame_without_rewards_or_correct():
    with pytest.raises(ValueError, match="needs chosen_reward and rejected_reward, or correct"):
        preference_accuracy(pl.DataFrame({"x": [1]}))


def test_null_correct_without_error():
    with pytest.raises(ValueError, match="row 1 has a null correct but no error"):
        preference_accuracy(pl.DataFrame({"correct": [True, None]}))


def test_non_boolean_correct():
    with pytest.raises(ValueError, match="correct must hold booleans"):
        margin_buckets([0.1], [0.5], [0.0, 1.0])


def test_reward_summary_unknown_criterion():
    frame = _results({"Wild": 50.0}, n=4).with_columns(pl.lit("prosody").alias("criterion"))
    with pytest.raises(ValueError, match="criterion has unknown value 'prosody'"):
        reward_summary(frame)


def test_reward_summary_subset_under_both_criteria():
    renamed = _results({"Colloquial": 50.0}, n=4).with_columns(pl.lit("Wild").alias("subset"))
    frame = pl.concat([_results({"Wild": 50.0}, n=4), renamed])
    with pytest.raises(ValueError, match="subset 'Wild' appears under both criteria"):
        reward_summary(frame)


def test_reward_summary_null_subset():
    frame = _results({"Wild": 50.0}, n=4).with_columns(pl.lit(None, dtype=pl.String).alias("subset"))
    with pytest.raises(ValueError, match="subset has null values"):
        reward_summary(frame)


def test_reward_summary_criterion_and_subset_are_optional():
    summary = reward_summary(pl.DataFrame({"correct": [True, False, True]}))
    assert summary["overall_micro"] == pytest.approx(2 / 3) and summary["subsets"] == {}
    assert summary["modality_micro"] is None and summary["overall_macro"] is None
    with pytest.raises(ValueError, match="needs chosen_reward and rejected_reward, or correct"):
        reward_summary(pl.DataFrame({"subset": ["a"]}))


def test_margin_buckets_errors():
    with pytest.raises(ValueError, match="margins has 2, correct has 1"):
        margin_buckets([0.1, 0.2], [True], [0.0, 1.0])
    with pytest.raises(ValueError, match="edges must be at least 2 strictly increasing"):
        margin_buckets([0.1], [True], [1.0, 0.0])
    with pytest.raises(ValueError, match="edges must be at least 2 strictly increasing"):
        margin_buckets([0.1], [True], [0.0])
    with pytest.raises(ValueError, match=r"margins\[1\] = 3.0 lies outside edges \[0.0, 1.0\]"):
        margin_buckets([0.1, 3.0], [True, False], [0.0, 1.0])
