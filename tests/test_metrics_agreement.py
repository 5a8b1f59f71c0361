"""Agreement statistics against sklearn, scipy, statsmodels, a naive bootstrap and the HCoT labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from sdscore.metrics.agreement import (
    THREE_WAY_LABELS,
    accuracy,
    cohen_kappa,
    collapse_ties,
    confusion_matrix,
    correctness,
    flip_rate,
    mcnemar_p,
    paired_bootstrap_ci,
    paired_bootstrap_difference_ci,
    winner_on_bad,
    winner_slice_accuracy,
)
from sdscore.metrics.fusion import JUDGE_LABELS, fuse_many

HCOT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "hcot"


def _random_labels(seed: int, n: int = 300, labels=JUDGE_LABELS, p=None) -> np.ndarray:
    return np.random.default_rng(seed).choice(np.array(labels, dtype=object), size=n, p=p)


def _hcot_fused(name: str, rule: str) -> tuple[np.ndarray, np.ndarray]:
    path = HCOT_DIR / f"{name}.json"
    if not path.exists():
        pytest.skip(f"HCoT labels not found at {path} (shared/ is not checked out beside the repo)")
    items = json.loads(path.read_text())
    label = {k: [item["label"][k] for item in items] for k in ("content", "voice_quality", "paralinguistics", "overall")}
    fused = fuse_many(label["content"], label["voice_quality"], label["paralinguistics"], rule=rule)
    return np.array(label["overall"], dtype=object), fused


def test_accuracy_matches_sklearn():
    y_true, y_pred = _random_labels(0), _random_labels(1)
    assert accuracy(y_true, y_pred) == pytest.approx(accuracy_score(y_true, y_pred))
    assert correctness(y_true, y_pred).tolist() == (y_true == y_pred).tolist()


def test_hcot_fused_accuracy_is_485_of_497():
    human, fused = _hcot_fused("speakbench", "speakbench")
    assert accuracy(human, fused) == pytest.approx(485 / 497)


@pytest.mark.parametrize("seed", range(5))
def test_confusion_matrix_matches_sklearn_in_fixed_label_order(seed):
    # Skewed draws so some labels never occur in one of the two arrays.
    y_true = _random_labels(seed, n=40, p=[0.5, 0.5, 0.0, 0.0])
    y_pred = _random_labels(seed + 100, n=40, p=[0.4, 0.3, 0.3, 0.0])
    ours = confusion_matrix(y_true, y_pred)
    assert ours.dtype == np.int64 and ours.shape == (4, 4)
    np.testing.assert_array_equal(ours, sk_confusion_matrix(y_true, y_pred, labels=list(JUDGE_LABELS)))


@pytest.mark.parametrize("seed", range(5))
def test_cohen_kappa_matches_sklearn(seed):
    y_a = _random_labels(seed, n=200)
    y_b = np.where(np.random.default_rng(seed).random(200) < 0.6, y_a, _random_labels(seed + 7, n=200))
    assert cohen_kappa(y_a, y_b) == pytest.approx(cohen_kappa_score(y_a, y_b, labels=list(JUDGE_LABELS)))


def test_cohen_kappa_with_a_label_that_never_occurs_matches_sklearn():
    y_a = np.array(["1", "2", "both_bad", "1", "2", "1"], dtype=object)
    y_b = np.array(["1", "2", "2", "1", "both_bad", "2"], dtype=object)  # both_good never occurs
    assert cohen_kappa(y_a, y_b) == pytest.approx(cohen_kappa_score(y_a, y_b, labels=list(JUDGE_LABELS)))


def test_cohen_kappa_on_hcot_matches_sklearn():
    human, fused = _hcot_fused("s2sarena", "s2sarena")
    assert cohen_kappa(human, fused) == pytest.approx(cohen_kappa_score(human, fused, labels=list(JUDGE_LABELS)))


def test_cohen_kappa_is_nan_when_chance_agreement_is_one():
    assert np.isnan(cohen_kappa(["1", "1"], ["1", "1"]))


def test_three_way_labels_after_collapsing_ties():
    y_a = collapse_ties(["1", "both_good", "both_bad", "2"])
    assert y_a.tolist() == ["1", "tie", "tie", "2"]
    y_b = np.array(["1", "tie", "2", "2"], dtype=object)
    assert accuracy(y_a, y_b, labels=THREE_WAY_LABELS) == 0.75
    assert cohen_kappa(y_a, y_b, labels=THREE_WAY_LABELS) == pytest.approx(
        cohen_kappa_score(y_a, y_b, labels=list(THREE_WAY_LABELS))
    )


# --- McNemar --------------------------------------------------------------------------------

def _pairs(b: int, c: int, both: int = 7, neither: int = 3) -> tuple[np.ndarray, np.ndarray]:
    a = [True] * b + [False] * c + [True] * both + [False] * neither
    other = [False] * b + [True] * c + [True] * both + [False] * neither
    return np.array(a), np.array(other)


@pytest.mark.parametrize(("b", "c"), [(10, 2), (2, 10), (5, 5), (0, 6), (30, 17), (1, 0), (120, 95)])
@pytest.mark.parametrize(("exact", "correction"), [(True, True), (False, True), (False, False)])
def test_mcnemar_matches_statsmodels(b, c, exact, correction):
    sm_tables = pytest.importorskip("statsmodels.stats.contingency_tables")
    a, other = _pairs(b, c)
    table = [[int((a & other).sum()), int((a & ~other).sum())], [int((~a & other).sum()), int((~a & ~other).sum())]]
    expected = sm_tables.mcnemar(table, exact=exact, correction=correction).pvalue
    assert mcnemar_p(a, other, exact=exact, correction=correction) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_without_discordant_items_is_one():
    a, other = _pairs(0, 0)
    assert mcnemar_p(a, other) == 1.0
    assert mcnemar_p(a, other, exact=False) == 1.0


def test_mcnemar_is_symmetric():
    a, other = _pairs(12, 4)
    assert mcnemar_p(a, other) == mcnemar_p(other, a)


# --- paired bootstrap ------------------------------------------------------------------------


def _naive_paired_bootstrap(correct_by_judge, n_boot, seed, level=0.95):
    """The definition, one resample at a time (same rng stream as one block of draws)."""
    n = len(next(iter(correct_by_judge.values())))
    index = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    out = {}
    for name, correct in correct_by_judge.items():
        means = np.array([np.asarray(correct, float)[row].mean() for row in index])
        lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
        out[name] = {"accuracy": float(np.mean(correct)), "lower": lo, "upper": hi}
    return out


def test_paired_bootstrap_matches_naive_definition():
    rng = np.random.default_rng(3)
    judges = {"trace": rng.random(120) < 0.7, "audio": rng.random(120) < 0.6, "llm": rng.random(120) < 0.55}
    ours = paired_bootstrap_ci(judges, n_boot=500, seed=11)
    naive = _naive_paired_bootstrap(judges, n_boot=500, seed=11)
    for name in judges:
        assert ours[name] == pytest.approx(naive[name], abs=1e-12)


def test_paired_bootstrap_uses_the_same_indices_for_every_judge():
    # A judge that is right exactly where another is wrong has resampled accuracy 1 − x in every
    # resample only if both use the same indices; then the intervals mirror each other.
    correct = np.random.default_rng(4).random(200) < 0.65
    result = paired_bootstrap_ci({"a": correct, "b": ~correct, "a_again": correct.copy()}, n_boot=2000, seed=5)
    assert result["b"]["lower"] == pytest.approx(1 - result["a"]["upper"], abs=1e-12)
    assert result["b"]["upper"] == pytest.approx(1 - result["a"]["lower"], abs=1e-12)
    assert result["a_again"] == result["a"]


def test_paired_bootstrap_is_seeded_and_close_to_scipy_percentile():
    correct = np.random.default_rng(6).random(400) < 0.686
    first = paired_bootstrap_ci({"j": correct}, n_boot=4000, seed=1)
    assert paired_bootstrap_ci({"j": correct}, n_boot=4000, seed=1) == first
    assert paired_bootstrap_ci({"j": correct}, n_boot=4000, seed=2) != first
    reference = stats.bootstrap(
        (correct.astype(float),), np.mean, n_resamples=4000, method="percentile", rng=np.random.default_rng(9)
    )
    assert first["j"]["lower"] == pytest.approx(reference.confidence_interval.low, abs=0.01)
    assert first["j"]["upper"] == pytest.approx(reference.confidence_interval.high, abs=0.01)


def test_paired_bootstrap_in_several_blocks_is_still_paired(monkeypatch):
    import sdscore.metrics.agreement as agreement

    monkeypatch.setattr(agreement, "_BOOTSTRAP_CELLS", 1000)  # 10 resamples of 100 items per block
    correct = np.random.default_rng(8).random(100) < 0.5
    result = paired_bootstrap_ci({"a": correct, "b": ~correct}, n_boot=95, seed=0)
    assert result["b"]["lower"] == pytest.approx(1 - result["a"]["upper"], abs=1e-12)


def test_paired_bootstrap_difference_ci():
    rng = np.random.default_rng(10)
    a, b = rng.random(300) < 0.7, rng.random(300) < 0.5
    diff = paired_bootstrap_difference_ci(a, b, n_boot=3000, seed=0)
    assert diff["difference"] == pytest.approx(a.mean() - b.mean())
    assert diff["lower"] < diff["difference"] < diff["upper"]
    same = paired_bootstrap_difference_ci(a, a, n_boot=100, seed=0)
    assert same == {"difference": 0.0, "lower": 0.0, "upper": 0.0}


# --- probes ---------------------------------------------------------------------------------


def test_p3_probes_hand_computed():
    y_true = ["both_bad", "both_bad", "both_bad", "both_bad", "1", "2", "2", "both_good"]
    y_pred = ["1", "both_bad", "2", "both_good", "1", "1", "2", "1"]
    assert winner_on_bad(y_true, y_pred) == pytest.approx(2 / 4)
    assert winner_slice_accuracy(y_true, y_pred) == pytest.approx(2 / 3)


def test_p3_probes_are_nan_on_an_empty_slice():
    assert np.isnan(winner_on_bad(["1"], ["2"]))
    assert np.isnan(winner_slice_accuracy(["both_bad"], ["2"]))


def test_p2_flip_rate_on_hcot_ablation():
    """P2 on human labels: set paralinguistics to both_good and count changed overall labels."""
    path = HCOT_DIR / "speakbench.json"
    if not path.exists():
        pytest.skip(f"HCoT labels not found at {path}")
    items = json.loads(path.read_text())
    c, vq, p = ([item["label"][k] for item in items] for k in ("content", "voice_quality", "paralinguistics"))
    original = fuse_many(c, vq, p)
    ablated = fuse_many(c, vq, ["both_good"] * len(p))
    expected = float(np.mean([o != a for o, a in zip(original, ablated)]))
    assert flip_rate(original, ablated) == pytest.approx(expected)
    assert 0 < flip_rate(original, ablated) < 1


def test_flip_rate_hand_computed():
    assert flip_rate(["1", "2", "both_bad", "1"], ["1", "1", "both_good", "1"]) == 0.5


# --- errors -------------------------------------------------------------------------------


def test_unknown_label_is_named():
    with pytest.raises(ValueError, match=r"y_pred has unknown label 'tie' at position 1"):
        accuracy(["1", "2"], ["1", "tie"])
    with pytest.raises(ValueError, match=r"y_b has unknown label 'A'"):
        cohen_kappa(["1"], ["A"])
    with pytest.raises(ValueError, match=r"labels has unknown label 'tie'"):
        collapse_ties(["tie"])


def test_length_mismatch_quotes_both():
    with pytest.raises(ValueError, match="y_true has 2, y_pred has 1"):
        confusion_matrix(["1", "2"], ["1"])
    with pytest.raises(ValueError, match="correct_a has 3, correct_b has 2"):
        mcnemar_p([True, False, True], [True, False])
    with pytest.raises(ValueError, match="original has 1, modified has 2"):
        flip_rate(["1"], ["1", "2"])
    with pytest.raises(ValueError, match="a has 3, b has 2"):
        paired_bootstrap_ci({"a": [True, False, True], "b": [True, False]})


def test_empty_inputs():
    with pytest.raises(ValueError, match="no items given; accuracy is undefined"):
        accuracy([], [])
    with pytest.raises(ValueError, match="no items given; kappa is undefined"):
        cohen_kappa([], [])
    with pytest.raises(ValueError, match="no items given; flip rate is undefined"):
        flip_rate([], [])
    with pytest.raises(ValueError, match="no items given; a bootstrap needs at least one item"):
        paired_bootstrap_ci({"a": []})
    with pytest.raises(ValueError, match="correct_by_judge is empty"):
        paired_bootstrap_ci({})


def test_bootstrap_argument_errors():
    with pytest.raises(ValueError, match="n_boot must be a positive integer, got 0"):
        paired_bootstrap_ci({"a": [True]}, n_boot=0)
    with pytest.raises(ValueError, match=r"level must lie in \(0, 1\), got 95"):
        paired_bootstrap_difference_ci([True], [False], level=95)


def test_correctness_must_be_boolean():
    with pytest.raises(ValueError, match=r"correct_by_judge\['a'\] must hold booleans"):
        paired_bootstrap_ci({"a": [0.5, 1.0]})
    with pytest.raises(ValueError, match="correct_a must hold booleans"):
        mcnemar_p(["yes"], [True])


def test_bootstrap_kappa_ci_equals_a_loop_over_sklearn():
    from sklearn.metrics import cohen_kappa_score
    from sdscore.metrics.agreement import bootstrap_kappa_ci

    rng = np.random.default_rng(5)
    labels = ["1", "2", "both_good", "both_bad"]
    truth = rng.choice(labels, 80)
    pred = np.where(rng.random(80) < 0.6, truth, rng.choice(labels, 80))
    lower, upper = bootstrap_kappa_ci(truth, pred, n_boot=300, seed=7)
    draw = np.random.default_rng(7)
    kappas = []
    for _ in range(300):
        index = draw.integers(0, 80, size=80)
        a, b = truth[index], pred[index]
        if len(set(a) | set(b)) > 1:
            kappas.append(cohen_kappa_score(a, b, labels=labels))
    want = np.quantile(kappas, [0.025, 0.975])
    assert (lower, upper) == pytest.approx(tuple(want), abs=1e-12)
    point = cohen_kappa_score(truth, pred)
    assert lower < point < upper
    assert bootstrap_kappa_ci(["1"] * 5, ["1"] * 5, n_boot=50) == (None, None)  # κ undefined in every resample
