"""The `sdscore` command end to end on a tiny synthetic corpus: score, eval and demo."""

from __future__ import annotations

import json

import polars as pl
import pytest

from sdscore.cli import main
from sdscore.manifests import read_manifest


@pytest.fixture(scope="module")
def corpus(tiny_corpus):
    return tiny_corpus


def test_score_and_eval_consistency(corpus, tmp_path, tiny_feature_cache):
    results = tmp_path / "consistency.parquet"
    code = main(["score", "consistency", str(corpus / "consistency.parquet"), "--out", str(results),
                 "--threshold", "0.6", "--cache-dir", str(tiny_feature_cache)])
    manifest = pl.read_parquet(corpus / "consistency.parquet")
    frame = pl.read_parquet(results)
    assert code == 0 and frame.height == manifest.height and frame["error"].null_count() == frame.height
    code = main(["eval", "consistency", str(results), "--out", str(tmp_path / "m.json"),
                 "--plot", str(tmp_path / "sweep.png")])
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert code == 0 and (tmp_path / "sweep.png").stat().st_size > 0
    assert metrics["detection"]["S1"] == 1.0  # no false alarm on consistent speakers at 0.6
    # the gender-switched turn is the least similar to the others in every S2 instance (GE2E
    # separates espeak-ng's variants only weakly, so not every switch falls below 0.6)
    s2 = frame.filter(pl.col("scenario") == "S2")
    for scores, (true_turn,) in zip(s2["turn_scores"].to_list(), s2["true_turns"].to_list()):
        assert min(range(len(scores)), key=scores.__getitem__) == true_turn


def test_score_judge_keeps_rows_and_flags_a_missing_file(corpus, tmp_path, tiny_feature_cache):
    manifest = read_manifest(corpus / "judge_items.parquet", "judge")  # audio paths made absolute
    broken = manifest.with_columns(
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(str(tmp_path / "gone.wav")))
        .otherwise(pl.col("audio1_path")).alias("audio1_path")
    )
    broken.write_parquet(tmp_path / "judge.parquet")
    results = tmp_path / "rule.parquet"
    code = main(["score", "judge", str(tmp_path / "judge.parquet"), "--out", str(results),
                 "--cache-dir", str(tiny_feature_cache)])
    frame = pl.read_parquet(results)
    assert code == 1  # one row failed
    assert frame.height == manifest.height
    assert "gone.wav" in frame["error"][0]
    assert frame["error"][1:].null_count() == manifest.height - 1
    assert main(["eval", "judge", str(results), "--out", str(tmp_path / "j.json")]) == 0
    assert "rule" in json.loads((tmp_path / "j.json").read_text())["judges"]


def test_eval_arena_and_usage_errors(corpus, tmp_path, capsys, arena_few_bootstraps):
    assert main(["eval", "arena", str(corpus / "battles.parquet"), "--out", str(tmp_path / "a.json")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["n_battles"] > 0
    code = main(["eval", "arena", str(corpus / "battles.parquet"), str(corpus / "battles.parquet"),
                 "--out", str(tmp_path / "b.json")])
    assert code == 2 and "takes one results file, got 2" in capsys.readouterr().err


def test_demo_writes_every_stage(corpus, tmp_path):
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--size", "tiny", "--seed", "3"])
    report = json.loads((out / "demo.json").read_text())
    assert code == 0 and report["ok"], report.get("failed_stages")
    assert [s["protocol"] for s in report["stages"]] == ["reward", "consistency", "judge", "naturalness", "arena"]
    assert all(m["failed"] == 0 for m in report["corpus_summary"]["manifests"].values())
    naturalness = next(s for s in report["stages"] if s["protocol"] == "naturalness")
    assert "halfduplex-robot" in naturalness["table"] and "human" in naturalness["table"]
    metrics = json.loads((out / "naturalness" / "metrics.json").read_text())
    robot = metrics["systems"]["halfduplex-robot"]
    assert robot["interrupted_pct"]["value"] is None and robot["interrupted_pct"]["reason"].startswith("half-duplex")
    assert metrics["half_duplex"] == ["halfduplex-robot"]
    assert metrics["systems"]["human"]["interrupted_pct"]["value"] is not None
    # emotional naturalness on the demo's RANDOM-WEIGHT emotion model and predictor, labelled as such
    emotional = metrics["systems"]["human"]["emotional_naturalness"]
    assert emotional["value"] is not None and "RANDOM-WEIGHT predictor" in emotional["caveat"]
    assert "RANDOM-WEIGHT emotion model" in metrics["systems"]["human"]["arousal_rho"]["caveat"]
    assert "EmoNat: RANDOM-WEIGHT predictor" in naturalness["table"]
    assert (out / "naturalness" / "figures" / "fig2_emotional_naturalness.png").is_file()
    # turn-taking: the model-free n-gram baseline on the selected (stereo) dialogues, no weights needed
    turn_taking = metrics["systems"]["human"]["turn_taking_ngram"]
    assert turn_taking["value"] is not None and turn_taking["n"] > 0 and "TT-ngram" in naturalness["table"]
    assert (out / "naturalness" / "figures" / "fig2_turn_taking.png").is_file()
    items = pl.read_parquet(out / "naturalness" / "results-items.parquet")
    assert not items.filter(pl.col("system") == "halfduplex-robot")["interrupted"].any()  # it never starts early


def test_the_demo_builds_its_corpus_unless_one_of_its_seed_and_size_is_there(tmp_path, monkeypatch):
    import sdscore.synth
    from sdscore.demo import ensure_corpus
    from sdscore.progress import no_progress
    from sdscore.synth.build import CORPUS_VERSION

    built = []

    def build_corpus(folder, *, seed, size, progress):
        built.append((seed, size))
        folder.mkdir(parents=True, exist_ok=True)
        summary = {"seed": seed, "size": size, "corpus_version": CORPUS_VERSION}
        (folder / "corpus.json").write_text(json.dumps(summary))
        return summary

    monkeypatch.setattr(sdscore.synth, "build_corpus", build_corpus)
    folder = tmp_path / "corpus"
    assert ensure_corpus(folder, 3, "tiny", no_progress)["seed"] == 3 and built == [(3, "tiny")]
    assert ensure_corpus(folder, 3, "tiny", no_progress)["seed"] == 3 and built == [(3, "tiny")]  # reused
    ensure_corpus(folder, 4, "tiny", no_progress)  # another seed, then another size: rebuilt
    ensure_corpus(folder, 4, "small", no_progress)
    assert built == [(3, "tiny"), (4, "tiny"), (4, "small")]
    summary = json.loads((folder / "corpus.json").read_text())
    (folder / "corpus.json").write_text(json.dumps({**summary, "corpus_version": "older"}))
    ensure_corpus(folder, 4, "small", no_progress)  # an older sdscore's corpus: rebuilt
    assert built[-1] == (4, "small") and len(built) == 4


def test_bench_command_names_the_benchmarks(capsys):
    assert main(["bench", "no-such-bench"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "no benchmark named no-such-bench; expected one of" in err
    for name in ("audio", "kernels", "reward", "scale"):
        assert name in err
