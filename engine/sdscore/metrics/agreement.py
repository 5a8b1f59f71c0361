"""Judge–human agreement statistics (TRACE §4–5): accuracy, paired bootstrap CIs, McNemar, Cohen's κ,
confusion matrix, and the probes P2 (flip rate) and P3 (winner-on-bad, winner-slice accuracy).

Labels default to the typed 4-way set "1", "2", "both_good", "both_bad"; pass ``labels`` for
other sets (e.g. 3-way after ``collapse_ties``). Scalar functions return NaN when a value is
undefined (no items in the conditioning slice, κ with chance agreement 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

from sdscore.metrics._inputs import as_bool_1d, as_label_array, check_same_length
from sdscore.metrics.fusion import DECISIVE, JUDGE_LABELS

TIE = "tie"
THREE_WAY_LABELS = ("1", "2", TIE)
_BOOTSTRAP_CELLS = 1 << 22  # resampled indices held at once (32 MiB of int64)


def _label_pair(
    first, second, labels: Sequence[str], names: tuple[str, str] = ("y_true", "y_pred")
) -> tuple[np.ndarray, np.ndarray]:
    first = as_label_array(first, labels, names[0])
    second = as_label_array(second, labels, names[1])
    check_same_length(**{names[0]: first, names[1]: second})
    return first, second


def collapse_ties(labels) -> np.ndarray:
    """Typed ties → untyped: both_good and both_bad become "tie" (TRACE's 3-way agreement)."""
    labels = as_label_array(labels, JUDGE_LABELS, "labels")
    return np.where(np.isin(labels, ("both_good", "both_bad")), TIE, labels).astype(object)


def correctness(y_true, y_pred, labels: Sequence[str] = JUDGE_LABELS) -> np.ndarray:
    """Boolean ``[n]``: item-wise agreement of prediction and reference."""
    y_true, y_pred = _label_pair(y_true, y_pred, labels)
    return y_true == y_pred


def accuracy(y_true, y_pred, labels: Sequence[str] = JUDGE_LABELS) -> float:
    """Share of items whose predicted label equals the reference label (4-way by default)."""
    hits = correctness(y_true, y_pred, labels)
    if hits.size == 0:
        raise ValueError("no items given; accuracy is undefined")
    return float(hits.mean())


def _bootstrap_means(correct: list[np.ndarray], n_boot: int, seed: int) -> np.ndarray:
    """``[len(correct), n_boot]`` resampled means, every array resampled with the same indices."""
    n = correct[0].size
    rng = np.random.default_rng(seed)
    stacked = np.stack(correct).astype(np.float64)
    means = np.empty((len(correct), n_boot))
    chunk = max(1, _BOOTSTRAP_CELLS // n)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        index = rng.integers(0, n, size=(stop - start, n))
        means[:, start:stop] = stacked[:, index].mean(axis=2)
    return means


def _check_bootstrap_args(n_boot: int, level: float) -> None:
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")


def paired_bootstrap_ci(
    correct_by_judge: Mapping[str, np.ndarray], n_boot: int = 10_000, seed: int = 0, level: float = 0.95
) -> dict[str, dict[str, float]]:
    """Accuracy and percentile CI per judge from a paired non-parametric bootstrap.

    Each of the ``n_boot`` resamples draws n item indices with replacement (numpy Generator
    seeded with ``seed``) and applies the SAME indices to every judge, keeping example-wise
    pairing. Interval: the (1 − level)/2 and (1 + level)/2 quantiles of the resampled accuracies
    (numpy's default linear interpolation). Returns {judge: {accuracy, lower, upper}}.
    """
    _check_bootstrap_args(n_boot, level)
    if not correct_by_judge:
        raise ValueError("correct_by_judge is empty; give at least one judge")
    names = list(correct_by_judge)
    correct = [as_bool_1d(correct_by_judge[name], f"correct_by_judge[{name!r}]") for name in names]
    check_same_length(**{name: array for name, array in zip(names, correct)})
    if correct[0].size == 0:
        raise ValueError("no items given; a bootstrap needs at least one item")
    means = _bootstrap_means(correct, n_boot, seed)
    alpha = 1.0 - level
    lower, upper = np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=1)
    return {
        name: {"accuracy": float(array.mean()), "lower": float(lo), "upper": float(hi)}
        for name, array, lo, hi in zip(names, correct, lower, upper)
    }


def paired_bootstrap_difference_ci(
    correct_a, correct_b, n_boot: int = 10_000, seed: int = 0, level: float = 0.95
) -> dict[str, float]:
    """Accuracy difference a − b with the percentile CI of the same paired bootstrap."""
    _check_bootstrap_args(n_boot, level)
    a = as_bool_1d(correct_a, "correct_a")
    b = as_bool_1d(correct_b, "correct_b")
    check_same_length(correct_a=a, correct_b=b)
    if a.size == 0:
        raise ValueError("no items given; a bootstrap needs at least one item")
    means = _bootstrap_means([a, b], n_boot, seed)
    alpha = 1.0 - level
    lower, upper = np.quantile(means[0] - means[1], [alpha / 2, 1 - alpha / 2])
    return {"difference": float(a.mean() - b.mean()), "lower": float(lower), "upper": float(upper)}


def mcnemar_p(correct_a, correct_b, exact: bool = True, correction: bool = True) -> float:
    """Two-sided McNemar p-value on item-wise correctness of two judges over the same items.

    With b = #(a right, b wrong) and c = #(a wrong, b right): exact → min(1, 2·Binom(b+c, ½).cdf(min(b, c)));
    otherwise chi² (1 df) of (|b − c| − 1)²/(b + c), without the −1 when ``correction`` is False —
    both as statsmodels' ``mcnemar``. No discordant items (b + c = 0) gives 1.0 (statsmodels' chi²
    gives 0 there, from a division by zero).
    """
    a = as_bool_1d(correct_a, "correct_a")
    b_arr = as_bool_1d(correct_b, "correct_b")
    check_same_length(correct_a=a, correct_b=b_arr)
    b = int((a & ~b_arr).sum())
    c = int((~a & b_arr).sum())
    if b + c == 0:
        return 1.0
    if exact:
        return float(min(1.0, 2.0 * stats.binom.cdf(min(b, c), b + c, 0.5)))
    statistic = (abs(b - c) - int(correction)) ** 2 / (b + c)
    return float(stats.chi2.sf(statistic, df=1))


def confusion_matrix(y_true, y_pred, labels: Sequence[str] = JUDGE_LABELS) -> np.ndarray:
    """Int64 ``[k, k]`` counts: row = reference label, column = predicted label, in ``labels`` order."""
    y_true, y_pred = _label_pair(y_true, y_pred, labels)
    position = {label: i for i, label in enumerate(labels)}
    k = len(labels)
    rows = np.fromiter((position[y] for y in y_true), dtype=np.int64, count=y_true.size)
    cols = np.fromiter((position[y] for y in y_pred), dtype=np.int64, count=y_pred.size)
    return np.bincount(rows * k + cols, minlength=k * k).reshape(k, k)


def cohen_kappa(y_a, y_b, labels: Sequence[str] = JUDGE_LABELS) -> float:
    """Cohen's κ = (p_o − p_e)/(1 − p_e), p_e from the two raters' marginals; NaN when p_e = 1."""
    y_a, y_b = _label_pair(y_a, y_b, labels, ("y_a", "y_b"))
    table = confusion_matrix(y_a, y_b, labels).astype(np.float64)
    n = table.sum()
    if n == 0:
        raise ValueError("no items given; kappa is undefined")
    observed = np.trace(table) / n
    expected = float(table.sum(axis=1) @ table.sum(axis=0)) / n**2
    if expected == 1.0:
        return float("nan")
    return float((observed - expected) / (1.0 - expected))


def bootstrap_kappa_ci(y_a, y_b, labels: Sequence[str] = JUDGE_LABELS, n_boot: int = 10_000, seed: int = 0,
                       level: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile CI of Cohen's κ over ``n_boot`` resamples of the items (numpy Generator seeded
    with ``seed``, n indices with replacement per resample, as `paired_bootstrap_ci` draws them).
    Resamples where κ is undefined (one label only) are left out; (None, None) if all are."""
    _check_bootstrap_args(n_boot, level)
    y_a, y_b = _label_pair(y_a, y_b, labels, ("y_a", "y_b"))
    n, k = y_a.size, len(labels)
    if n == 0:
        raise ValueError("no items given; kappa is undefined")
    position = {label: i for i, label in enumerate(labels)}
    codes = np.fromiter((position[a] * k + position[b] for a, b in zip(y_a, y_b)), dtype=np.int64, count=n)
    rng = np.random.default_rng(seed)
    kappas = np.empty(n_boot)
    chunk = max(1, _BOOTSTRAP_CELLS // n)
    for start in range(0, n_boot, chunk):
        stop = min(start + chunk, n_boot)
        index = rng.integers(0, n, size=(stop - start, n))
        offsets = np.arange(stop - start)[:, None] * (k * k)
        tables = np.bincount((codes[index] + offsets).ravel(), minlength=(stop - start) * k * k)
        tables = tables.reshape(stop - start, k, k).astype(np.float64) / n
        observed = np.trace(tables, axis1=1, axis2=2)
        expected = np.einsum("bi,bi->b", tables.sum(axis=2), tables.sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            kappas[start:stop] = np.where(expected < 1.0, (observed - expected) / (1.0 - expected), np.nan)
    kappas = kappas[np.isfinite(kappas)]
    if kappas.size == 0:
        return None, None
    alpha = 1.0 - level
    lower, upper = np.quantile(kappas, [alpha / 2, 1 - alpha / 2])
    return float(lower), float(upper)


def winner_on_bad(y_true, y_pred) -> float:
    """P3: P(Ŷ ∈ {1, 2} | Y = both_bad) — fabricated winners on unacceptable pairs (lower is better)."""
    y_true, y_pred = _label_pair(y_true, y_pred, JUDGE_LABELS)
    bad = y_true == "both_bad"
    if not bad.any():
        return float("nan")
    return float(np.isin(y_pred[bad], DECISIVE).mean())


def winner_slice_accuracy(y_true, y_pred) -> float:
    """P3: P(Ŷ = Y | Y ∈ {1, 2}) — accuracy where a legitimate winner exists (higher is better)."""
    y_true, y_pred = _label_pair(y_true, y_pred, JUDGE_LABELS)
    winner = np.isin(y_true, DECISIVE)
    if not winner.any():
        return float("nan")
    return float((y_pred[winner] == y_true[winner]).mean())


def flip_rate(original, modified, labels: Sequence[str] = JUDGE_LABELS) -> float:
    """P2: share of items whose fused overall label changed after one dimension was set to both_good."""
    original, modified = _label_pair(original, modified, labels, ("original", "modified"))
    if original.size == 0:
        raise ValueError("no items given; flip rate is undefined")
    return float((original != modified).mean())
