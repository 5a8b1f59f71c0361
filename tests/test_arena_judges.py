"""Arena battles from several judges: ratings per judge (never pooled silently), judge–human
agreement and Cohen's κ, self-consistency over repeats and swapped positions, inter-annotator
agreement — each equal to a hand computation on a small battle set; κ also against sklearn."""

from __future__ import annotations

import json

import polars as pl
import pytest
from sdscore.corpus.schemas import BATTLES
from sdscore.metrics.battle_agreement import (
    _kappa,
    inter_annotator_agreement,
    judge_human_agreement,
    repeat_consistency,
    swap_consistency,
)
from sdscore.protocols.arena import evaluate_arena


def _battles(rows):
    return pl.DataFrame([{"battle_id": f"b{i}", "model_a": a, "model_b": b, "winner": w, "judge": j,
                          "prompt_id": p, "domain": None, "length_a": None, "length_b": None}
                         for i, (p, a, b, w, j) in enumerate(rows)], schema=BATTLES)


#: p1..p4 judged by people (p1 twice) and by "gpt"; gpt repeats p2 and sees p3 in both orders.
ROWS = [
    ("p1", "x", "y", "model_a", "human"), ("p1", "x", "y", "model_a", "human"),
    ("p2", "x", "z", "model_b", "human"),
    ("p3", "y", "z", "tie", "human"),
    ("p4", "x", "z", "model_a", "human"),
    ("p1", "x", "y", "model_a", "gpt"),
    ("p2", "x", "z", "model_a", "gpt"), ("p2", "x", "z", "model_b", "gpt"),
    ("p3", "y", "z", "model_a", "gpt"), ("p3", "z", "y", "model_b", "gpt"),
    ("p4", "x", "z", "tie (bothbad)", "gpt"),
]


def test_judge_human_agreement_by_hand():
    battles = _battles(ROWS)
    got = judge_human_agreement(battles, "gpt")
    # pairs (gpt, human): p1: (a,a),(a,a); p2: (a,b),(b,b); p3: (a,tie); p4: (tie,a)
    pairs = [("model_a", "model_a")] * 2 + [("model_a", "model_b"), ("model_b", "model_b"),
                                            ("model_a", "tie"), ("tie", "model_a")]
    assert got["n_battles"] == 4 and got["n_pairs"] == 6
    assert got["accuracy"] == pytest.approx(3 / 6)
    assert got["n_decisive_pairs"] == 4 and got["accuracy_without_ties"] == pytest.approx(3 / 4)
    sklearn = pytest.importorskip("sklearn.metrics")
    assert got["kappa"] == pytest.approx(sklearn.cohen_kappa_score([j for j, _ in pairs], [h for _, h in pairs]))
    decisive = [(j, h) for j, h in pairs if "tie" not in (j, h)]
    assert got["kappa_without_ties"] == pytest.approx(
        sklearn.cohen_kappa_score([j for j, _ in decisive], [h for _, h in decisive]))
    # by hand: 2x2 table a/a=2, a/b=1, b/b=1 → po=3/4, pe=(3/4·2/4 + 1/4·2/4)=1/2, κ=(3/4-1/2)/(1/2)=1/2
    assert got["kappa_without_ties"] == pytest.approx(0.5)


def test_self_consistency_and_inter_annotator_by_hand():
    battles = _battles(ROWS)
    assert repeat_consistency(battles, "gpt") == {"n_repeated_battles": 1, "consistency": 0.0}  # p2: a then b
    assert repeat_consistency(battles, "human") == {"n_repeated_battles": 1, "consistency": 1.0}
    # p3 forward y-z: model_a → y wins; backward z-y: model_b → y wins: the same model, consistent
    assert swap_consistency(battles, "gpt") == {"n_swapped_pairs": 1, "consistency": 1.0}
    flipped = _battles(ROWS[:-3] + [("p3", "y", "z", "model_a", "gpt"), ("p3", "z", "y", "model_a", "gpt")])
    assert swap_consistency(flipped, "gpt")["consistency"] == 0.0  # position A won both times
    assert inter_annotator_agreement(battles) == {"n_battles": 1, "n_pairs": 1, "agreement": 1.0}
    assert _kappa([], []) is None and _kappa(["tie", "tie"], ["tie", "tie"]) is None


