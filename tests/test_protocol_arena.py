"""arena evaluate step: ratings and biases recovered from simulated battles with known truth."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from sdscore.corpus import write_manifest
from sdscore.metrics.ratings import bradley_terry
from sdscore.protocols.arena import evaluate_arena, run_eval

STRENGTH = {"alpha": 1300.0, "beta": 1100.0, "gamma": 1000.0, "delta": 800.0}


def simulated_battles(n: int, seed: int = 0, position_boost: float = 0.0) -> pl.DataFrame:
    """Battles won by the BT model with the strengths above; the first position gets a boost."""
    rng = np.random.default_rng(seed)
    names = list(STRENGTH)
    rows = []
    for i in range(n):
        a, b = rng.choice(len(names), 2, replace=False)
        ra, rb = STRENGTH[names[a]] + position_boost, STRENGTH[names[b]]
        p_a = 1 / (1 + 10 ** ((rb - ra) / 400))
        win_a = rng.random() < p_a
        rows.append(
            {
                "battle_id": str(i),
                "model_a": names[a],
                "model_b": names[b],
                "winner": "model_a" if win_a else "model_b",
                "domain": ["travel", "tech"][i % 2],
                "length_a": 4.0 + win_a,
                "length_b": 4.0 + (not win_a),
            }
        )
    return pl.DataFrame(rows)


def test_evaluate_recovers_order_biases_and_matches_direct_fit():
    battles = simulated_battles(4000, position_boost=100.0)
    metrics = evaluate_arena(battles, n_boot=20, seed=1)
    bt = metrics["bradley_terry"]
    assert list(bt) == ["alpha", "beta", "gamma", "delta"]
    direct = bradley_terry(battles)
    for model, entry in bt.items():
        assert entry["rating"] == pytest.approx(direct[model])
        lo, hi = entry["ci95"]
        assert lo <= entry["rating"] <= hi
    # gaps between true strengths are recovered (ratings are centred at 1000, so compare gaps)
    assert bt["alpha"]["rating"] - bt["delta"]["rating"] == pytest.approx(500, abs=60)
    assert metrics["position_bias"]["first_position_win_rate"] > 0.55  # the injected boost
    assert metrics["length_bias"]["longer_win_rate"] == 1.0  # winners were made longer
    assert set(metrics["elo_by_domain"]) == {"travel", "tech"}
    assert metrics["win_rate"]["alpha"]["delta"] > 0.8
    assert metrics["n_battles"] == 4000


def test_run_eval_reads_manifest_and_writes_json(tmp_path):
    battles = simulated_battles(300).drop("length_a", "length_b")
    write_manifest(battles, tmp_path / "battles.parquet")
    metrics = run_eval(tmp_path / "battles.parquet", tmp_path / "m" / "metrics.json", n_boot=10)
    assert json.loads((tmp_path / "m" / "metrics.json").read_text())["elo"] == metrics["elo"]
    assert metrics["length_bias"] is None


def test_unknown_winner_is_refused():
    battles = simulated_battles(10).with_columns(pl.lit("model_c").alias("winner"))
    with pytest.raises(ValueError, match="unknown winner 'model_c'"):
        evaluate_arena(battles, n_boot=5)


def test_nonfinite_lengths_are_left_out_of_length_bias_and_named(tmp_path, capsys):
    from sdscore.cli import main

    battles = simulated_battles(60)
    odd = battles.with_columns(
        pl.when(pl.col("battle_id") == "3").then(float("nan")).otherwise(pl.col("length_a")).alias("length_a"),
        pl.when(pl.col("battle_id") == "7").then(float("inf")).otherwise(pl.col("length_b")).alias("length_b"))
    write_manifest(odd, tmp_path / "battles.parquet")
    assert main(["eval", "arena", str(tmp_path / "battles.parquet"), "--out", str(tmp_path / "m.json"),
                 "--l2", "0.01"]) == 0
    assert ("note: 2 rows with non-finite (NaN/inf) length_a, length_b excluded from the metrics: 3, 7"
            in " ".join(capsys.readouterr().err.split()))
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["nonfinite_excluded"] == {"n_rows": 2, "ids": ["3", "7"], "metrics": ["length_bias"],
                                             "columns": {"length_a": 1, "length_b": 1}}
    finite = evaluate_arena(battles.filter(~pl.col("battle_id").is_in(["3", "7"])), n_boot=5, l2=0.01)
    assert metrics["length_bias"] == finite["length_bias"]
    assert metrics["n_battles"] == 60  # the ratings keep every battle
