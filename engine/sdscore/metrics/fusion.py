"""Deterministic fusion of per-dimension judge labels into an overall label (TRACE, Appendix E).

Labels: "1" (first response better), "2", "both_good", "both_bad"; "1"/"2" are *decisive*.
Inputs are content C, voice quality VQ and paralinguistics P. Rules:

- ``speakbench`` (released code; the default): C and P both both_bad → both_bad; else the first
  decisive label in the order C, P, VQ; else both_good if C is both_good, else both_bad.
  Reproduces the HCoT human overall label on 485/497 SpeakBench items.
- ``speakbench-paper`` (Algorithm 1 as printed): C decisive → C; else the first decisive of
  P, VQ; else C. 450/497.
- ``s2sarena`` (Algorithms 2–3): labels map to pairs 1→(1,0), 2→(0,1), both_good→(1,1),
  both_bad→(0,0), and — as in the released code — any other value (None, "tie", 1, ...) also
  to (0,0), so this rule never raises on a label. RatingMin is the element-wise min;
  cap = RatingMin(C, P); result = RatingMin(first decisive of C, P, VQ — or C if none, cap).
  296/314 on HCoT S2S-Arena.
- ``majority`` (ablation, Tab. 11): the label held by at least two of (C, VQ, P); when all
  three differ there is no majority and content's label is returned — the same as Python's
  ``Counter((C, VQ, P)).most_common(1)``, which keeps the first label seen.

Every rule except ``s2sarena`` raises ValueError naming an unknown label.
"""

from __future__ import annotations

import numpy as np

from sdscore.metrics._inputs import as_1d, check_labels, check_same_length

JUDGE_LABELS = ("1", "2", "both_good", "both_bad")
DECISIVE = ("1", "2")
FUSION_RULES = ("speakbench", "speakbench-paper", "s2sarena", "majority")

# RatingMin on the pairs (a, b) is a bitwise AND on the code 2a + b.
_PAIR_CODE = {"1": 0b10, "2": 0b01, "both_good": 0b11, "both_bad": 0b00}
_CODE_LABEL = np.array(["both_bad", "2", "1", "both_good"], dtype=object)


def _check_rule(rule: str) -> None:
    if rule not in FUSION_RULES:
        raise ValueError(f"unknown fusion rule {rule!r}; expected one of {list(FUSION_RULES)}")


def _pair_code(label) -> int:
    return _PAIR_CODE.get(label, 0b00) if isinstance(label, str) else 0b00


def fuse(content, voice_quality, paralinguistics, rule: str = "speakbench") -> str:
    """Overall label for one item from its C, VQ and P labels under ``rule`` (see module doc)."""
    _check_rule(rule)
    c, vq, p = content, voice_quality, paralinguistics
    if rule == "s2sarena":
        cap = _pair_code(c) & _pair_code(p)
        first = next((x for x in (c, p, vq) if x in DECISIVE), c)
        return str(_CODE_LABEL[_pair_code(first) & cap])
    for name, label in (("content", c), ("voice_quality", vq), ("paralinguistics", p)):
        if label not in JUDGE_LABELS:
            raise ValueError(f"{name} has unknown label {label!r}; expected one of {list(JUDGE_LABELS)}")
    if rule == "speakbench":
        if c == "both_bad" and p == "both_bad":
            return "both_bad"
        first = next((x for x in (c, p, vq) if x in DECISIVE), None)
        if first is not None:
            return first
        return "both_good" if c == "both_good" else "both_bad"
    if rule == "speakbench-paper":
        if c in DECISIVE:
            return c
        return next((x for x in (p, vq) if x in DECISIVE), c)
    # majority
    if vq == p:
        return vq
    return c


def fuse_many(content, voice_quality, paralinguistics, rule: str = "speakbench") -> np.ndarray:
    """Vectorised ``fuse``: label arrays ``[n]`` (lists, numpy or polars) → object array ``[n]``."""
    _check_rule(rule)
    c = as_1d(content, "content", dtype=object)
    vq = as_1d(voice_quality, "voice_quality", dtype=object)
    p = as_1d(paralinguistics, "paralinguistics", dtype=object)
    check_same_length(content=c, voice_quality=vq, paralinguistics=p)
    if rule != "s2sarena":
        check_labels(c, JUDGE_LABELS, "content")
        check_labels(vq, JUDGE_LABELS, "voice_quality")
        check_labels(p, JUDGE_LABELS, "paralinguistics")
    c_dec, vq_dec, p_dec = ((x == "1") | (x == "2") for x in (c, vq, p))
    if rule == "speakbench":
        fallback = np.where(c == "both_good", "both_good", "both_bad")
        out = np.where(c_dec, c, np.where(p_dec, p, np.where(vq_dec, vq, fallback)))
        out = np.where((c == "both_bad") & (p == "both_bad"), "both_bad", out)
    elif rule == "speakbench-paper":
        out = np.where(c_dec, c, np.where(p_dec, p, np.where(vq_dec, vq, c)))
    elif rule == "s2sarena":
        codes = [np.fromiter((_pair_code(x) for x in arr), dtype=np.int64, count=arr.size) for arr in (c, vq, p)]
        c_code, vq_code, p_code = codes
        first = np.where(c_dec, c_code, np.where(p_dec, p_code, np.where(vq_dec, vq_code, c_code)))
        out = _CODE_LABEL[first & c_code & p_code]
    else:
        out = np.where(vq == p, vq, c)
    return np.asarray(out, dtype=object)
