"""Arena ratings against hand-computed Elo, sklearn's logistic regression, simulation and a naive bootstrap."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from sklearn.linear_model import LogisticRegression

from sdscore.metrics.ratings import (
    bootstrap_bradley_terry,
    bradley_terry,
    length_bias,
    online_elo,
    online_elo_by,
    pairwise_win_rate,
    position_bias,
)


def _battles(rows, **extra) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=["model_a", "model_b", "winner"], orient="row")
    return frame.with_columns(**{k: pl.Series(v) for k, v in extra.items()})


def _simulate(true_ratings: dict[str, float], n: int, seed: int, tie_rate: float = 0.0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    names = np.array(list(true_ratings))
    strength = np.array(list(true_ratings.values()))
    a = rng.integers(0, len(names), n)
    b = (a + rng.integers(1, len(names), n)) % len(names)
    p_a = 1 / (1 + 10 ** ((strength[b] - strength[a]) / 400))
    u = rng.random(n)
    winner = np.where(u < tie_rate, "tie", np.where(rng.random(n) < p_a, "model_a", "model_b"))
    return pl.DataFrame({"model_a": names[a], "model_b": names[b], "winner": winner})


# --- online Elo -----------------------------------------------------------------------------


def test_online_elo_hand_computed_three_battles():
    battles = _battles([("A", "B", "model_a"), ("B", "C", "tie"), ("C", "A", "model_a")])
    # 1) A beats B at equal ratings: E = 1/2, so A = 1000 + 16, B = 1000 − 16.
    # 2) B (984) ties C (1000): E_B = 1/(1 + 10^(16/400)) = 0.47699..., B += 32(½ − E_B) = +0.7363.
    # 3) C (999.2637) beats A (1016): E_C = 1/(1 + 10^(16.7363/400)) = 0.47593..., C += 32(1 − E_C) = +16.770.
    e_b = 1 / (1 + 10 ** (16 / 400))
    b = 984 + 32 * (0.5 - e_b)
    c = 1000 - 32 * (0.5 - e_b)
    e_c = 1 / (1 + 10 ** ((1016 - c) / 400))
    expected = {"A": 1016 - 32 * (1 - e_c), "B": b, "C": c + 32 * (1 - e_c)}
    ratings = online_elo(battles)
    assert ratings == pytest.approx(expected, abs=1e-9)
    assert ratings == pytest.approx({"A": 999.22986, "B": 984.73631, "C": 1016.03383}, abs=1e-5)
    assert list(ratings) == ["C", "A", "B"]  # highest first
    assert sum(ratings.values()) == pytest.approx(3000)  # Elo conserves the total


def test_online_elo_depends_on_order():
    battles = _battles([("A", "B", "model_a"), ("A", "B", "model_b"), ("B", "C", "model_a")])
    assert online_elo(battles) != online_elo(battles.reverse())


def test_online_elo_by_group_keeps_each_groups_order():
    battles = _battles([("A", "B", "model_a"), ("A", "B", "model_b"), ("A", "B", "model_a")], domain=["edu", "fun", "edu"])
    by_domain = online_elo_by(battles, "domain")
    assert list(by_domain) == ["edu", "fun"]
    assert by_domain["edu"] == online_elo(battles.filter(pl.col("domain") == "edu"))
    assert by_domain["fun"] == {"B": 1016.0, "A": 984.0}


# --- Bradley–Terry ----------------------------------------------------------------------------


def test_bradley_terry_recovers_simulated_strengths():
    true = {"gpt4o": 1250.0, "cascade": 1100.0, "qwen": 1000.0, "funaudio": 950.0, "mini-omni": 900.0, "speechgpt": 800.0}
    ratings = bradley_terry(_simulate(true, n=120_000, seed=0))
    for name, value in true.items():  # true ratings have mean 1000, as the fit does
        assert ratings[name] == pytest.approx(value, abs=8.0)
    assert list(ratings) == list(true)


def _sklearn_reference(battles: pl.DataFrame) -> dict[str, float]:
    """Independent fit: unpenalised logistic regression on a ±1 design matrix, ties as two half rows."""
    models = sorted(set(battles["model_a"]) | set(battles["model_b"]))
    col = {m: i for i, m in enumerate(models)}
    rows, y, weight = [], [], []
    for a, b, w in battles.iter_rows():
        x = np.zeros(len(models))
        x[col[a]], x[col[b]] = 1.0, -1.0
        outcomes = {"model_a": [(1, 1.0)], "model_b": [(0, 1.0)]}.get(w, [(1, 0.5), (0, 0.5)])
        for label, sample_weight in outcomes:
            rows.append(x)
            y.append(label)
            weight.append(sample_weight)
    fit = LogisticRegression(C=np.inf, fit_intercept=False, tol=1e-12, max_iter=100_000)
    fit.fit(np.array(rows), np.array(y), sample_weight=np.array(weight))
    theta = fit.coef_[0] - fit.coef_[0].mean()
    return dict(zip(models, 400 / math.log(10) * theta + 1000))


@pytest.mark.parametrize("tie_rate", [0.0, 0.2])
def test_bradley_terry_matches_sklearn_logistic_regression(tie_rate):
    true = {"a": 1120.0, "b": 1040.0, "c": 1000.0, "d": 930.0, "e": 910.0}
    battles = _simulate(true, n=3000, seed=1, tie_rate=tie_rate)
    ours = bradley_terry(battles)
    reference = _sklearn_reference(battles)
    assert ours == pytest.approx(reference, abs=1e-3)
    assert np.mean(list(ours.values())) == pytest.approx(1000.0, abs=1e-9)


def test_bradley_terry_anchor_shifts_only():
    battles = _simulate({"a": 1100.0, "b": 1000.0, "c": 900.0}, n=2000, seed=2)
    free = bradley_terry(battles)
    anchored = bradley_terry(battles, anchor=("b", 1114.0))
    assert anchored["b"] == pytest.approx(1114.0)
    assert anchored["a"] - anchored["c"] == pytest.approx(free["a"] - free["c"])


def test_bradley_terry_is_order_free_and_side_symmetric():
    battles = _simulate({"a": 1100.0, "b": 1000.0, "c": 900.0}, n=1500, seed=3, tie_rate=0.1)
    swapped = battles.select(
        pl.col("model_b").alias("model_a"),
        pl.col("model_a").alias("model_b"),
        pl.col("winner").replace({"model_a": "model_b", "model_b": "model_a"}),
    )
    base = bradley_terry(battles)
    assert bradley_terry(battles.reverse()) == pytest.approx(base, abs=1e-6)
    assert bradley_terry(swapped) == pytest.approx(base, abs=1e-6)


def test_bradley_terry_two_models_closed_form():
    # 3 wins, 1 loss, 2 ties → (3 + 1) half-counted wins of 6: P = 2/3, Δ = 400·log10(2).
    battles = _battles([("x", "y", "model_a")] * 3 + [("y", "x", "model_a")] + [("x", "y", "tie"), ("y", "x", "tie (bothbad)")])
    ratings = bradley_terry(battles)
    assert ratings["x"] - ratings["y"] == pytest.approx(400 * math.log10(2), abs=1e-6)


def test_bradley_terry_l2_keeps_an_undefeated_model_finite():
    battles = _battles([("x", "y", "model_a"), ("x", "y", "model_a"), ("y", "z", "tie")])
    ratings = bradley_terry(battles, l2=0.1)
    assert ratings["x"] > ratings["y"] and all(np.isfinite(list(ratings.values())))


def test_bootstrap_matches_naive_resampling():
    battles = _simulate({"a": 1100.0, "b": 1000.0, "c": 950.0, "d": 900.0}, n=400, seed=4, tie_rate=0.1)
    table = bootstrap_bradley_terry(battles, n_boot=20, seed=7)
    rng = np.random.default_rng(7)
    samples = []
    for _ in range(20):
        resample = battles[rng.integers(0, battles.height, battles.height)]
        samples.append(bradley_terry(resample))
    full = bradley_terry(battles)
    for model, rating, lower, upper in table.iter_rows():
        values = [s[model] for s in samples]
        assert rating == pytest.approx(full[model])
        assert lower == pytest.approx(np.quantile(values, 0.025), abs=1e-4)
        assert upper == pytest.approx(np.quantile(values, 0.975), abs=1e-4)
        assert lower < rating < upper
    assert table["model"].to_list() == list(full)
    assert bootstrap_bradley_terry(battles, n_boot=20, seed=7).equals(table)


# --- win rates and biases ---------------------------------------------------------------------


def test_pairwise_win_rate_hand_computed():
    battles = _battles([("a", "b", "model_a"), ("b", "a", "model_a"), ("a", "b", "tie"), ("a", "c", "model_a")])
    table = pairwise_win_rate(battles)
    assert table.columns == ["model", "a", "b", "c"]
    rows = {r[0]: r[1:] for r in table.iter_rows()}
    assert rows["a"] == (None, pytest.approx(1.5 / 3), 1.0)
    assert rows["b"] == (pytest.approx(1.5 / 3), None, None)
    assert rows["c"] == (0.0, None, None)
    assert pairwise_win_rate(battles, models=["c", "a"]).columns == ["model", "c", "a"]


def test_position_bias_first_position_share():
    battles = _battles([("a", "b", "model_a"), ("b", "a", "model_a"), ("a", "c", "model_b"), ("c", "b", "tie")])
    result = position_bias(battles)
    assert result["n_decisive"] == 3
    assert result["first_position_win_rate"] == pytest.approx(2 / 3)
    assert result["swap_flip_rate"] is None


def test_position_bias_swaps_like_s2s_arena():
    """S2S-Arena §5.3: 22 prompts judged in both orders, 5 verdicts changed, 4 of them to the later one."""
    rows, prompts = [], []
    for i in range(22):
        if i < 4:
            verdicts = ("model_b", "model_b")  # the second position wins in both orders: a flip
        elif i == 4:
            verdicts = ("model_a", "model_a")  # the first position wins in both orders: a flip
        else:
            verdicts = ("model_a", "model_b")  # x wins in both orders: no flip
        rows += [("x", "y", verdicts[0]), ("y", "x", verdicts[1])]
        prompts += [f"p{i}", f"p{i}"]
    result = position_bias(_battles(rows, prompt_id=prompts), prompt_column="prompt_id")
    assert result["n_swapped_pairs"] == 22
    assert result["swap_flip_rate"] == pytest.approx(5 / 22)  # 22.7 %
    assert result["second_position_share_of_flips"] == pytest.approx(0.8)


def test_position_bias_counts_each_cross_pair_and_ties():
    rows = [("x", "y", "model_a"), ("x", "y", "model_a"), ("y", "x", "tie"), ("x", "z", "model_a")]
    result = position_bias(_battles(rows, prompt=["p", "p", "p", "p"]), prompt_column="prompt")
    assert result["n_swapped_pairs"] == 2 and result["swap_flip_rate"] == 1.0
    assert result["second_position_share_of_flips"] is None  # every flip involves a tie


def test_length_bias_hand_computed():
    rows = [("a", "b", "model_a"), ("a", "b", "model_b"), ("a", "b", "model_a"), ("a", "b", "tie"), ("a", "b", "model_b")]
    battles = _battles(rows, length_a=[20.0, 10.0, 5.0, 99.0, 7.0], length_b=[10.0, 15.0, 8.0, 1.0, 7.0])
    result = length_bias(battles)
    assert result["n_decisive"] == 4 and result["n_unequal"] == 3
    assert result["longer_win_rate"] == pytest.approx(2 / 3)
    assert result["mean_winner_length"] == pytest.approx((20 + 15 + 5 + 7) / 4)
    assert result["mean_loser_length"] == pytest.approx((10 + 10 + 8 + 7) / 4)


# --- errors -------------------------------------------------------------------------------


def test_battle_frame_errors():
    with pytest.raises(ValueError, match=r"battles frame lacks column\(s\) \['winner'\]"):
        online_elo(pl.DataFrame({"model_a": ["a"], "model_b": ["b"]}))
    with pytest.raises(ValueError, match="battles frame is empty"):
        bradley_terry(_battles([]).cast(pl.String))
    with pytest.raises(ValueError, match=r"battles row 1 has unknown winner 'A'"):
        online_elo(_battles([("a", "b", "model_a"), ("a", "b", "A")]))
    with pytest.raises(ValueError, match="battles row 0 pits 'a' against itself"):
        online_elo(_battles([("a", "a", "tie")]))
    with pytest.raises(ValueError, match="battles row 1 has a null model_b"):
        online_elo(_battles([("a", "b", "tie"), ("a", None, "tie")]))


def test_bradley_terry_without_an_mle():
    battles = _battles([("x", "y", "model_a"), ("x", "y", "model_a"), ("y", "z", "tie")])
    message = r"Bradley–Terry MLE does not exist: .* groups \[\['y', 'z'\], \['x'\]\]\. Add battles, or regularise with l2 > 0 \(`sdscore eval arena --l2 0\.01`\)"
    with pytest.raises(ValueError, match=message):
        bradley_terry(battles)


def test_bradley_terry_argument_errors():
    battles = _battles([("x", "y", "model_a"), ("y", "x", "model_a")])
    with pytest.raises(ValueError, match="anchor model 'q' is not in the battles"):
        bradley_terry(battles, anchor=("q", 1000.0))
    with pytest.raises(ValueError, match="l2 must be >= 0, got -1"):
        bradley_terry(battles, l2=-1)
    with pytest.raises(ValueError, match="n_boot must be a positive integer, got 0"):
        bootstrap_bradley_terry(battles, n_boot=0)
    with pytest.raises(ValueError, match=r"level must lie in \(0, 1\), got 1.5"):
        bootstrap_bradley_terry(battles, level=1.5)


def test_bootstrap_resample_without_an_mle_is_named():
    battles = _battles([("x", "y", "model_a"), ("y", "x", "model_a")])
    with pytest.raises(ValueError, match="MLE does not exist on bootstrap resample"):
        bootstrap_bradley_terry(battles, n_boot=50, seed=0)


def test_win_rate_and_bias_errors():
    battles = _battles([("x", "y", "model_a")], length_a=[1.0], length_b=[-2.0])
    with pytest.raises(ValueError, match=r"models \['q'\] are not in the battles"):
        pairwise_win_rate(battles, models=["q"])
    with pytest.raises(ValueError, match=r"length_b must be finite and >= 0, got -2.0 in row 0"):
        length_bias(battles)
    with pytest.raises(ValueError, match=r"battles frame lacks column\(s\) \['prompt_id'\]"):
        position_bias(battles, prompt_column="prompt_id")
    with pytest.raises(ValueError, match=r"battles frame lacks column\(s\) \['domain'\]"):
        online_elo_by(battles, "domain")
