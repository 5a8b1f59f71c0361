"""Position bias of a judge that picks among options shown in some order, and its consistency across orders.

share[p] is the fraction of answers whose pick (a choice, or the top of a ranking) sat at position p.
A judge with no preference for a position has every share near 1/k; ``position_bias`` rescales the
largest share so that 0 means "no position favoured" (max share 1/k) and 1 means "always the same
position". Across orders: for each instance asked in several orders, the share of its answers that
pick its most frequent candidate (``order_agreement``; 1/k for a judge that always picks a position
when every order is asked) and whether every order picked the same candidate (``order_consistent``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np


def position_shares(positions: Sequence[int], n_options: int) -> np.ndarray:
    """float64 [n_options]: the share of answers at each position (0 = first shown)."""
    if isinstance(n_options, bool) or not isinstance(n_options, (int, np.integer)) or n_options < 2:
        raise ValueError(f"n_options must be an integer >= 2, got {n_options!r}")
    picks = np.asarray(positions, dtype=np.int64).reshape(-1)
    if picks.size == 0:
        raise ValueError("no answers to measure position bias on")
    bad = np.flatnonzero((picks < 0) | (picks >= n_options))
    if bad.size:
        raise ValueError(f"positions[{bad[0]}] = {picks[bad[0]]} is outside 0..{n_options - 1}")
    return np.bincount(picks, minlength=n_options) / picks.size


def position_bias(shares) -> float:
    """(max share − 1/k) / (1 − 1/k): 0 when no position is favoured beyond chance, 1 when one always wins."""
    shares = np.asarray(shares, dtype=np.float64)
    k = shares.size
    if k < 2 or not np.isclose(shares.sum(), 1.0):
        raise ValueError(f"shares must be k >= 2 fractions summing to 1, got {shares.tolist()}")
    return float((shares.max() - 1.0 / k) / (1.0 - 1.0 / k))


def order_agreement(picks_per_instance: Sequence[Sequence[object]]) -> dict:
    """Over instances asked in >= 2 orders: mean share of answers that agree with the instance's most
    frequent pick (``order_agreement``) and the share of instances whose orders all agree
    (``order_consistent``); None when no instance was asked twice."""
    shares, unanimous = [], []
    for picks in picks_per_instance:
        if picks is None or len(picks) < 2:
            continue
        top = Counter(picks).most_common(1)[0][1]
        shares.append(top / len(picks))
        unanimous.append(top == len(picks))
    if not shares:
        return {"order_agreement": None, "order_consistent": None, "n_instances": 0}
    return {"order_agreement": float(np.mean(shares)), "order_consistent": float(np.mean(unanimous)),
            "n_instances": len(shares)}
