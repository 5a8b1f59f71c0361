"""Agreement of several raters' rankings of the same items: Kendall's coefficient of concordance W.

SpeakerSleuth reports W = 0.860 for three people ranking four voice-cloning candidates (Table 5's
ground truth). With m raters, n items and r_ij the rank rater j gives item i (ties as mid-ranks):
R_i = Σ_j r_ij, S = Σ_i (R_i − m(n+1)/2)², and with ties corrected
W = 12 S / (m²(n³ − n) − m Σ_j T_j), T_j = Σ over rater j's tie groups of (t³ − t).
W is 1 when every rater gives the same order and 0 when the rank sums are all equal.
"""

from __future__ import annotations

import numpy as np


def _check_ranks(ranks) -> np.ndarray:
    array = np.asarray(ranks, dtype=np.float64)
    if array.ndim != 2 or array.shape[0] < 2 or array.shape[1] < 2:
        raise ValueError(f"ranks must be [raters, items] with at least 2 of each, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("ranks must be finite numbers")
    n = array.shape[1]
    for rater, row in enumerate(array):
        if not np.isclose(row.sum(), n * (n + 1) / 2) or row.min() < 1 or row.max() > n:
            raise ValueError(
                f"rater {rater}'s ranks {row.tolist()} are not ranks 1..{n} (ties as mid-ranks, summing to {n * (n + 1) // 2})"
            )
    return array


def ranks_of(scores, higher_first: bool = True) -> np.ndarray:
    """Ranks 1..n of each row of scores [raters, items] (1 = best), ties as mid-ranks."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError(f"scores must be [raters, items], got shape {scores.shape}")
    keyed = -scores if higher_first else scores
    out = np.empty_like(keyed)
    for j, row in enumerate(keyed):
        order = np.argsort(row, kind="stable")
        ranks = np.empty(row.size)
        ranks[order] = np.arange(1, row.size + 1)
        for value in np.unique(row):
            tied = row == value
            ranks[tied] = ranks[tied].mean()
        out[j] = ranks
    return out


def kendalls_w(ranks) -> float:
    """Kendall's W of ranks [raters, items] (1 = best, ties as mid-ranks), tie-corrected."""
    array = _check_ranks(ranks)
    m, n = array.shape
    totals = array.sum(axis=0)
    s = float(((totals - m * (n + 1) / 2) ** 2).sum())
    ties = 0.0
    for row in array:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts.astype(np.float64) ** 3 - counts).sum())
    denominator = m**2 * (n**3 - n) - m * ties
    if denominator <= 0:
        raise ValueError("every rater ties every item: W is undefined")
    return 12.0 * s / denominator
