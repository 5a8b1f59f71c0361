"""SpeakerSleuth fidelity: the centroid of unit-normalised embeddings (Table 2's identical Pairwise and
Centroid discrimination), with the raw-mean centroid kept as the named method "centroid-raw"."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from sdscore.corpus import CONSISTENCY_INSTANCES
from sdscore.protocols.consistency import METHODS, score_consistency

# Turn "big" has a 10x larger norm than turn "small": a raw mean leans towards it.
VECTORS = {"big": [10.0, 0.0], "small": [0.0, 1.0], "along": [1.0, 0.0], "between": [1.0, 1.0],
           "off": [-1.0, 0.3], "r": [1.0, 1.0]}


class Table:
    dim = 2
    name = "table"

    def try_embed_files(self, paths, progress=None):
        return np.array([VECTORS[p] for p in paths], np.float32), [None] * len(paths)


def _frame() -> pl.DataFrame:
    rows = [
        {"instance_id": "x", "task": "discrimination", "dataset": "toy", "turn_paths": ["big", "small"],
         "reference_path": "r", "masked_turn": 2, "candidate_paths": ["along", "between", "off"], "candidate_scenarios": ["S3", "S1", "S2"]},
        {"instance_id": "d", "task": "detection", "dataset": "toy", "scenario": "S1", "turn_paths": ["big", "small"],
         "reference_path": "r", "true_turns": []},
    ]
    return pl.DataFrame(rows, schema=CONSISTENCY_INSTANCES)


def test_centroid_discrimination_equals_pairwise():
    """Pairwise ranks 'between' first (mean cos 0.707 vs 0.5); so must the unit centroid. The raw mean
    (5, 0.5) points almost along 'big', and ranks 'along' first — the old behaviour, which fails here."""
    pairwise = score_consistency(_frame(), Table(), "pairwise").row(0, named=True)
    centroid = score_consistency(_frame(), Table(), "centroid").row(0, named=True)
    raw = score_consistency(_frame(), Table(), "centroid-raw").row(0, named=True)
    assert pairwise["ranking"] == ["S1", "S3", "S2"]
    assert centroid["ranking"] == pairwise["ranking"]
    assert raw["ranking"] == ["S3", "S1", "S2"]
    # unit centroid of [1,0] and [0,1] is along (1,1): distance of 'between' is 0, of 'along' 1 - 1/sqrt(2)
    np.testing.assert_allclose(centroid["candidate_scores"][:2], [1 - 1 / np.sqrt(2), 0.0], atol=1e-6)
    assert raw["method"] == "centroid-raw" and raw["threshold"] == METHODS["centroid-raw"] == 0.3


def test_unit_centroid_turn_distances():
    centroid = score_consistency(_frame(), Table(), "centroid").row(1, named=True)
    raw = score_consistency(_frame(), Table(), "centroid-raw").row(1, named=True)
    # both turns sit 45° from the unit centroid; the raw centroid (5, 0.5) is ~5.7° from 'big', ~84° from 'small'
    np.testing.assert_allclose(centroid["turn_scores"], [1 - 1 / np.sqrt(2)] * 2, atol=1e-6)
    expected_raw = [1 - 5 / np.hypot(5, 0.5), 1 - 0.5 / np.hypot(5, 0.5)]
    np.testing.assert_allclose(raw["turn_scores"], expected_raw, atol=1e-6)
    assert raw["flagged_turns"] == [1] and centroid["flagged_turns"] == []


@pytest.mark.parametrize("method", ["pairwise", "reference"])
def test_other_methods_do_not_depend_on_embedding_norms(method):
    base = score_consistency(_frame(), Table(), method)
    saved = dict(VECTORS)
    try:
        for key in VECTORS:
            VECTORS[key] = [3.0 * v for v in VECTORS[key]]
        again = score_consistency(_frame(), Table(), method)
    finally:
        VECTORS.update(saved)
    assert base["error"].to_list() == [None, None]
    np.testing.assert_allclose(base["turn_scores"].to_list()[1], again["turn_scores"].to_list()[1], atol=1e-6)
    np.testing.assert_allclose(base["candidate_scores"].to_list()[0], again["candidate_scores"].to_list()[0], atol=1e-6)


def test_graded_candidates_of_any_number_read_score_and_evaluate(tmp_path):
    """Four voice-cloning outputs with people's relevances (Table 5's setting), through the manifest
    reader, an embedding method and the metrics; labels are free when relevances are given."""
    from sdscore.corpus import write_manifest
    from sdscore.manifests import read_manifest
    from sdscore.protocols.consistency import evaluate_consistency

    for name in ("big", "small", "along", "between", "off", "r"):
        (tmp_path / f"{name}.wav").write_bytes(b"")  # the table embedder never opens them
    row = {"instance_id": "vc1", "task": "discrimination", "dataset": "vc", "turn_paths": ["big.wav", "small.wav"],
           "reference_path": "r.wav", "candidate_paths": ["off.wav", "along.wav", "between.wav", "r.wav"],
           "candidate_scenarios": ["yourtts", "openvoice", "cosyvoice", "source"],
           "candidate_relevances": [0.0, 1.0, 2.0, 3.0]}
    bad = {**row, "instance_id": "vc2", "candidate_relevances": [1.0, 2.0]}
    write_manifest(pl.DataFrame([row, bad], schema=CONSISTENCY_INSTANCES), tmp_path / "m.jsonl")
    frame = read_manifest(tmp_path / "m.jsonl", "consistency", errors="collect")
    assert frame["error"].to_list()[0] is None
    assert frame["error"].to_list()[1] == "column 'candidate_relevances': has 2 entries but candidate_paths has 4"

    class ByStem(Table):
        def try_embed_files(self, paths, progress=None):
            return np.array([VECTORS[p.rsplit("/", 1)[-1][:-4]] for p in paths], np.float32), [None] * len(paths)

    results = score_consistency(frame, ByStem(), "reference")
    first = results.row(0, named=True)
    # cosine to r = (1,1): r 1, between 1, along 0.707, off < 0 → source/cosyvoice tie kept in manifest order
    assert first["ranking"] == ["cosyvoice", "source", "openvoice", "yourtts"]
    assert first["candidate_relevances"] == [0.0, 1.0, 2.0, 3.0] and results.row(1, named=True)["error"]
    disc = evaluate_consistency(results)["discrimination"]
    assert disc["accuracy"]["average"] == 0.0  # cosyvoice (2) is not the best (source, 3)
    # relevances down the ranking 2, 3, 1, 0 → gains 3, 7; the ideal order gives 7, 3
    assert disc["ndcg@2"] == pytest.approx((3 + 7 / np.log2(3)) / (7 + 3 / np.log2(3)))
    assert disc["exact_match"] == 0.0
