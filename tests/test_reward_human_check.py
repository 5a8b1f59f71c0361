"""`sdscore corpus sample-check`: SDiaReward's Table 3 buckets, disjoint, seeded, errors never sampled."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from sdscore.protocols.reward.human_check import sample_check, summary


def _results(n=60, seed=0):
    rng = np.random.default_rng(seed)
    chosen = rng.normal(0.5, 1.0, n)
    rejected = rng.normal(0.0, 1.0, n)
    error = [None] * n
    error[3] = "turn 1: no such file"
    return pl.DataFrame({"pair_id": [f"p{i:02d}" for i in range(n)], "chosen_reward": chosen,
                         "rejected_reward": rejected, "error": error})


def test_buckets_by_hand():
    results = _results()
    sample = sample_check(results, per_bucket=5, wrong=4, seed=1)
    margin = dict(zip(results["pair_id"], results["chosen_reward"] - results["rejected_reward"]))
    buckets = {b: sample.filter(pl.col("bucket") == b)["pair_id"].to_list() for b in sample["bucket"].unique()}
    assert "p03" not in sample["pair_id"].to_list()  # a pair with an error is never sampled
    assert sample["pair_id"].n_unique() == sample.height == 19  # disjoint
    assert all(margin[p] < 0 for p in buckets["model-wrong"]) and len(buckets["model-wrong"]) == 4
    correct = sorted((m, p) for p, m in margin.items() if m > 0 and p != "p03")
    assert sorted(buckets["high-confidence"]) == sorted(p for _, p in correct[-5:])  # widest margins
    assert sorted(buckets["low-confidence"]) == sorted(p for _, p in correct[:5])  # narrowest positive margins
    assert len(buckets["random"]) == 5
    assert sample["human_agrees"].null_count() == sample.height
    assert sample_check(results, per_bucket=5, wrong=4, seed=1).equals(sample)  # seeded
    rows = {r["bucket"]: r for r in summary(sample)}
    assert rows["high-confidence"]["mean_margin"] == pytest.approx(np.mean([m for m, _ in correct[-5:]]))


def test_small_results_and_bad_input():
    sample = sample_check(_results(6), per_bucket=20, wrong=15)
    assert sample.height == 5  # every scored pair once, however large the buckets
    with pytest.raises(ValueError, match=r"lack column\(s\) \['rejected_reward'\]"):
        sample_check(_results().drop("rejected_reward"))
    with pytest.raises(ValueError, match="bucket sizes"):
        sample_check(_results(), per_bucket=-1)


def test_cli(tmp_path):
    from sdscore.cli import main

    _results().write_parquet(tmp_path / "r.parquet")
    assert main(["corpus", "sample-check", str(tmp_path / "r.parquet"), "--out", str(tmp_path / "s.jsonl"),
                 "--per-bucket", "3", "--wrong", "2"]) == 0
    assert pl.read_ndjson(tmp_path / "s.jsonl").height == 11
    assert main(["corpus", "sample-check", str(tmp_path / "missing.parquet"), "--out", str(tmp_path / "x.jsonl")]) == 2
