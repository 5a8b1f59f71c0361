"""SPEARBench naturalness metrics (Section III.C, Table III): dialect entrainment and variance, AVD
correlation, speaker-normalised pitch variation, and paired tests of a system against a reference.

Definitions follow the authors' released code where the paper is silent (see RESEARCH.md):

- dialectal entrainment β: the question and answer log-logit matrices [n, k] are flattened to
  n·k values each, each flattened vector is min–max normalised by its own minimum and maximum,
  and β is the least-squares slope (``np.polyfit(q, a, 1)[0]``) of answer on question. The
  normalisation makes β the slope of the raw fit times range(q)/range(a).
- dialectal variance tr(Σ): the trace of the answers' covariance matrix, i.e. the sum of the
  per-dimension variances with ddof = 1, on the raw log-logits.
- AVD correlation: Pearson's ρ between question and answer values of one dimension.
- speaker normalisation: each F0 feature divided by the mean ``f0_mean`` of the rows of the same
  group (the authors group by the answered speaker within one system's file: (system, asker)).
  A group whose mean is 0 or has no finite ``f0_mean`` gives NaN, as pandas does there.
- pitch variation: per feature, the std (ddof = 1) of its finite normalised values (0 for one
  value; a feature with none is left out), then the mean over the features.
- paired tests: Wilcoxon signed-rank (two-sided, zero differences dropped) of a system against
  the reference on rows paired by question, and Friedman's test over k ≥ 3 systems answering the
  same questions (the paper quotes a "paired Friedman test"; with two systems it is a sign test,
  so the two-system test here is Wilcoxon's, which also uses the size of the differences).

Degenerate inputs (too few rows, a constant vector, all differences zero) raise ValueError with
the reason; callers turn it into a null value with that reason.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
from scipy import stats

from sdscore.metrics._inputs import as_finite_1d, check_same_length

WILCOXON = "Wilcoxon signed-rank test (two-sided; zero differences dropped; scipy.stats.wilcoxon)"
FRIEDMAN = "Friedman test (scipy.stats.friedmanchisquare) over the questions every system answered"


def _as_finite_matrix(values, name: str) -> np.ndarray:
    """``values`` ([n, k] array or a list of equal-length vectors) as a finite float64 matrix."""
    try:
        matrix = np.asarray(values, dtype=np.float64)
    except ValueError:
        raise ValueError(f"{name} must be a matrix [rows, dims] of numbers (rows of equal length)") from None
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be 2-D [rows, dims], got shape {matrix.shape}")
    bad = np.argwhere(~np.isfinite(matrix))
    if bad.size:
        row, col = bad[0]
        raise ValueError(f"{name} has a non-finite value {matrix[row, col]} at row {row}, dim {col}")
    return matrix


def min_max_normalise(values) -> np.ndarray:
    """``(x − min) / (max − min)`` of a finite 1-D array; ValueError when it is empty or constant."""
    x = as_finite_1d(values, "values")
    if x.size == 0:
        raise ValueError("cannot min-max normalise an empty vector")
    low, high = float(x.min()), float(x.max())
    if high == low:
        raise ValueError(f"cannot min-max normalise a constant vector (every value is {low})")
    return (x - low) / (high - low)


def dialectal_entrainment(question, answer) -> float:
    """β: slope of the min–max-normalised flattened answer log-logits on the question's ([n, k] each)."""
    q = _as_finite_matrix(question, "question")
    a = _as_finite_matrix(answer, "answer")
    if q.shape != a.shape:
        raise ValueError(f"question and answer shapes differ: {q.shape} and {a.shape}")
    if q.shape[0] < 1:
        raise ValueError("dialectal entrainment needs at least one question/answer pair")
    try:
        qn = min_max_normalise(q.ravel())
    except ValueError as error:
        raise ValueError(f"question log-logits: {error}") from None
    try:
        an = min_max_normalise(a.ravel())
    except ValueError as error:
        raise ValueError(f"answer log-logits: {error}") from None
    return float(np.polyfit(qn, an, 1)[0])


def dialectal_variance(answer) -> float:
    """tr(Σ) of the answers' log-logits [n, k]: Σ_k var(column k, ddof=1); needs n ≥ 2."""
    a = _as_finite_matrix(answer, "answer")
    if a.shape[0] < 2:
        raise ValueError(f"dialectal variance needs at least 2 answers, got {a.shape[0]}")
    return float(a.var(axis=0, ddof=1).sum())


def avd_correlation(question, answer) -> float:
    """Pearson's ρ between question and answer values of one emotion dimension (1-D, n ≥ 2)."""
    q = as_finite_1d(question, "question")
    a = as_finite_1d(answer, "answer")
    check_same_length(question=q, answer=a)
    if q.size < 2:
        raise ValueError(f"a correlation needs at least 2 question/answer pairs, got {q.size}")
    for name, x in (("question", q), ("answer", a)):
        if x.max() == x.min():
            raise ValueError(f"the {name} values are constant ({x[0]}), so the correlation is undefined")
    qc, ac = q - q.mean(), a - a.mean()
    return float(np.clip(qc @ ac / np.sqrt((qc @ qc) * (ac @ ac)), -1.0, 1.0))


