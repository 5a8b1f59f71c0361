"""Agreement between the judges of pairwise battles (S2S-Arena §5.1 and Table 6).

A verdict is "model_a", "model_b" or "tie" ("tie (bothbad)" counts as a tie). Two verdicts are on
the same battle when they share the prompt and the two models in the same positions: the key
(prompt_id, model_a, model_b); verdicts with the models swapped are compared by
`swap_consistency`, which asks whether the same model (or a tie) wins in both orders.

- `judge_human_agreement`: accuracy of a judge against human verdicts on the battles both judged
  (every judge × human verdict pair of a key), with ties and over decisive pairs only, plus
  Cohen's κ over the same pairs.
- `repeat_consistency`: a judge asked the same battle several times: the share of such battles
  whose verdicts all agree.
- `swap_consistency`: a judge that saw a battle in both orders: the share of (A-B, B-A) pairings
  that pick the same model (or both a tie).
- `inter_annotator_agreement`: several human verdicts on one battle: the share of agreeing pairs.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations, product

import numpy as np
import polars as pl

from sdscore.metrics._inputs import check_columns
from sdscore.metrics.agreement import cohen_kappa

KEY = ("prompt_id", "model_a", "model_b")


def _verdict(winner: str) -> str:
    return "tie" if winner.startswith("tie") else winner


def _by_key(battles: pl.DataFrame, judge: str) -> dict[tuple, list[str]]:
    check_columns(battles, [*KEY, "winner", "judge"], "battles")
    rows = battles.filter((pl.col("judge") == judge) & pl.col("prompt_id").is_not_null())
    groups: dict[tuple, list[str]] = defaultdict(list)
    for prompt, a, b, winner in rows.select(*KEY, "winner").iter_rows():
        groups[(prompt, a, b)].append(_verdict(winner))
    return groups


VERDICTS = ("model_a", "model_b", "tie")


def _kappa(first: list[str], second: list[str]) -> float | None:
    """Cohen's κ over verdict pairs (metrics.agreement's); None when undefined (no pairs, one label)."""
    if not first:
        return None
    value = cohen_kappa(first, second, VERDICTS)
    return None if np.isnan(value) else value


def judge_human_agreement(battles: pl.DataFrame, judge: str, human: str = "human") -> dict:
    """Agreement of `judge` with `human` verdicts on the battles both judged (see the module)."""
    judged, humans = _by_key(battles, judge), _by_key(battles, human)
    pairs = [(j, h) for key in judged.keys() & humans.keys() for j, h in product(judged[key], humans[key])]
    decisive = [(j, h) for j, h in pairs if "tie" not in (j, h)]
    return {
        "n_battles": len(judged.keys() & humans.keys()),
        "n_pairs": len(pairs),
        "accuracy": float(np.mean([j == h for j, h in pairs])) if pairs else None,
        "kappa": _kappa([j for j, _ in pairs], [h for _, h in pairs]),
        "n_decisive_pairs": len(decisive),
        "accuracy_without_ties": float(np.mean([j == h for j, h in decisive])) if decisive else None,
        "kappa_without_ties": _kappa([j for j, _ in decisive], [h for _, h in decisive]),
    }


def repeat_consistency(battles: pl.DataFrame, judge: str) -> dict:
    """Share of battles judged more than once by `judge` whose verdicts all agree."""
    repeated = [v for v in _by_key(battles, judge).values() if len(v) > 1]
    return {"n_repeated_battles": len(repeated),
            "consistency": float(np.mean([len(set(v)) == 1 for v in repeated])) if repeated else None}


def swap_consistency(battles: pl.DataFrame, judge: str) -> dict:
    """Share of (A-B, B-A) pairings by `judge` that pick the same model, or a tie both times."""
    groups = _by_key(battles, judge)
    n = agree = 0
    for (prompt, a, b), forward in groups.items():
        if a >= b:  # count each unordered pair once, from its forward order
            continue
        for v_forward, v_backward in product(forward, groups.get((prompt, b, a), [])):
            won_forward = {"model_a": a, "model_b": b}.get(v_forward, "tie")
            won_backward = {"model_a": b, "model_b": a}.get(v_backward, "tie")
            n += 1
            agree += won_forward == won_backward
    return {"n_swapped_pairs": n, "consistency": agree / n if n else None}


def inter_annotator_agreement(battles: pl.DataFrame, human: str = "human") -> dict:
    """Share of agreeing pairs among battles with several `human` verdicts."""
    groups = [v for v in _by_key(battles, human).values() if len(v) > 1]
    pairs = [x == y for v in groups for x, y in combinations(v, 2)]
    return {"n_battles": len(groups), "n_pairs": len(pairs),
            "agreement": float(np.mean(pairs)) if pairs else None}
