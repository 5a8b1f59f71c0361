"""consistency protocol: hand-computed scores per method, rankings, per-row errors, sweep, scoring on the runtime, run_eval.

Unit cases use a table embedder (fixed vectors per path); the end-to-end case renders speech with
flite and scores it with GE2E.
"""

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from sdscore.corpus import CONSISTENCY_INSTANCES, write_manifest
from sdscore.manifests import read_manifest
from sdscore.protocols import registry
from sdscore.protocols.consistency import (
    METHODS,
    RESULTS,
    SWEEP,
    evaluate_consistency,
    run_eval,
    score_consistency,
    sweep_thresholds,
)
from sdscore.report.consistency_plots import plot_threshold_sweep

VECTORS = {"a": [1.0, 0.0], "b": [1.0, 0.0], "c": [0.0, 1.0], "r": [1.0, 0.0],
           "s1": [1.0, 0.1], "s2": [0.0, 1.0], "s3": [1.0, 1.0]}


class TableEmbedder:
    """Embeddings looked up by path; an unknown path fails like an unreadable file."""

    dim = 2

    def __init__(self, table=VECTORS):
        self.table, self.calls = table, 0

    def try_embed_files(self, paths, progress=None):
        self.calls += 1
        out = np.full((len(paths), self.dim), np.nan, np.float32)
        errors = []
        for i, path in enumerate(paths):
            if path in self.table:
                out[i] = self.table[path]
            errors.append(None if path in self.table else f"{path}: cannot read audio file: No such file")
        return out, errors


def detection(instance, scenario, turns, true_turns, reference="r"):
    return {"instance_id": instance, "task": "detection", "dataset": "toy", "speaker_id": "spk", "scenario": scenario,
            "turn_paths": turns, "true_turns": true_turns, "reference_path": reference}


def discrimination(instance, turns, candidates, labels, reference="r"):
    return {"instance_id": instance, "task": "discrimination", "dataset": "toy", "speaker_id": "spk",
            "turn_paths": turns, "reference_path": reference, "masked_turn": 2, "candidate_paths": candidates,
            "candidate_scenarios": labels}


def manifest(*rows) -> pl.DataFrame:
    return pl.DataFrame(list(rows), schema=CONSISTENCY_INSTANCES)


TOY = manifest(
    detection("d1", "S2", ["a", "b", "c"], [2]),
    detection("d2", "S1", ["a", "b"], []),
    discrimination("x1", ["a", "b"], ["s2", "s1", "s3"], ["S2", "S1", "S3"]),
)


@pytest.mark.parametrize(
    ("method", "expected", "candidates"),
    [
        ("pairwise", [0.5, 0.5, 0.0], [0.0, 1 / np.sqrt(1.01), 1 / np.sqrt(2)]),
        ("centroid", [1 - 2 / np.sqrt(5), 1 - 2 / np.sqrt(5), 1 - 1 / np.sqrt(5)],
         [1.0, 1 - 1 / np.sqrt(1.01), 1 - 1 / np.sqrt(2)]),
        ("reference", [1.0, 1.0, 0.0], [0.0, 1 / np.sqrt(1.01), 1 / np.sqrt(2)]),
    ],
)
def test_scores_flags_and_ranking_by_hand(method, expected, candidates):
    results = score_consistency(TOY, TableEmbedder(), method)
    assert results.schema == RESULTS and results.height == 3
    d1, d2, x1 = results.to_dicts()
    np.testing.assert_allclose(d1["turn_scores"], expected, atol=1e-6)
    assert d1["flagged_turns"] == [2] and d1["inconsistent_pred"] is True
    assert d2["flagged_turns"] == [] and d2["inconsistent_pred"] is False
    assert d1["threshold"] == METHODS[method] and d1["method"] == method and d1["true_turns"] == [2]
    np.testing.assert_allclose(x1["candidate_scores"], candidates, atol=1e-6)
    assert x1["ranking"] == ["S1", "S3", "S2"]  # centroid ranks by smallest distance
    assert x1["inconsistent_pred"] is None and x1["flagged_turns"] is None and x1["error"] is None