def speaker_normalise(features, f0_mean, groups: Sequence[Hashable]) -> np.ndarray:
    """``features`` [n, k] divided row-wise by the mean finite ``f0_mean`` of the row's group.

    NaN in ``features`` stays NaN; a group without a finite f0_mean, or whose mean is 0, gives NaN
    rows. ``groups`` holds one hashable per row (e.g. (system, asker); None is a group of its own).
    """
    values = np.asarray(features, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"features must be 2-D [rows, features], got shape {values.shape}")
    means = np.asarray(f0_mean, dtype=np.float64)
    if means.ndim != 1:
        raise ValueError(f"f0_mean must be 1-D, got shape {means.shape}")
    groups = list(groups)
    check_same_length(features=values, f0_mean=means, groups=groups)
    index: dict[Hashable, list[int]] = {}
    for row, group in enumerate(groups):
        index.setdefault(group, []).append(row)
    divisor = np.full(len(groups), np.nan)
    for rows in index.values():
        finite = means[rows][np.isfinite(means[rows])]
        mean = float(finite.mean()) if finite.size else np.nan
        divisor[rows] = np.nan if mean == 0 else mean
    return values / divisor[:, None]


def pitch_variation(normalised) -> float:
    """Mean over features (columns of [n, k]) of the std (ddof=1) of each one's finite values."""
    values = np.asarray(normalised, dtype=np.float64)
    if values.ndim != 2:
        raise ValueError(f"normalised must be 2-D [rows, features], got shape {values.shape}")
    stds = []
    for column in values.T:
        finite = column[np.isfinite(column)]
        if finite.size > 1:
            stds.append(float(finite.std(ddof=1)))
        elif finite.size == 1:
            stds.append(0.0)
    if not stds:
        raise ValueError("no feature has a finite speaker-normalised value")
    return float(np.mean(stds))


def paired_wilcoxon(system, reference) -> dict:
    """Wilcoxon signed-rank test of ``system`` against ``reference`` (1-D, paired by position).

    Returns test (its name), n_pairs, n_nonzero, statistic (scipy's: the smaller rank sum),
    p_value, mean_difference and median_difference (system − reference).
    """
    x = as_finite_1d(system, "system")
    y = as_finite_1d(reference, "reference")
    check_same_length(system=x, reference=y)
    difference = x - y
    nonzero = int(np.count_nonzero(difference))
    if x.size == 0:
        raise ValueError("no paired rows")
    if nonzero == 0:
        raise ValueError(f"all {x.size} paired differences are zero, so the signed-rank test is undefined")
    result = stats.wilcoxon(x, y, zero_method="wilcox", alternative="two-sided")
    return {
        "test": WILCOXON,
        "n_pairs": int(x.size),
        "n_nonzero": nonzero,
        "statistic": float(result.statistic),
        "p_value": float(result.pvalue),
        "mean_difference": float(difference.mean()),
        "median_difference": float(np.median(difference)),
    }


def _friedman_matrix(matrix, min_treatments: int, treatments: str, blocks: str) -> np.ndarray:
    """A finite [n blocks, k treatments] matrix with k ≥ min_treatments and n ≥ 2, else a ValueError
    saying which (in the caller's words for treatments and blocks)."""
    values = _as_finite_matrix(matrix, "matrix")
    n, k = values.shape
    if k < min_treatments:
        raise ValueError(f"Friedman's test needs at least {min_treatments} {treatments}, got {k}")
    if n < 2:
        raise ValueError(f"Friedman's test needs at least 2 {blocks}, got {n}")
    return values


def paired_friedman(matrix) -> dict:
    """Friedman's test on [n questions, k ≥ 3 systems] (one block per question)."""
    values = _friedman_matrix(matrix, 3, "systems", "questions answered by every system")
    n, k = values.shape
    if np.all(values == values[:, :1]):
        raise ValueError("every system has the same value on every question, so the test is undefined")
    result = stats.friedmanchisquare(*values.T)
    return {"test": FRIEDMAN, "n_questions": int(n), "n_systems": int(k),
            "statistic": float(result.statistic), "p_value": float(result.pvalue)}


FRIEDMAN_PAIRED = ("Friedman test of a system against the reference (k = 2 related samples, blocks = questions; "
                   "scipy.stats.friedmanchisquare's statistic and tie correction, which scipy computes for k >= 3 "
                   "only; for k = 2 it equals (n+ - n-)^2 / (n+ + n-), ties dropped)")


def friedman_statistic(matrix) -> dict:
    """Friedman's test on [n blocks, k ≥ 2 treatments]: ranks within each block (ties share their mean
    rank), chi² = (12 / (n k (k+1)) Σ_j R_j² − 3 n (k+1)) / C with the tie correction
    C = 1 − Σ (t³ − t) / (n k (k² − 1)), p from χ²(k − 1) — scipy.stats.friedmanchisquare's formula
    (equal to it for k ≥ 3), open to k = 2, the paper's "paired Friedman test" of a system against the
    human answers."""
    values = _friedman_matrix(matrix, 2, "related samples", "blocks (questions)")
    n, k = values.shape
    ranks = stats.rankdata(values, axis=1)
    ties = 0.0
    for row in values:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts ** 3 - counts).sum())
    correction = 1.0 - ties / (n * k * (k * k - 1))
    if correction <= 0:
        raise ValueError("every block ties all its values, so the test is undefined")
    sums = ranks.sum(axis=0)
    chi2 = (12.0 / (n * k * (k + 1)) * float((sums ** 2).sum()) - 3.0 * n * (k + 1)) / correction
    chi2 = max(chi2, 0.0)
    return {"test": FRIEDMAN_PAIRED, "n_blocks": int(n), "k": int(k), "statistic": float(chi2),
            "p_value": float(stats.chi2.sf(chi2, k - 1))}
