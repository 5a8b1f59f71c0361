"""`sdscore eval naturalness`: every SPEARBench formula against an independent reference, and the
evaluation of hand-made RESULTS frames (rows that enter each mean, nulls with reasons, files, plots)."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats
from sdscore.metrics.naturalness import (
    avd_correlation,
    dialectal_entrainment,
    dialectal_variance,
    min_max_normalise,
    paired_friedman,
    paired_wilcoxon,
    pitch_variation,
    speaker_normalise,
)
from sdscore.cli import main
from sdscore.protocols.naturalness.evaluate import (
    evaluate_files,
    evaluate_naturalness,
    format_table,
    speaker_normalised,
)
from sdscore.protocols.naturalness.latex_table import escape, format_latex
from sdscore.protocols.naturalness.results import DIALECT_GROUPS, HUMAN_SYSTEM, RESULTS
from sdscore.report.naturalness_plots import NoPlotData, plot_avd_scatter

# --- formulas ---------------------------------------------------------------------------------


def _minmax(x: np.ndarray) -> np.ndarray:
    return (x - x.min()) / (x.max() - x.min())


def test_dialectal_entrainment_is_the_slope_of_min_max_normalised_flattened_log_logits():
    rng = np.random.default_rng(0)
    q = rng.normal(-5, 3, size=(23, 11))
    a = 0.4 * q + rng.normal(-2, 1, size=(23, 11))
    expected = stats.linregress(_minmax(q.ravel()), _minmax(a.ravel())).slope
    assert dialectal_entrainment(q, a) == pytest.approx(expected, rel=1e-10)
    # a list of vectors works the same; scaling either side does not move β (min–max normalised)
    assert dialectal_entrainment(q.tolist(), 3 * a - 7) == pytest.approx(expected, rel=1e-10)


def test_dialectal_entrainment_rejects_bad_input():
    q = np.zeros((3, 11))
    with pytest.raises(ValueError, match="question log-logits: cannot min-max normalise a constant vector"):
        dialectal_entrainment(q, np.ones((3, 11)) + np.arange(11))
    with pytest.raises(ValueError, match=r"shapes differ: \(3, 11\) and \(2, 11\)"):
        dialectal_entrainment(q, np.zeros((2, 11)))
    with pytest.raises(ValueError, match="non-finite value -inf at row 1, dim 4"):
        bad = np.zeros((3, 11))
        bad[1, 4] = -np.inf
        dialectal_entrainment(bad, q)
    with pytest.raises(ValueError, match="must be 2-D"):
        dialectal_entrainment(np.zeros(11), np.zeros(11))
    with pytest.raises(ValueError, match="empty vector"):
        min_max_normalise([])


def test_dialectal_variance_is_the_trace_of_the_covariance():
    rng = np.random.default_rng(1)
    a = rng.normal(-4, 5, size=(31, 11))
    assert dialectal_variance(a) == pytest.approx(np.cov(a, rowvar=False).trace(), rel=1e-12)
    with pytest.raises(ValueError, match="at least 2 answers, got 1"):
        dialectal_variance(a[:1])


def test_avd_correlation_is_pearson():
    rng = np.random.default_rng(2)
    q = rng.uniform(0, 1, 40)
    a = 0.3 * q + rng.uniform(0, 1, 40)
    assert avd_correlation(q, a) == pytest.approx(stats.pearsonr(q, a).statistic, rel=1e-12)
    with pytest.raises(ValueError, match="the answer values are constant"):
        avd_correlation(q, np.full(40, 0.5))
    with pytest.raises(ValueError, match="at least 2 question/answer pairs, got 1"):
        avd_correlation([0.1], [0.2])
    with pytest.raises(ValueError, match="lengths differ"):
        avd_correlation([0.1, 0.2], [0.2])


def test_paired_wilcoxon_matches_scipy_and_a_hand_case():
    rng = np.random.default_rng(3)
    reference = rng.normal(1000, 200, 30)
    system = reference + rng.normal(150, 100, 30)
    result = paired_wilcoxon(system, reference)
    expected = stats.wilcoxon(system, reference)
    assert result["statistic"] == expected.statistic and result["p_value"] == pytest.approx(expected.pvalue)
    assert result["test"].startswith("Wilcoxon signed-rank") and result["n_pairs"] == 30
    # by hand: differences 1..5 all positive → W- = 0; exact two-sided p = 2 · 1/2^5
    hand = paired_wilcoxon([2, 4, 6, 8, 10], [1, 2, 3, 4, 5])
    assert hand["statistic"] == 0 and hand["p_value"] == pytest.approx(2 / 32)
    # differences 1, −2, 3, 4, 5 → W- = 2; P(W ≤ 2) = |{∅, {1}, {2}}| / 32 → p = 6/32
    hand = paired_wilcoxon([2, 0, 6, 8, 10], [1, 2, 3, 4, 5])
    assert hand["statistic"] == 2 and hand["p_value"] == pytest.approx(6 / 32)
    assert hand["mean_difference"] == pytest.approx(11 / 5) and hand["median_difference"] == 3
    with pytest.raises(ValueError, match="all 3 paired differences are zero"):
        paired_wilcoxon([1, 2, 3], [1, 2, 3])
    with pytest.raises(ValueError, match="no paired rows"):
        paired_wilcoxon([], [])


def test_paired_friedman_by_hand_and_against_scipy():
    # 4 questions, each ranking the systems 1 < 2 < 3: R = (4, 8, 12),
    # χ² = 12/(n k (k+1)) ΣR² − 3 n (k+1) = 12/48 · 224 − 48 = 8; p = exp(−8/2) for 2 d.o.f.
    matrix = [[1, 2, 3], [0.5, 0.7, 0.9], [10, 20, 30], [-1, 0, 1]]
    result = paired_friedman(matrix)
    assert result["statistic"] == pytest.approx(8.0) and result["p_value"] == pytest.approx(math.exp(-4))
    rng = np.random.default_rng(4)
    m = rng.normal(size=(12, 4))
    assert result["test"].startswith("Friedman")
    assert paired_friedman(m)["p_value"] == pytest.approx(stats.friedmanchisquare(*m.T).pvalue)
    with pytest.raises(ValueError, match="at least 3 systems, got 2"):
        paired_friedman(m[:, :2])


def test_speaker_normalise_by_hand():
    # 4 rows: asker A has f0_mean 100 and 300 (mean 200); asker B 150 and a missing one (mean 150)
    features = [[50, 100], [150, 330], [75, 150], [90, np.nan]]
    out = speaker_normalise(features, [100, 300, 150, np.nan], [("s", "A"), ("s", "A"), ("s", "B"), ("s", "B")])
    expected = [[0.25, 0.5], [0.75, 1.65], [0.5, 1.0], [0.6, np.nan]]
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    # a group whose mean f0 is 0 or unknown gives NaN rows; groups are per (system, asker)
    out = speaker_normalise([[1.0], [2.0], [3.0]], [0.0, np.nan, 4.0], [("x", "A"), ("y", "A"), ("z", None)])
    assert np.isnan(out[0, 0]) and np.isnan(out[1, 0]) and out[2, 0] == 0.75
    with pytest.raises(ValueError, match="lengths differ"):
        speaker_normalise([[1.0]], [1.0, 2.0], ["a"])


def test_pitch_variation_by_hand():
    # column 1: 0.25 0.75 0.5 0.6 → mean 0.525, squared deviations sum 0.1325 → std = √(0.1325/3);
    # column 2: one finite value → 0; column 3: none → left out
    normalised = [[0.25, np.nan, np.nan], [0.75, 1.2, np.nan], [0.5, np.nan, np.nan], [0.6, np.nan, np.nan]]
    assert pitch_variation(normalised) == pytest.approx((math.sqrt(0.1325 / 3) + 0.0) / 2)
    with pytest.raises(ValueError, match="no feature has a finite"):
        pitch_variation([[np.nan, np.nan]])


# --- evaluation of hand-made results ------------------------------------------------------------


def _row(system, key, **values):
    return {"item_id": f"{system}-{key}", "system": system, "asker": "A", "question_key": key, **values}


def _frame(rows) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=RESULTS)


def _vec(seed: int) -> list[float]:
    return np.log(np.random.default_rng(seed).dirichlet(np.ones(len(DIALECT_GROUPS)))).tolist()


HUMAN = [
    _row("human", "q1", latency_ms=500.0, latency_onset_ms=300.0, interrupted=False, interrupted_ms=0.0,
         transcript_pocketsphinx="a", wer_pocketsphinx=0.25, cer_pocketsphinx=0.1, language="en",
         mos_dnsmos_ovrl=2.0, answer_duration_s=4.0, voiced_ratio=0.5, arousal_question=0.2, arousal_answer=0.3,
         f0_min=80.0, f0_mean=200.0, dialect_question=_vec(1), dialect_answer=_vec(2),
         dialect_question_label="North America", dialect_answer_label="North America",
         unavailable="whisper: no Whisper folder given (--whisper-dir)"),
    _row("human", "q2", latency_ms=-200.0, latency_onset_ms=0.0, interrupted=True, interrupted_ms=200.0,
         transcript_pocketsphinx="b", wer_pocketsphinx=0.5, cer_pocketsphinx=0.3, language="en",
         mos_dnsmos_ovrl=3.0, answer_duration_s=6.0, voiced_ratio=0.7, arousal_question=0.6, arousal_answer=0.5,
         f0_min=120.0, f0_mean=220.0, dialect_question=_vec(3), dialect_answer=_vec(4),
         dialect_question_label="Romance", dialect_answer_label="North America"),
    _row("human", "q3", latency_ms=700.0, latency_onset_ms=100.0, interrupted=False, interrupted_ms=0.0,
         transcript_pocketsphinx=None, wer_pocketsphinx=1.0, language="unknown - too short",
         mos_dnsmos_ovrl=2.5, answer_duration_s=0.8, voiced_ratio=0.4, arousal_question=0.9, arousal_answer=0.8,
         f0_min=90.0, f0_mean=180.0, dialect_question=_vec(5), dialect_answer=_vec(6)),
    _row("human", "q4", latency_ms=None, interrupted=False, interrupted_ms=0.0, transcript_pocketsphinx="c",
         wer_pocketsphinx=0.0, cer_pocketsphinx=0.0, language="fr", answer_duration_s=5.0, voiced_ratio=0.6,
         arousal_question=0.1, arousal_answer=0.1, f0_min=100.0, f0_mean=210.0),
    _row("human", "q5", interrupted=True, interrupted_ms=100.0, error="answer: cannot decode"),
]
BOT = [
    _row("bot", "q3", latency_ms=1200.0, interrupted=False, interrupted_ms=0.0, answer_duration_s=9.0,
         f0_min=150.0, f0_mean=160.0, arousal_question=0.9, arousal_answer=0.2),
    _row("bot", "q1", latency_ms=900.0, interrupted=False, interrupted_ms=0.0, answer_duration_s=7.5,
         f0_min=140.0, f0_mean=150.0, arousal_question=0.2, arousal_answer=0.4),
    _row("bot", "q4", latency_ms=1500.0, interrupted=False, interrupted_ms=0.0, answer_duration_s=8.0,
         f0_min=130.0, f0_mean=170.0, arousal_question=0.1, arousal_answer=0.3),
    _row("bot", "q2", latency_ms=1100.0, interrupted=False, interrupted_ms=0.0, answer_duration_s=6.5,
         f0_min=145.0, f0_mean=155.0, arousal_question=0.6, arousal_answer=0.25),
]


def test_table_values_follow_the_authors_row_rules():
    metrics = evaluate_naturalness(_frame(BOT + HUMAN))
    assert list(metrics["systems"]) == [HUMAN_SYSTEM, "bot"]  # reference first
    human = metrics["systems"]["human"]
    assert (human["n_rows"], human["n_scored"], human["n_errors"]) == (5, 4, 1)
    # latency: rows with latency ≥ 0 only (500, 700), the interrupted −200 left out
    assert human["latency_ms"] == {"value": 600.0, "n": 2, "n_negative": 1,
                                   "std": pytest.approx(np.std([500, 700], ddof=1))}
    assert human["latency_onset_ms"]["value"] == pytest.approx(400 / 3)
    # interruptions: every row with a value, zeros and the error row included
    assert human["interrupted_ms"]["value"] == pytest.approx(300 / 5) and human["interrupted_ms"]["n"] == 5
    assert human["interrupted_pct"]["value"] == pytest.approx(40.0)
    # WER in percent over rows with a transcript (q3's 1.0 has none)
    assert human["wer_pct_pocketsphinx"] == {"value": pytest.approx(25.0), "n": 3, "std": pytest.approx(
        100 * np.std([r["wer_pocketsphinx"] for r in HUMAN if r.get("transcript_pocketsphinx")], ddof=1))}
    assert human["wer_pct"]["value"] == pytest.approx(25.0)
    assert human["cer_pct_pocketsphinx"]["value"] == pytest.approx(40 / 3)
    assert human["wer_pct_whisper"]["value"] is None
    assert "whisper: no Whisper folder given" in human["wer_pct_whisper"]["reason"]
    # language: 'unknown - ...' stays in the total as non-English; english_pct_known leaves it out
    assert human["english_pct"]["value"] == pytest.approx(50.0)
    assert human["english_pct_known"]["value"] == pytest.approx(200 / 3)
    assert human["language_unknown_pct"]["value"] == pytest.approx(25.0)
    assert human["same_dialect_pct"] == {"value": 50.0, "n": 2}
    assert human["mos_dnsmos_ovrl"]["value"] == pytest.approx(2.5)
    assert human["answer_duration_s"]["value"] == pytest.approx(15.8 / 4)


def test_model_metrics_equal_the_formulas_on_the_same_rows():
    metrics = evaluate_naturalness(_frame(HUMAN + BOT))
    human, bot = metrics["systems"]["human"], metrics["systems"]["bot"]
    q = np.array([r["dialect_question"] for r in HUMAN[:3]])
    a = np.array([r["dialect_answer"] for r in HUMAN[:3]])
    assert human["dialectal_beta"]["value"] == pytest.approx(
        stats.linregress(_minmax(q.ravel()), _minmax(a.ravel())).slope)
    assert human["dialectal_variance"]["value"] == pytest.approx(np.cov(a, rowvar=False).trace())
    aq = [r["arousal_question"] for r in HUMAN[:4]]
    aa = [r["arousal_answer"] for r in HUMAN[:4]]
    assert human["arousal_rho"]["value"] == pytest.approx(stats.pearsonr(aq, aa).statistic)
    # one asker per system: f0_min / mean f0_mean; human mean f0 = 202.5, bot 158.75
    human_norm = np.array([80, 120, 90, 100]) / 202.5
    bot_norm = np.array([150, 140, 130, 145]) / 158.75
    assert human["pitch_variation"]["value"] == pytest.approx(np.std(human_norm, ddof=1))
    assert bot["pitch_variation"]["value"] == pytest.approx(np.std(bot_norm, ddof=1))
    # no dialect/valence values for the bot: null with a reason
    assert bot["dialectal_beta"]["value"] is None and "no usable value" in bot["dialectal_beta"]["reason"]
    assert bot["valence_rho"]["value"] is None


def test_paired_tests_pair_rows_by_question_key():
    metrics = evaluate_naturalness(_frame(BOT + HUMAN))
    durations = metrics["paired_tests"]["bot"]["answer_duration_s"]
    human = {"q1": 4.0, "q2": 6.0, "q3": 0.8, "q4": 5.0}
    bot = {"q1": 7.5, "q2": 6.5, "q3": 9.0, "q4": 8.0}
    keys = sorted(human)
    expected = stats.wilcoxon([bot[k] for k in keys], [human[k] for k in keys])
    assert durations["n_pairs"] == 4 and durations["statistic"] == expected.statistic
    assert durations["p_value"] == pytest.approx(expected.pvalue)
    # latency: only questions where both latencies are ≥ 0 (q1, q3)
    assert metrics["paired_tests"]["bot"]["latency_ms"]["n_pairs"] == 2
    # interrupted_ms: bot 0 everywhere, human 200 on q2 only (q5 has no bot answer) → one non-zero pair
    interrupted = metrics["paired_tests"]["bot"]["interrupted_ms"]
    assert (interrupted["n_pairs"], interrupted["n_nonzero"], interrupted["mean_difference"]) == (4, 1, -50.0)
    assert interrupted["p_value"] == pytest.approx(stats.wilcoxon([0, 0, 0, 0], [0, 200, 0, 0]).pvalue)
    # a metric the bot lacks: null p with the reason
    mos = metrics["paired_tests"]["bot"]["mos_dnsmos_ovrl"]
    assert mos["p_value"] is None and mos["reason"] == "'bot' has no mos_dnsmos_ovrl value on a row with a question_key"
    assert metrics["friedman"]["answer_duration_s"]["p_value"] is None
    assert "needs at least 3" in metrics["friedman"]["answer_duration_s"]["reason"]


def test_friedman_over_three_systems():
    third = [_row("other", r["question_key"], answer_duration_s=r["answer_duration_s"] + 1.0) for r in BOT]
    metrics = evaluate_naturalness(_frame(HUMAN + BOT + third))
    result = metrics["friedman"]["answer_duration_s"]
    matrix = np.array([[4.0, 7.5, 8.5], [6.0, 6.5, 7.5], [0.8, 9.0, 10.0], [5.0, 8.0, 9.0]])
    assert result["systems"] == ["human", "bot", "other"] and result["n_questions"] == 4
    assert result["p_value"] == pytest.approx(stats.friedmanchisquare(*matrix.T).pvalue)


def test_absent_model_columns_give_null_with_reason():
    frame = _frame(HUMAN).drop("dialect_question", "dialect_answer", "arousal_question", "arousal_answer",
                               "mos_local")
    human = evaluate_naturalness(frame)["systems"]["human"]
    assert human["dialectal_beta"] == {"value": None, "n": 0, "n_nonfinite": 0,
                                       "reason": "columns dialect_question, dialect_answer absent from the results"}
    assert human["dialectal_variance"]["reason"] == "column dialect_answer absent from the results"
    assert human["arousal_rho"]["reason"].startswith("columns arousal_question, arousal_answer absent")
    assert human["mos_local"]["reason"] == "column mos_local absent from the results"
    assert "no usable value" in human["valence_rho"]["reason"]


def test_no_reference_system_and_bad_frames():
    metrics = evaluate_naturalness(_frame(BOT))
    assert metrics["reference_present"] is False and metrics["paired_tests"] == {}
    with pytest.raises(ValueError, match="results lack the 'system' column"):
        evaluate_naturalness(pl.DataFrame({"latency_ms": [1.0]}))
    bad = _frame([_row("bot", "q1", dialect_question=[0.0, 1.0], dialect_answer=[0.0, 1.0])])
    with pytest.raises(ValueError, match="dialect_question holds a vector of 2 values; expected 11"):
        evaluate_naturalness(bad)
    with pytest.raises(ValueError, match="'latency_ms' holds String values that are not Float64"):
        evaluate_naturalness(pl.DataFrame({"system": ["bot"], "latency_ms": ["soon"]}))


def test_speaker_normalised_groups_by_system_and_asker():
    rows = [_row("s", "q1", f0_min=100.0, f0_mean=100.0), _row("s", "q2", f0_min=100.0, f0_mean=300.0),
            _row("t", "q1", f0_min=100.0, f0_mean=100.0)]
    rows[1]["asker"] = "B"
    out = speaker_normalised(_frame(rows))
    assert out["f0_min"].to_list() == [1.0, pytest.approx(1 / 3), 1.0]


def test_format_table_lists_every_system():
    text = format_table(evaluate_naturalness(_frame(HUMAN + BOT)))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["System", "DNSMOS", "P.808"]
    assert lines[2].startswith("human") and lines[3].startswith("bot")
    assert " 600±141 " in lines[2] and "-" in lines[3]  # a mean and its sample std
    assert " 66.7 " in lines[2]  # English % over the known languages (2 of 3), as the authors' benchmark_line
    assert "UTMOS" in text.split("\n\n")[0].splitlines()[-1]  # the footnote closes Table III (extra tables follow)
    assert " 600 " in format_table(evaluate_naturalness(_frame(HUMAN + BOT)), std=False).splitlines()[2]


def test_std_beside_every_mean():
    human = evaluate_naturalness(_frame(HUMAN + BOT))["systems"]["human"]
    durations = [r["answer_duration_s"] for r in HUMAN if r.get("answer_duration_s") is not None]
    assert human["answer_duration_s"]["std"] == pytest.approx(np.std(durations, ddof=1))
    assert human["interrupted_ms"]["std"] == pytest.approx(np.std([0, 200, 0, 0, 100], ddof=1))
    assert human["interrupted_pct"]["std"] == pytest.approx(np.std([0, 100, 0, 0, 100], ddof=1))
    assert human["mos_dnsmos_ovrl"]["std"] == pytest.approx(0.5)
    one = evaluate_naturalness(_frame([_row("bot", "q1", latency_ms=5.0)]))["systems"]["bot"]["latency_ms"]
    assert one == {"value": 5.0, "n": 1, "n_negative": 0, "std": None}  # undefined for one row
    assert "std" not in human["same_dialect_pct"] and "std" not in human["arousal_rho"]  # not means over rows


def test_latency_paper_leaves_interrupted_answers_out():
    rows = [_row("bot", "q1", latency_ms=400.0, latency_paper_ms=400.0, answer_start_time=0.2),
            _row("bot", "q2", latency_ms=300.0, latency_paper_ms=None, answer_start_time=-0.5),
            _row("bot", "q3", latency_ms=800.0, latency_paper_ms=800.0, answer_start_time=0.0)]
    bot = evaluate_naturalness(_frame(rows))["systems"]["bot"]
    assert bot["latency_ms"]["value"] == pytest.approx(500.0) and bot["latency_ms"]["n"] == 3
    assert bot["latency_paper_ms"]["value"] == pytest.approx(600.0) and bot["latency_paper_ms"]["n"] == 2


def test_half_duplex_systems_have_no_interruption_values():
    metrics = evaluate_naturalness(_frame(HUMAN + BOT), half_duplex=("bot",))
    bot, human = metrics["systems"]["bot"], metrics["systems"]["human"]
    assert metrics["half_duplex"] == ["bot"]
    for key in ("interrupted_pct", "interrupted_ms"):
        assert bot[key]["value"] is None and bot[key]["reason"].startswith("half-duplex system")
        assert human[key]["value"] is not None
    assert bot["latency_ms"]["value"] == pytest.approx(1175.0)  # the rest stays
    test = metrics["paired_tests"]["bot"]["interrupted_ms"]
    assert test["p_value"] is None and test["reason"].startswith("half-duplex system")
    line = format_table(metrics).splitlines()[3]
    assert line.split()[5:8] == ["1175±250", "-", "-"]
    with pytest.raises(ValueError, match=r"half-duplex system 'robot' is not in the results \(systems: human, bot\)"):
        evaluate_naturalness(_frame(HUMAN + BOT), half_duplex=("robot",))


def test_latex_table_iii(tmp_path):
    third = [_row("other", r["question_key"], latency_ms=r["latency_ms"] + 100.0, interrupted=False,
                  interrupted_ms=0.0, answer_duration_s=r["answer_duration_s"] + 1.0) for r in BOT]
    human = tmp_path / "human.parquet"
    _frame(HUMAN + BOT + third).write_parquet(human)
    metrics = evaluate_files([human], tmp_path / "m.json", half_duplex=("bot",), latex=tmp_path / "table.tex")
    tex = (tmp_path / "table.tex").read_text()
    assert metrics["latex"] == str(tmp_path / "table.tex") and tex == format_latex(metrics)
    lines = tex.splitlines()
    assert lines[0].startswith(r"\begin{tabular}{l|cccc|ccc|cc|cccc|cccc|ccc|ccc}") and lines[1] == r"\toprule"
    assert r"\multicolumn{4}{c}{Speech quality} & \multicolumn{3}{c}{Interruptions}" in lines[2]
    assert r"Latency (ms)$\downarrow$" in lines[3] and r"Pitch var.$\uparrow$" in lines[3]
    human_row = next(i for i, line in enumerate(lines) if line.startswith("human &"))
    assert lines[human_row + 1] == r"\midrule"  # the reference first, ruled off
    cells = {line.split(" & ")[0]: line.split(" & ") for line in lines if line.startswith(("bot &", "other &"))}
    # latency: bot 1175 beats other 1275 (bold), other second (italic); each mean with its std
    assert cells["bot"][5] == r"\textbf{1175} {\scriptsize $\pm$ 250}"
    assert cells["other"][5] == r"\textit{1275} {\scriptsize $\pm$ 250}"
    assert cells["bot"][6] == "--" and cells["other"][6].startswith(r"\textbf{0}")
    assert r"Interr.\ time (ms): -- bot: half-duplex system" in tex  # a null explained in the footnote
    assert format_latex(metrics, std=False).count(r"$\pm$") == 0
    assert escape("a_b & 50%") == r"a\_b \& 50\%"


def test_cli_eval_half_duplex_and_latex(tmp_path, capsys):
    results = tmp_path / "results.parquet"
    _frame(HUMAN + BOT).write_parquet(results)
    tex = tmp_path / "t.tex"
    args = ["eval", "naturalness", str(results), "--out", str(tmp_path / "m.json"), "--half-duplex", "bot",
            "--latex", str(tex)]
    assert main(args) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["half_duplex"] == ["bot"] and tex.read_text() == format_latex(metrics)
    capsys.readouterr()
    assert main([*args[:4], str(tmp_path / "m2.json"), *args[5:]]) == 2  # an existing --latex needs --overwrite
    assert "--latex" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0


def test_evaluate_files_concatenates_writes_json_and_figures(tmp_path):
    human, bot = tmp_path / "human.parquet", tmp_path / "bot.jsonl"
    _frame(HUMAN).write_parquet(human)
    _frame(BOT).drop("dialect_question", "dialect_answer").write_ndjson(bot)
    out = tmp_path / "metrics.json"
    metrics = evaluate_files([human, bot], out, plot=tmp_path / "figs")
    assert json.loads(out.read_text()) == metrics
    assert set(metrics["systems"]) == {"human", "bot"} and metrics["systems"]["bot"]["n_rows"] == 4
    assert metrics["results_files"] == [str(human), str(bot)]
    for name in ("fig3_dialect_profiles", "fig4_avd_scatter", "fig6_pitch_features"):
        path = metrics["figures"][name]["path"]
        assert (tmp_path / "figs" / f"{name}.png").stat().st_size > 1000 and path.endswith(".png")


def test_figures_are_skipped_with_reasons_when_their_data_is_null(tmp_path):
    rows = [_row("bot", f"q{i}", latency_ms=1000.0 + i) for i in range(3)]
    path = tmp_path / "bot.parquet"
    _frame(rows).write_parquet(path)
    metrics = evaluate_files([path], tmp_path / "m.json", plot=tmp_path / "figs")
    figures = metrics["figures"]
    assert figures["fig3_dialect_profiles"]["skipped"].startswith("Fig. 3 skipped: dialect_question")
    assert "arousal/valence/dominance" in figures["fig4_avd_scatter"]["skipped"]
    assert figures["fig6_pitch_features"]["skipped"].startswith("Fig. 6 skipped")
    assert not (tmp_path / "figs").exists() or not any((tmp_path / "figs").iterdir())
    with pytest.raises(NoPlotData, match="Fig. 4 skipped"):
        plot_avd_scatter(_frame(rows), tmp_path / "x.png", dims=("arousal",))
    with pytest.raises(ValueError, match="at least one results file"):
        evaluate_files([], tmp_path / "m.json")


def test_nonfinite_scores_are_left_out_of_their_metrics_counted_and_named(tmp_path, capsys):
    nan, inf = float("nan"), float("inf")
    odd = _row("bot", "q5", latency_ms=nan, interrupted=False, interrupted_ms=0.0, answer_duration_s=inf,
               arousal_question=0.5, arousal_answer=nan)
    results = tmp_path / "results.parquet"
    _frame(HUMAN + BOT + [odd]).write_parquet(results)
    assert main(["eval", "naturalness", str(results), "--out", str(tmp_path / "m.json")]) == 0
    assert ("note: 1 row with non-finite (NaN/inf) answer_duration_s, arousal_answer, latency_ms excluded from "
            "the metrics (systems/bot): bot-q5") in " ".join(capsys.readouterr().err.split())
    bot = json.loads((tmp_path / "m.json").read_text())["systems"]["bot"]
    assert bot["nonfinite_excluded"] == {"n_rows": 1, "ids": ["bot-q5"], "columns": {
        "latency_ms": 1, "answer_duration_s": 1, "arousal_answer": 1}}
    finite = evaluate_naturalness(_frame(HUMAN + BOT))["systems"]["bot"]
    assert "nonfinite_excluded" not in finite
    for key in ("latency_ms", "answer_duration_s", "arousal_rho"):  # the same values, with the count beside them
        assert bot[key] == {**finite[key], "n_nonfinite": 1}
    assert "n_nonfinite" not in bot["latency_onset_ms"]  # a null is missing, not non-finite