def test_ratings_are_per_judge_never_pooled_silently():
    battles = _battles(ROWS)
    metrics = evaluate_arena(battles, n_boot=20, l2=1.0)
    assert metrics["judge"] == "human" and metrics["judges"] == ["gpt", "human"]
    human_only = evaluate_arena(battles.filter(pl.col("judge") == "human"), n_boot=20, l2=1.0)
    assert metrics["bradley_terry"] == human_only["bradley_terry"] and metrics["n_battles"] == 5
    assert metrics["by_judge"]["gpt"]["n_battles"] == 6
    assert metrics["judge_agreement"]["gpt"]["vs_human"]["accuracy"] == pytest.approx(0.5)
    assert metrics["judge_agreement"]["human"]["vs_human"] is None
    assert metrics["inter_annotator"]["agreement"] == 1.0
    assert evaluate_arena(battles, n_boot=20, l2=1.0, judge="gpt")["n_battles"] == 6
    pooled = evaluate_arena(battles, n_boot=20, l2=1.0, pool_judges=True)
    assert pooled["judge"] == "pooled" and pooled["n_battles"] == 11
    no_human = battles.with_columns(pl.col("judge").replace({"human": "qwen"}))
    with pytest.raises(ValueError, match="2 judges \\(gpt, qwen\\); ratings are per judge"):
        evaluate_arena(no_human, n_boot=20, l2=1.0)
    with pytest.raises(ValueError, match="no battles judged by 'claude'"):
        evaluate_arena(battles, n_boot=20, l2=1.0, judge="claude")


def test_eval_arena_cli_judge_options(tmp_path, arena_few_bootstraps):
    import numpy as np
    from sdscore.cli import main
    from sdscore.synth.battles import build_battles

    human, _ = build_battles(np.random.default_rng(0), 150)
    judge = human.with_columns(pl.lit("gpt").alias("judge"), ("j-" + pl.col("battle_id")).alias("battle_id"),
                               pl.col("winner").shuffle(seed=1))
    pl.concat([human.with_columns(pl.lit("human").alias("judge")), judge]).write_parquet(
        tmp_path / "battles.parquet")
    out = tmp_path / "m.json"
    assert main(["eval", "arena", str(tmp_path / "battles.parquet"), "--out", str(out), "--judge", "gpt"]) == 0
    assert json.loads(out.read_text())["judge"] == "gpt"
    assert main(["eval", "arena", str(tmp_path / "battles.parquet"), "--out", str(out), "--pool-judges",
                 "--overwrite"]) == 0  # m.json exists
    assert json.loads(out.read_text())["judge"] == "pooled"
    with pytest.raises(SystemExit) as usage:  # the option belongs to arena: eval consistency has none
        main(["eval", "consistency", str(tmp_path / "battles.parquet"), "--out", str(out), "--judge", "gpt"])
    assert usage.value.code == 2


def test_report_shows_the_judges_table(tmp_path):
    from sdscore.report.html import render_report
    from sdscore.report_document import protocol_section

    battles = _battles(ROWS)
    battles.write_parquet(tmp_path / "battles.parquet")
    metrics = evaluate_arena(battles, n_boot=20, l2=1.0)
    html = render_report([protocol_section("arena", metrics, [tmp_path / "battles.parquet"])], "arena")
    assert "Judges (S2S-Arena Table 6)" in html
    cell = ('data-path="[&#34;judge_agreement&#34;, &#34;gpt&#34;, &#34;vs_human&#34;, &#34;accuracy&#34;]" '
            'data-value="0.5"')
    assert cell in html
    assert "Headline ratings are the human judge" in html