def test_threshold_decides_flags():
    results = score_consistency(TOY, TableEmbedder(), "pairwise", threshold=0.6)
    assert results["flagged_turns"].to_list()[:2] == [[0, 1, 2], []]
    assert score_consistency(TOY, TableEmbedder(), "centroid", threshold=0.6)["flagged_turns"][0].to_list() == []


def test_bad_rows_carry_errors_and_the_rest_is_scored():
    frame = manifest(
        detection("ok", "S1", ["a", "b"], []),
        detection("missing-turn", "S1", ["a", "gone.wav"], []),
        detection("no-turns", "S1", [], []),
        discrimination("mismatch", ["a", "b"], ["s1", "s2"], ["S1", "S2", "S3"]),
        discrimination("bad-candidate", ["a", "b"], ["s1", "s2", "lost.wav"], ["S1", "S2", "S3"]),
        detection("no-reference", "S1", ["a", "b"], [], reference=None),
    )
    embedder = TableEmbedder()
    results = score_consistency(frame.with_columns(error=pl.lit(None, pl.String)), embedder, "reference")
    errors = dict(zip(results["instance_id"], results["error"]))
    assert embedder.calls == 1 and results.height == frame.height
    assert errors["ok"] is None and results.row(0, named=True)["turn_scores"] == [1.0, 1.0]
    assert errors["missing-turn"] == "turn_paths[1]: gone.wav: cannot read audio file: No such file"
    assert errors["no-turns"] == "turn_paths must list at least one audio path (and no nulls)"
    assert errors["mismatch"].startswith("discrimination needs candidate_paths and candidate_scenarios of equal")
    assert errors["bad-candidate"] == "candidate_paths[2]: lost.wav: cannot read audio file: No such file"
    assert errors["no-reference"] == "method 'reference' needs reference_path"
    assert results.filter(pl.col("error").is_not_null())["turn_scores"].null_count() == 5
    kept = score_consistency(frame.with_columns(error=pl.lit("row 3: bad scenario")), TableEmbedder())
    assert kept["error"].to_list() == ["row 3: bad scenario"] * frame.height


def test_method_and_threshold_are_checked():
    with pytest.raises(ValueError, match="unknown consistency method 'cosine'; expected one of pairwise"):
        score_consistency(TOY, TableEmbedder(), "cosine")
    with pytest.raises(ValueError, match="threshold must be a finite number, got nan"):
        score_consistency(TOY, TableEmbedder(), "pairwise", float("nan"))


def test_sweep_reuses_turn_scores():
    rng = np.random.default_rng(3)
    table = {f"t{i}": rng.standard_normal(4).tolist() for i in range(40)} | {"r": [1.0, 0, 0, 0]}
    rows = [detection(f"i{k}", ["S1", "S2", "S3"][k % 3], [f"t{(5 * k + j) % 40}" for j in range(5)],
                      [] if k % 3 == 0 else [k % 5]) for k in range(30)]
    frame = manifest(*rows)
    embedder = TableEmbedder(table)
    embedder.dim = 4
    for method in METHODS:
        results = score_consistency(frame, embedder, method)
        sweep = sweep_thresholds(results)
        assert sweep["threshold"].to_list() == list(SWEEP) == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]
        for threshold, row in zip(SWEEP, sweep.iter_rows(named=True)):
            direct = evaluate_consistency(score_consistency(frame, embedder, method, threshold))
            assert row == {"threshold": threshold, **direct["detection"], **direct["localization"]}
    assert embedder.calls == len(METHODS) * (1 + len(SWEEP))  # one per score_consistency call, none per sweep


