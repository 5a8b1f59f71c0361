"""Kendall's W (hand computations and scipy's Friedman statistic), graded NDCG (sklearn), position bias."""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl
import pytest
from scipy.stats import friedmanchisquare
from sklearn.metrics import ndcg_score

from sdscore.metrics.consistency import (
    consistency_summary,
    graded_exact_match,
    graded_ndcg_at_k,
    ndcg_at_k,
    ranked_relevances,
)
from sdscore.metrics.position_bias import order_agreement, position_bias, position_shares
from sdscore.metrics.rank_agreement import kendalls_w, ranks_of


def test_kendalls_w_hand_computed():
    # 3 raters, 4 items: rank sums 4, 6, 8, 12; mean 7.5; S = 35; W = 12·35 / (9·60) = 7/9.
    ranks = [[1, 2, 3, 4], [2, 1, 3, 4], [1, 3, 2, 4]]
    assert kendalls_w(ranks) == pytest.approx(7 / 9)


def test_kendalls_w_extremes():
    assert kendalls_w([[1, 2, 3, 4]] * 5) == pytest.approx(1.0)
    assert kendalls_w([[1, 2, 3], [3, 2, 1]]) == pytest.approx(0.0)


def test_kendalls_w_with_ties_by_hand():
    # rater 2 ties items 1 and 2 (mid-rank 1.5): R = (2.5, 3.5, 6), S = 6.5, T = 2³ − 2 = 6;
    # W = 12·6.5 / (4·24 − 2·6) = 78 / 84.
    assert kendalls_w([[1, 2, 3], [1.5, 1.5, 3]]) == pytest.approx(78 / 84)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kendalls_w_equals_friedman_over_m_n_minus_1(seed):
    """Independent reference: Friedman's χ² (scipy, tie-corrected) = m (n − 1) W."""
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, size=(6, 5)).astype(float)  # ties on purpose
    ranks = ranks_of(scores)
    m, n = ranks.shape
    chi2 = friedmanchisquare(*ranks.T).statistic
    assert kendalls_w(ranks) == pytest.approx(chi2 / (m * (n - 1)))


def test_ranks_of_and_bad_ranks():
    np.testing.assert_allclose(ranks_of([[0.9, 0.1, 0.5, 0.5]]), [[1, 4, 2.5, 2.5]])
    with pytest.raises(ValueError, match=r"rater 1's ranks \[1.0, 1.0, 3.0\] are not ranks 1..3"):
        kendalls_w([[1, 2, 3], [1, 1, 3]])
    with pytest.raises(ValueError, match=r"ranks must be \[raters, items\] with at least 2 of each"):
        kendalls_w([[1, 2, 3]])


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_graded_ndcg_matches_sklearn_for_four_candidates(k):
    relevance = np.array([3.0, 0.0, 2.0, 1.0])  # e.g. people's grades of four voice-cloning outputs
    gains = 2.0 ** relevance[None, :] - 1
    for order in itertools.permutations(range(4)):
        scores = np.zeros((1, 4))
        scores[0, list(order)] = np.arange(4, 0, -1)
        ours = graded_ndcg_at_k([relevance[list(order)]], k)[0]
        assert ours == pytest.approx(ndcg_score(gains, scores, k=k))


def test_graded_ndcg_agrees_with_speakersleuth_relevances():
    for ranking in itertools.permutations(["S1", "S2", "S3"]):
        graded = ranked_relevances([list(ranking)], [{"S1": 2, "S3": 1, "S2": 0}])
        assert graded_ndcg_at_k(graded, 2)[0] == pytest.approx(ndcg_at_k([list(ranking)], 2)[0])


def test_graded_exact_match_allows_ties_in_any_order():
    assert graded_exact_match([[2, 1, 1, 0], [2, 1, 0, 1], [1, 1, 1]]).tolist() == [True, False, True]
    assert graded_ndcg_at_k([[0.0, 0.0]], 2)[0] == 1.0


def test_summary_with_graded_rows_and_choice_only_rows():
    frame = pl.DataFrame({
        "task": ["discrimination"] * 3, "dataset": ["vc", "vc", "toy"], "scenario": [None] * 3,
        "ranking": [["cosy", "source", "yourtts"], ["source", "cosy", "yourtts"], None],
        "choice": [None, None, "S1"],
        "candidate_labels": [["source", "cosy", "yourtts"], ["source", "cosy", "yourtts"], ["S2", "S1", "S3"]],
        "candidate_relevances": [[2.0, 1.0, 0.0], [2.0, 1.0, 0.0], None],
        "error": [None, None, None],
    })
    disc = consistency_summary(frame)["discrimination"]
    assert disc["accuracy"] == {"vc": 0.5, "toy": 1.0, "average": pytest.approx(2 / 3)}
    ideal = 3 + 1 / np.log2(3)
    assert disc["ndcg@2"] == pytest.approx(((1 + 3 / np.log2(3)) / ideal + 1.0) / 2)
    assert disc["exact_match"] == 0.5 and disc["n_ranked"] == 2


def test_summary_refuses_rows_without_answer_and_unknown_graded_labels():
    frame = pl.DataFrame({"task": ["discrimination"], "dataset": ["x"], "ranking": [None], "choice": [None]},
                         schema={"task": pl.String, "dataset": pl.String, "ranking": pl.List(pl.String),
                                 "choice": pl.String})
    with pytest.raises(ValueError, match="discrimination row 0 has neither a ranking nor a choice"):
        consistency_summary(frame)
    with pytest.raises(ValueError, match=r"rankings\[0\] must order each of \['a', 'b'\] once"):
        ranked_relevances([["a", "c"]], [{"a": 1.0, "b": 0.0}])


def test_position_bias_of_an_always_first_judge_is_one():
    shares = position_shares([0] * 12, 3)
    assert shares.tolist() == [1.0, 0.0, 0.0] and position_bias(shares) == 1.0
    assert position_bias(position_shares([0, 1, 2] * 4, 3)) == pytest.approx(0.0)
    assert position_bias([0.5, 0.25, 0.25]) == pytest.approx(0.25)


def test_order_agreement_by_hand():
    # instance 1: picks c0 in 4 of 6 orders; instance 2: unanimous; instance 3: asked once (left out)
    result = order_agreement([[0, 0, 1, 0, 2, 0], ["x", "x"], [1]])
    assert result == {"order_agreement": pytest.approx((4 / 6 + 1) / 2), "order_consistent": 0.5, "n_instances": 2}
    assert order_agreement([[1]])["order_agreement"] is None


def test_position_errors():
    with pytest.raises(ValueError, match=r"positions\[1\] = 3 is outside 0..2"):
        position_shares([0, 3], 3)
    with pytest.raises(ValueError, match="no answers to measure position bias on"):
        position_shares([], 3)
    with pytest.raises(ValueError, match="shares must be k >= 2 fractions summing to 1"):
        position_bias([0.5, 0.1])
