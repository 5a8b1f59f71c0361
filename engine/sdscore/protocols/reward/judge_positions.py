"""Position bias of a pairwise audio judge (`score reward --judge openai`), from its results columns.

Read from the per-call columns shown_first and picked of the pairs without error:
- position_consistency: the share of pairs asked in both orders whose two answers picked the same
  episode (a judge that always answers "1" scores 0);
- first_position_share: the share of all answers that picked the dialogue shown first (0.5 unbiased);
- accuracy_chosen_first / accuracy_rejected_first: the share of answers that picked the chosen
  episode, among calls that showed it first / second.
"""

from __future__ import annotations

import polars as pl

from sdscore.metrics._inputs import error_mask


def _share(hits: int, n: int) -> float | None:
    return hits / n if n else None


def position_summary(results: pl.DataFrame) -> dict | None:
    """The summary above; None when the results are not a pairwise judge's (no list columns shown_first / picked)."""
    if not {"shown_first", "picked"} <= set(results.columns) or \
            not all(isinstance(results[c].dtype, pl.List) for c in ("shown_first", "picked")):
        return None
    scored = results.filter(pl.Series(~error_mask(results)))
    n_both = consistent = answers = first = 0
    shown = {"chosen": [0, 0], "rejected": [0, 0]}  # side shown first → [calls, chosen picked]
    for firsts, picks in scored.select("shown_first", "picked").iter_rows():
        if not firsts or not picks or len(firsts) != len(picks) or any(p is None for p in picks):
            continue
        if sorted(firsts) == ["chosen", "rejected"]:
            n_both += 1
            consistent += picks[0] == picks[1]
        for side, pick in zip(firsts, picks):
            answers += 1
            first += pick == side
            shown[side][0] += 1
            shown[side][1] += pick == "chosen"
    return {"n_pairs_both_orders": n_both, "position_consistency": _share(consistent, n_both),
            "n_answers": answers, "first_position_share": _share(first, answers),
            "accuracy_chosen_first": _share(shown["chosen"][1], shown["chosen"][0]),
            "accuracy_rejected_first": _share(shown["rejected"][1], shown["rejected"][0])}