def test_sweep_errors_and_plot(tmp_path):
    results = score_consistency(TOY, TableEmbedder())
    with pytest.raises(ValueError, match="results must come from one scoring method"):
        sweep_thresholds(results.drop("method"))
    with pytest.raises(ValueError, match="no scored detection rows to sweep"):
        sweep_thresholds(results.filter(pl.col("task") == "discrimination"))
    with pytest.raises(ValueError, match=r"sweep frame lacks columns \['S3', 'balanced'"):
        plot_threshold_sweep(sweep_thresholds(results).select("threshold", "S1", "S2"), tmp_path / "x.png")
    path = plot_threshold_sweep(sweep_thresholds(results), tmp_path / "plots" / "sweep.png", method="pairwise")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_balanced_accuracy_of_gpt4o_audio_row():
    """SpeakerSleuth Table 2, GPT-4o-audio: S1 72.9, S2 32.8, S3 29.5 → Bal 52.0."""
    scenario = ["S1"] * 1000 + ["S2"] * 1000 + ["S3"] * 1000
    predicted = [i >= 729 for i in range(1000)] + [i < 328 for i in range(1000)] + [i < 295 for i in range(1000)]
    results = pl.DataFrame({"task": "detection", "instance_id": [str(i) for i in range(3000)], "dataset": "x",
                            "scenario": scenario, "inconsistent_pred": predicted, "error": None},
                           schema_overrides={"error": pl.String})
    metrics = evaluate_consistency(results)
    assert [round(100 * metrics["detection"][k], 1) for k in ("S1", "S2", "S3", "balanced")] == [72.9, 32.8, 29.5, 52.0]
    assert metrics["n_rows"] == 3000 and metrics["counts"]["detection"] == {"S1": 1000, "S2": 1000, "S3": 1000}


# ---------------------------------------------------------------- end to end with GE2E


@pytest.fixture(scope="module")
def speech_manifest(tmp_path_factory) -> Path:
    """Five flite turns of voice slt; S2 swaps turn 1 for a male voice (rms); one row lacks its audio."""
    if shutil.which("flite") is None:
        pytest.skip("flite is needed to render test speech")
    pytest.importorskip("resemblyzer")
    folder = tmp_path_factory.mktemp("consistency")
    (folder / "audio").mkdir()
    lines = ["Good morning, how are you today?", "I would like a cup of tea, please.",
             "The meeting starts at nine o'clock sharp.", "Let us walk to the park after lunch.",
             "She said the train was late again."]
    for voice in ("slt", "rms"):
        for i, line in enumerate(lines):
            subprocess.run(["flite", "-voice", voice, "-t", line, "-o", str(folder / "audio" / f"{voice}{i}.wav")],
                           check=True)
    turns = [f"audio/slt{i}.wav" for i in range(4)]
    switched = [turns[0], "audio/rms1.wav", *turns[2:]]
    frame = manifest(
        detection("s1", "S1", turns, [], reference="audio/slt4.wav"),
        detection("s2", "S2", switched, [1], reference="audio/slt4.wav"),
        detection("lost", "S1", [*turns, "audio/missing.wav"], [], reference="audio/slt4.wav"),
        discrimination("disc", [turns[0], *turns[2:]], ["audio/rms1.wav", turns[1], "audio/rms2.wav"],
                       ["S2", "S1", "S3"], reference="audio/slt4.wav"),
    )
    write_manifest(frame, folder / "consistency.parquet")
    return folder


