"""`sdscore eval reward` over a results file: ESDR-Bench Table 2 reproduced through the CLI."""

from __future__ import annotations

import json

import polars as pl

from sdscore.cli import main

# Gemini 2.5 Pro row of SDiaReward Table 2 (per-subset accuracy, %); n = 10000 per subset.
GEMINI = {"wild": 76.12, "semi-wild": 65.60, "scripted": 69.77, "colloquial": 98.80}


def results_frame() -> pl.DataFrame:
    rows = []
    for subset, accuracy in GEMINI.items():
        n_correct = round(accuracy * 100)
        for i in range(10000):
            good = i < n_correct
            rows.append(
                {
                    "pair_id": f"{subset}-{i}",
                    "criterion": "colloquialness" if subset == "colloquial" else "modality",
                    "subset": subset,
                    "category": None,
                    "chosen_reward": 1.0 if good else -0.3,
                    "rejected_reward": 0.0,
                    "margin": None,
                    "correct": good,
                    "error": None,
                }
            )
    return pl.DataFrame(rows)


def test_cli_eval_reward_reproduces_table2_macros(tmp_path):
    results_frame().write_parquet(tmp_path / "results.parquet")
    code = main(["eval", "reward", str(tmp_path / "results.parquet"), "--out", str(tmp_path / "m.json")])
    assert code == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert round(100 * metrics["modality_macro"], 2) == 70.50
    assert round(100 * metrics["overall_macro"], 2) == 84.65
    assert metrics["subsets"]["wild"]["n"] == 10000
    buckets = {(b["lower"], b["upper"]): b for b in metrics["margin_buckets"]}
    assert buckets[(0.25, 0.5)]["accuracy"] == 0.0  # the wrong pairs sit at gap 0.3
    n_correct = sum(round(a * 100) for a in GEMINI.values())
    assert buckets[(1.0, 2.0)]["n"] == n_correct and buckets[(1.0, 2.0)]["accuracy"] == 1.0
    assert buckets[(0.25, 0.5)]["n"] == 40000 - n_correct
    assert buckets[(2.0, None)]["n"] == 0 and buckets[(2.0, None)]["accuracy"] is None


def test_cli_eval_reward_names_a_missing_results_file(tmp_path, capsys):
    code = main(["eval", "reward", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "m.json")])
    assert code == 2
    assert "nope.parquet" in capsys.readouterr().err


def test_accuracy_per_category_and_source_by_hand():
    from sdscore.protocols.reward.evaluate import evaluate_reward

    results = pl.DataFrame({
        "pair_id": [f"p{i}" for i in range(6)], "criterion": ["modality"] * 6, "subset": ["wild"] * 6,
        "category": ["emotion", "emotion", "age", "age", None, "age"],
        "source": ["ravdess", "ravdess", "ravdess", "cremad", "cremad", "cremad"],
        "chosen_reward": [1.0, 0.0, 2.0, 1.0, 0.5, None], "rejected_reward": [0.0, 1.0, 1.0, 0.0, 0.0, None],
        "error": [None, None, None, None, None, "turn 1: no such file"],
    })
    metrics = evaluate_reward(results)
    assert metrics["by_category"] == {"emotion": {"n": 2, "n_errors": 0, "accuracy": 0.5},
                                      "age": {"n": 3, "n_errors": 1, "accuracy": 1.0},
                                      "(none)": {"n": 1, "n_errors": 0, "accuracy": 1.0}}
    assert metrics["by_source"] == {"ravdess": {"n": 3, "n_errors": 0, "accuracy": 2 / 3},
                                    "cremad": {"n": 3, "n_errors": 1, "accuracy": 1.0}}
    assert evaluate_reward(results.drop("source"))["by_source"] is None


def test_cli_eval_reward_leaves_out_nonfinite_rewards_and_says_so(tmp_path, capsys):
    rows = [{"pair_id": f"p{i}", "subset": "wild", "chosen_reward": c, "rejected_reward": r, "error": e}
            for i, (c, r, e) in enumerate([(1.0, 0.0, None), (float("nan"), 0.0, None), (0.0, 1.0, None),
                                           (1.0, float("-inf"), None), (None, None, "timeout")])]
    pl.DataFrame(rows).write_parquet(tmp_path / "results.parquet")
    pl.DataFrame([rows[0], rows[2], rows[4]]).write_parquet(tmp_path / "finite.parquet")
    assert main(["eval", "reward", str(tmp_path / "results.parquet"), "--out", str(tmp_path / "m.json"),
                 "--report", str(tmp_path / "r.html")]) == 0
    assert "2 rows with non-finite (NaN/inf) chosen_reward, rejected_reward excluded from the metrics: p1, p3" in \
        (tmp_path / "r.html").read_text()  # the HTML report says it too
    err = " ".join(capsys.readouterr().err.split())
    assert ("note: 2 rows with non-finite (NaN/inf) chosen_reward, rejected_reward excluded from the metrics: "
            "p1, p3") in err
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["nonfinite_excluded"] == {"n_rows": 2, "ids": ["p1", "p3"],
                                             "columns": {"chosen_reward": 1, "rejected_reward": 1}}
    assert main(["eval", "reward", str(tmp_path / "finite.parquet"), "--out", str(tmp_path / "f.json")]) == 0
    finite = json.loads((tmp_path / "f.json").read_text())
    assert "nonfinite_excluded" not in finite
    assert {k: v for k, v in metrics.items() if k != "nonfinite_excluded"} == finite
    assert finite["n"] == 2 and finite["n_errors"] == 1 and finite["overall_micro"] == 0.5
