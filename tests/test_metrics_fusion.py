"""Fusion rules against the HCoT human labels (TRACE) and a literal transcription of Algorithms 1–3."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sdscore.metrics.fusion import FUSION_RULES, JUDGE_LABELS, fuse, fuse_many

HCOT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "hcot"
ALL_TRIPLES = list(itertools.product(JUDGE_LABELS, repeat=3))  # (C, VQ, P)


def _hcot(name: str) -> list[dict]:
    path = HCOT_DIR / f"{name}.json"
    if not path.exists():
        pytest.skip(f"HCoT labels not found at {path} (shared/ is not checked out beside the repo)")
    return json.loads(path.read_text())


@pytest.mark.parametrize(
    ("dataset", "rule", "expected", "total"),
    [
        ("speakbench", "speakbench", 485, 497),
        ("speakbench", "speakbench-paper", 450, 497),
        ("s2sarena", "s2sarena", 296, 314),
    ],
)
def test_fusing_hcot_human_labels_reproduces_human_overall(dataset, rule, expected, total):
    items = _hcot(dataset)
    labels = {key: [item["label"][key] for item in items] for key in ("content", "voice_quality", "paralinguistics", "overall")}
    fused = fuse_many(labels["content"], labels["voice_quality"], labels["paralinguistics"], rule=rule)
    assert len(items) == total
    assert int((fused == np.array(labels["overall"], dtype=object)).sum()) == expected
    triples = zip(labels["content"], labels["voice_quality"], labels["paralinguistics"])
    one_by_one = [fuse(c, vq, p, rule=rule) for c, vq, p in triples]
    assert one_by_one == fused.tolist()


# Literal transcriptions of the paper's pseudocode, as independent references.
def _algorithm1(c, vq, p):
    if c in ("1", "2"):
        return c
    if c == "both_good":
        return p if p in ("1", "2") else vq if vq in ("1", "2") else "both_good"
    if c == "both_bad":
        return p if p in ("1", "2") else vq if vq in ("1", "2") else "both_bad"
    raise AssertionError


def _rating_min(a, b):
    to_pair = {"1": (1, 0), "2": (0, 1), "both_good": (1, 1), "both_bad": (0, 0)}
    pa, pb = to_pair.get(a, (0, 0)), to_pair.get(b, (0, 0))
    return {v: k for k, v in to_pair.items()}[(min(pa[0], pb[0]), min(pa[1], pb[1]))]


def _algorithm2(c, vq, p):
    cap = _rating_min(c, p)
    if c in ("1", "2"):
        return _rating_min(c, cap)
    if p in ("1", "2"):
        return _rating_min(p, cap)
    if vq in ("1", "2"):
        return _rating_min(vq, cap)
    return _rating_min(c, cap)


@pytest.mark.parametrize(("rule", "reference"), [("speakbench-paper", _algorithm1), ("s2sarena", _algorithm2)])
def test_rules_match_the_printed_algorithms_on_every_triple(rule, reference):
    for c, vq, p in ALL_TRIPLES:
        assert fuse(c, vq, p, rule=rule) == reference(c, vq, p), (c, vq, p)


def test_speakbench_code_rule_differs_from_algorithm1_only_on_double_both_bad():
    for c, vq, p in ALL_TRIPLES:
        code, paper = fuse(c, vq, p), _algorithm1(c, vq, p)
        if code != paper:
            assert c == "both_bad" and p == "both_bad" and vq in ("1", "2") and code == "both_bad"


@pytest.mark.parametrize(
    ("c", "vq", "p", "expected"),
    [
        ("both_bad", "1", "both_bad", "both_bad"),  # C and P both bad: no winner from VQ
        ("both_good", "2", "both_bad", "2"),  # first decisive of C, P, VQ
        ("both_bad", "2", "1", "1"),  # P before VQ
        ("2", "1", "1", "2"),  # content first
        ("both_good", "both_good", "both_bad", "both_good"),
        ("both_bad", "both_good", "both_good", "both_bad"),
    ],
)
def test_speakbench_rule_hand_cases(c, vq, p, expected):
    assert fuse(c, vq, p, rule="speakbench") == expected


@pytest.mark.parametrize(
    ("c", "vq", "p", "expected"),
    [
        ("1", "2", "both_bad", "both_bad"),  # cap (0,0): P unacceptable
        ("1", "2", "both_good", "1"),
        ("1", "1", "2", "both_bad"),  # cap = min((1,0),(0,1)) = (0,0)
        ("both_good", "2", "both_good", "2"),
        ("both_good", "1", "both_bad", "both_bad"),
        ("tie", "1", "both_good", "both_bad"),  # unknown content → (0,0), never an error
        ("both_good", "1", None, "both_bad"),
        ("both_good", "oops", "both_good", "both_good"),
        (1, "1", "both_good", "both_bad"),  # an int is not the label "1"
    ],
)
def test_s2sarena_rule_hand_cases_including_unknown_labels(c, vq, p, expected):
    assert fuse(c, vq, p, rule="s2sarena") == expected
    assert fuse_many([c], [vq], [p], rule="s2sarena").tolist() == [expected]


def test_majority_rule_and_its_tie_break_match_counter_most_common():
    for c, vq, p in ALL_TRIPLES:
        assert fuse(c, vq, p, rule="majority") == Counter((c, vq, p)).most_common(1)[0][0]
    assert fuse("2", "1", "both_bad", rule="majority") == "2"  # all differ: content's label
    assert fuse("2", "1", "1", rule="majority") == "1"


@pytest.mark.parametrize("rule", FUSION_RULES)
def test_fuse_many_equals_fuse_on_every_triple(rule):
    c, vq, p = (list(column) for column in zip(*ALL_TRIPLES))
    assert fuse_many(c, vq, p, rule=rule).tolist() == [fuse(*triple, rule=rule) for triple in ALL_TRIPLES]


def test_fuse_many_accepts_polars_and_numpy():
    c = pl.Series(["1", "both_good"])
    out = fuse_many(c, np.array(["2", "2"]), ["both_bad", "both_bad"])
    assert out.tolist() == ["1", "2"] and out.dtype == object
    assert fuse_many([], [], []).tolist() == []


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["speakbench", "speakbench-paper", "majority"])
def test_unknown_label_is_named(rule):
    with pytest.raises(ValueError, match=r"paralinguistics has unknown label 'tie'"):
        fuse("1", "2", "tie", rule=rule)
    with pytest.raises(ValueError, match=r"voice_quality has unknown label None at position 1"):
        fuse_many(["1", "1"], ["2", None], ["1", "1"], rule=rule)


def test_unknown_rule():
    with pytest.raises(ValueError, match=r"unknown fusion rule 'tree'; expected one of"):
        fuse("1", "1", "1", rule="tree")
    with pytest.raises(ValueError, match="unknown fusion rule 'tree'"):
        fuse_many(["1"], ["1"], ["1"], rule="tree")


def test_fuse_many_length_mismatch_quotes_all():
    with pytest.raises(ValueError, match="content has 2, voice_quality has 1, paralinguistics has 2"):
        fuse_many(["1", "2"], ["1"], ["1", "2"])