def test_run_score_and_eval_with_ge2e(speech_manifest, tmp_path):
    from sdscore.features.speaker import SpeakerEmbedder

    embedder = SpeakerEmbedder("ge2e", cache_dir=tmp_path / "cache")
    calls, inner = [], embedder.encoder.embed_waveforms
    embedder.encoder.embed_waveforms = lambda waves: (calls.append(len(waves)), inner(waves))[1]
    stages = []
    frame = read_manifest(speech_manifest / "consistency.parquet", "consistency", errors="collect")
    results = score_consistency(frame, embedder, progress=lambda *args: stages.append(args))
    assert calls == [7] and stages[-1] == ("embed", 7, 7)  # 7 distinct files, one batched pass
    # the runtime path (manifest windows → ConsistencyScorer → sharded output) gives the same rows
    registry.score("consistency", speech_manifest / "consistency.parquet", tmp_path / "out" / "pairwise.parquet",
                   cache_dir=tmp_path / "cache", window_rows=3)
    assert pl.read_parquet(tmp_path / "out" / "pairwise.parquet").equals(results)
    rows = {row["instance_id"]: row for row in results.to_dicts()}
    assert rows["lost"]["error"].startswith("turn_paths[4]: ") and "missing.wav" in rows["lost"]["error"]
    switched = rows["s2"]["turn_scores"]
    assert int(np.argmin(switched)) == 1 and min(switched) < min(rows["s1"]["turn_scores"]) - 0.1
    assert rows["disc"]["ranking"][0] == "S1"
    for method in ("centroid", "reference"):
        again = score_consistency(frame, embedder, method)
        assert again.height == 4 and again["method"].to_list() == [method] * 4
    assert calls == [7]  # the other methods reuse the cached embeddings

    metrics = run_eval(tmp_path / "out" / "pairwise.parquet", tmp_path / "metrics.json", tmp_path / "sweep.png")
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert set(metrics) >= {"detection", "localization", "discrimination", "counts", "n_errors", "threshold_sweep"}
    assert metrics["n_errors"] == 1 and metrics["method"] == "pairwise" and len(metrics["threshold_sweep"]) == 7
    assert metrics["discrimination"]["accuracy"] == {"toy": 1.0, "average": 1.0}
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_run_eval_without_detection_rows(tmp_path):
    results = score_consistency(TOY.filter(pl.col("task") == "discrimination"), TableEmbedder())
    write_manifest(results, tmp_path / "r.parquet")
    assert run_eval(tmp_path / "r.parquet", tmp_path / "m.json")["threshold_sweep"] is None
    with pytest.raises(ValueError, match="no scored detection rows, so there is no threshold sweep to plot"):
        run_eval(tmp_path / "r.parquet", tmp_path / "m.json", tmp_path / "p.png")


def test_eval_leaves_out_rows_with_nonfinite_scores_and_says_so(tmp_path, capsys):
    from sdscore.cli import main

    results = score_consistency(TOY, TableEmbedder(), "pairwise")
    scores = results["turn_scores"].to_list()
    scores[0] = [scores[0][0], float("inf"), scores[0][2]]  # d1: one similarity is inf
    bad = results.with_columns(pl.Series("turn_scores", scores, dtype=pl.List(pl.Float64)))
    write_manifest(bad, tmp_path / "bad.parquet")
    write_manifest(results.filter(pl.col("instance_id") != "d1"), tmp_path / "rest.parquet")
    assert main(["eval", "consistency", str(tmp_path / "bad.parquet"), "--out", str(tmp_path / "bad.json")]) == 0
    assert "note: 1 row with non-finite (NaN/inf) turn_scores excluded from the metrics: toy/d1" in \
        " ".join(capsys.readouterr().err.split())
    got = json.loads((tmp_path / "bad.json").read_text())
    assert got["nonfinite_excluded"] == {"n_rows": 1, "ids": ["toy/d1"], "columns": {"turn_scores": 1}}
    assert got["n_rows"] == 3 and got["counts"]["detection"] == {"S1": 1, "S2": 0, "S3": 0}
    rest = run_eval(tmp_path / "rest.parquet", tmp_path / "rest.json")
    for key in ("detection", "localization", "discrimination", "threshold_sweep"):
        assert got[key] == rest[key]


def test_eval_refuses_a_nonfinite_cost_naming_the_row(tmp_path):
    results = score_consistency(TOY, TableEmbedder(), "pairwise").with_columns(
        pl.Series("cost", [0.01, float("inf"), 0.02], dtype=pl.Float64))
    write_manifest(results, tmp_path / "r.parquet")
    with pytest.raises(ValueError, match=r"consistency results: cost is NaN or infinite on 1 row \(toy/d2\)"):
        run_eval(tmp_path / "r.parquet", tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists()
