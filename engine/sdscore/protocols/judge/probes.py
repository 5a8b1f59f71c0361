"""TRACE's probes of how a judge uses its dimensions (§4.2, Appendix F), on its C/VQ/P predictions.

P1 and P2 are counterfactuals on the fusion input, as the paper defines them: a dimension of the
judge's own prediction is set to both_good and the same fusion rule is applied again, so they
need the judge's labels, not a new judge call. P1: P resolves when it is decisive and the re-fused
label is decisive, VQ when the re-fused label is decisive otherwise; its decision accuracy compares
the re-fused label with the human label of the resolving dimension (None when no item qualifies).
P3 compares the fused overall label with the human one.
"""

from __future__ import annotations

import numpy as np

from sdscore.metrics.agreement import flip_rate, winner_on_bad, winner_slice_accuracy
from sdscore.metrics.fusion import DECISIVE, fuse_many
from sdscore.protocols.judge.interface import DIMENSIONS


def _fraction(mask: np.ndarray) -> float | None:
    return float(mask.mean()) if mask.size else None


def content_counterfactual(content, voice_quality, paralinguistics, rule: str = "speakbench", labels=None) -> dict:
    """P1: force C = both_good, re-fuse, and give the share of items P, VQ or neither ("tie") resolves;
    with human ``labels`` {paralinguistics, voice_quality}, how often the resolving label is right."""
    content = np.asarray(content, dtype=object)
    vq = np.asarray(voice_quality, dtype=object)
    para = np.asarray(paralinguistics, dtype=object)
    forced = fuse_many(np.full(content.size, "both_good", dtype=object), vq, para, rule=rule)
    decisive = np.isin(forced, DECISIVE)
    by_p = decisive & np.isin(para, DECISIVE)
    by_vq = decisive & ~by_p
    out: dict = {
        "n": int(content.size),
        "resolved_by": {
            "paralinguistics": _fraction(by_p),
            "voice_quality": _fraction(by_vq),
            "tie": _fraction(~decisive),
        },
    }
    if labels is not None:
        accuracy = {}
        for name, mask in (("paralinguistics", by_p), ("voice_quality", by_vq)):
            truth = np.asarray(labels[name], dtype=object)
            mask = mask & np.array([t is not None for t in truth], dtype=bool)
            accuracy[name] = _fraction(forced[mask] == truth[mask])
        out["decision_accuracy"] = accuracy
    return out


def ablation_flip_rates(content, voice_quality, paralinguistics, rule: str = "speakbench") -> dict[str, float | None]:
    """P2: for each dimension, the share of items whose fused label changes when it is set to both_good."""
    predicted = {
        "content": np.asarray(content, dtype=object),
        "voice_quality": np.asarray(voice_quality, dtype=object),
        "paralinguistics": np.asarray(paralinguistics, dtype=object),
    }
    n = predicted["content"].size
    if n == 0:
        return dict.fromkeys(DIMENSIONS)
    base = fuse_many(*(predicted[d] for d in DIMENSIONS), rule=rule)
    rates: dict[str, float | None] = {}
    for dimension in DIMENSIONS:
        changed = dict(predicted)
        changed[dimension] = np.full(n, "both_good", dtype=object)
        rates[dimension] = flip_rate(base, fuse_many(*(changed[d] for d in DIMENSIONS), rule=rule))
    return rates


def attribution(overall_true, overall_pred) -> dict[str, float | None]:
    """P3: winner-on-bad (lower is better) and winner-slice accuracy (higher is better); None if undefined."""
    values = {
        "winner_on_bad": winner_on_bad(overall_true, overall_pred),
        "winner_slice_accuracy": winner_slice_accuracy(overall_true, overall_pred),
    }
    return {k: None if np.isnan(v) else v for k, v in values.items()}
