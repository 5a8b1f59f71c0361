"""SPEARBench's explainable distributional baselines and Table I: lexical features, the correlation-cluster
PCA (numpy) against pandas / scipy / scikit-learn, the per-system features in `eval naturalness`, and
Table I's counts and hours against soundfile and the tables' own sums."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd
import polars as pl
import pytest
import soundfile as sf
from scipy import stats
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform
from sklearn.decomposition import PCA
from sklearn.metrics import roc_auc_score
from sdscore.errors import AudioError, ManifestError
from sdscore.protocols.naturalness.corpus_table import corpus_table, format_corpus_table
from sdscore.protocols.naturalness.distributional_features import (
    FEATURES,
    answer_features,
    auroc_greater,
    distributional_metrics,
    plot_feature_pca,
)
from sdscore.protocols.naturalness.evaluate import evaluate_files, evaluate_naturalness, format_table
from sdscore.protocols.naturalness.feature_clusters import (
    abs_spearman,
    average_linkage_clusters,
    first_component,
    fit_clusters,
    principal_components,
)
from sdscore.protocols.naturalness.lexical_features import (
    LEXICAL_FEATURES,
    entropy_bits,
    lexical_features,
    mattr,
    mtld,
    tokens,
)
from sdscore.protocols.naturalness.results import RESULTS
from sdscore.report.naturalness_plots import NoPlotData

# --- lexical features -------------------------------------------------------------------------


def test_tokens_drop_speaker_tags_and_punctuation():
    assert tokens('P0123: Well, "I" think (so)! spk_2: Don\'t know.') == ["well", "i", "think", "so", "don't", "know"]
    assert tokens("") == [] and tokens(" ?! ") == []


def test_mattr_is_the_mean_window_ttr():
    rng = np.random.default_rng(0)
    words = rng.choice(list("abcdefghij"), size=80).tolist()
    for window in (1, 7, 50, 80):
        expected = np.mean([len(set(words[i:i + window])) / window for i in range(len(words) - window + 1)])
        assert mattr(words, window) == pytest.approx(expected, rel=1e-12)
    assert math.isnan(mattr(words, 81))


def test_mtld_by_hand():
    # "a b a b ...": TTR 1, 1, 2/3 (<= 0.72: factor) then again -> 3 words per factor both ways;
    # 60 words = 20 whole factors, no remainder
    words = ["a", "b", "a"] * 20
    assert mtld(words) == pytest.approx(3.0)
    # 51 distinct words never reach the threshold: one partial factor (1 - 1) / 0.28 = 0 -> undefined
    assert math.isnan(mtld([f"w{i}" for i in range(51)]))
    assert math.isnan(mtld(words[:49]))  # under 50 words


def test_lexical_features_against_counters_and_scipy():
    text = "P0001: Yeah. Um ok. I mean it was kind of fun, you know. It was fun! " + " ".join(f"w{i % 9}" for i in range(60))
    words = tokens(text)
    counts = Counter(words)
    out = lexical_features(text)
    assert set(out) == set(LEXICAL_FEATURES)
    assert out["lex_total_words"] == len(words) and out["lex_unique_words"] == len(counts)
    assert out["lex_ttr"] == pytest.approx(len(counts) / len(words))
    assert out["lex_hapax_ratio"] == pytest.approx(sum(c == 1 for c in counts.values()) / len(words))
    assert out["lex_entropy_bits"] == pytest.approx(stats.entropy(list(counts.values()), base=2))
    assert entropy_bits(words) == pytest.approx(out["lex_entropy_bits"])
    # sentences: "yeah", "um ok" (backchannels), "i mean it was kind of fun you know" (discourse), "it was fun",
    # and the long w-run: 2 of 5 backchannels, 1 of 5 discourse
    assert out["lex_backchannel_ratio"] == pytest.approx(2 / 5)
    assert out["lex_discourse_marker_ratio"] == pytest.approx(1 / 5)
    assert out["lex_mattr_small"] == pytest.approx(mattr(words, 50))
    assert out["lex_mattr_large"] == pytest.approx(len(counts) / len(words))  # window = all words (< 500)
    assert out["lex_mattr_ratio"] == pytest.approx(out["lex_mattr_small"] / out["lex_mattr_large"])
    short = lexical_features("just a few words")
    assert short["lex_mattr_small"] is None and short["lex_mtld"] is None and short["lex_total_words"] == 4
    assert lexical_features(None) == dict.fromkeys(LEXICAL_FEATURES)


# --- clustering and PCA -------------------------------------------------------------------------


def _correlated(seed: int, n: int = 60) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 3))
    columns = [base[:, 0], base[:, 0] * 2 + rng.normal(0, 0.05, n), np.exp(base[:, 0]),  # one group
               base[:, 1], -base[:, 1] + rng.normal(0, 0.1, n),  # a second (anti-correlated)
               base[:, 2], rng.normal(size=n)]
    matrix = np.column_stack(columns)
    matrix[rng.random(matrix.shape) < 0.1] = np.nan
    return matrix


def test_abs_spearman_equals_pandas_pairwise_complete():
    matrix = _correlated(1)
    matrix[:, 6] = np.nan
    matrix[:2, 6] = [1.0, 2.0]  # two pairwise rows: undefined -> 0
    expected = pd.DataFrame(matrix).corr(method="spearman", min_periods=3).abs().fillna(0.0).to_numpy().copy()
    np.fill_diagonal(expected, 1.0)
    np.testing.assert_allclose(abs_spearman(matrix), expected, atol=1e-12)
    both = np.isfinite(matrix[:, 0]) & np.isfinite(matrix[:, 3])
    assert abs_spearman(matrix)[0, 3] == pytest.approx(abs(stats.spearmanr(matrix[both, 0], matrix[both, 3])[0]))


def test_average_linkage_equals_scipy_fcluster():
    for seed in range(5):
        distance = 1.0 - abs_spearman(_correlated(seed))
        for cut in (0.1, 0.2, 0.5):
            ours = {tuple(c) for c in average_linkage_clusters(distance, cut)}
            labels = fcluster(linkage(squareform(distance, checks=False), method="average"), t=cut, criterion="distance")
            theirs = {tuple(np.flatnonzero(labels == k)) for k in np.unique(labels)}
            assert ours == theirs


def test_principal_components_equal_sklearn():
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(40, 5)) @ rng.normal(size=(5, 5))
    components, ratios, centre = principal_components(matrix, 2)
    pca = PCA(n_components=2).fit(matrix)
    np.testing.assert_allclose(ratios, pca.explained_variance_ratio_, rtol=1e-10)
    np.testing.assert_allclose(centre, pca.mean_, rtol=1e-12)
    for ours, theirs in zip(components, pca.components_):
        sign = np.sign(ours @ theirs)
        np.testing.assert_allclose(ours, sign * theirs, atol=1e-10)
    scores = (matrix - centre) @ components.T
    np.testing.assert_allclose(np.abs(scores), np.abs(pca.transform(matrix)), atol=1e-9)
    with pytest.raises(ValueError, match=r"at least 2 rows \(got 1\)"):
        principal_components(matrix[:1], 1)


def _released_pipeline(matrix: np.ndarray, threshold: float):
    """analyse_correlations.py's steps with pandas, scipy and scikit-learn (the independent reference)."""
    frame = pd.DataFrame(matrix)
    norm = (frame - frame.mean()) / frame.std()
    corr = norm.corr(method="spearman", min_periods=3).abs().fillna(0.0).clip(0, 1).to_numpy().copy()
    np.fill_diagonal(corr, 1.0)
    distance = 1.0 - corr
    np.fill_diagonal(distance, 0.0)
    labels = fcluster(linkage(squareform(distance, checks=False), method="average"), t=1 - threshold,
                      criterion="distance")
    groups = sorted((np.flatnonzero(labels == k).tolist() for k in np.unique(labels)), key=lambda g: g[0])
    values = []
    for group in groups:
        block = norm[group].fillna(0.0).to_numpy()
        if len(group) == 1:
            component = np.ones(1)
        else:
            component = PCA(n_components=1).fit(block).components_[0]
            component = -component if component.sum() < 0 else component
        values.append(block @ component)
    values = np.column_stack(values)
    general = PCA(n_components=1).fit(values).components_[0]
    general = -general if general.sum() < 0 else general
    return groups, values, values @ general


def test_fit_clusters_equals_the_released_pipeline():
    matrix = _correlated(4)
    names = tuple(f"f{i}" for i in range(matrix.shape[1]))
    for threshold in (0.8, 0.9):
        model = fit_clusters(matrix, names, threshold)
        groups, values, general = _released_pipeline(matrix, threshold)
        assert [list(c) for c in model.clusters] == groups
        assert model.clusters[0] == (0, 1, 2)  # the monotone trio is one cluster
        np.testing.assert_allclose(model.cluster_values(matrix), values, atol=1e-9)
        np.testing.assert_allclose(model.general_values(matrix), general, atol=1e-9)
    with pytest.raises(ValueError, match="between 0 and 1"):
        fit_clusters(matrix, names, 1.0)
    with pytest.raises(ValueError, match="no explainable feature has two different values"):
        fit_clusters(np.ones((4, 2)), ("a", "b"))


def test_first_component_sign_and_single_column():
    matrix = _correlated(5)[:, :3]
    component, ratio = first_component(matrix)
    pca = PCA(n_components=1).fit(np.nan_to_num(matrix))
    assert component.sum() >= 0 and ratio == pytest.approx(pca.explained_variance_ratio_[0])
    np.testing.assert_allclose(np.abs(component), np.abs(pca.components_[0]), atol=1e-10)
    assert first_component(matrix[:, :1]) == (pytest.approx([1.0]), 1.0)


def test_auroc_greater_equals_sklearn():
    rng = np.random.default_rng(6)
    reference, other = rng.integers(0, 5, 30).astype(float), rng.integers(1, 6, 25).astype(float)  # ties
    labels = np.r_[np.ones(30), np.zeros(25)]
    assert auroc_greater(reference, other) == pytest.approx(roc_auc_score(labels, np.r_[reference, other]))


# --- per-system features in eval naturalness ----------------------------------------------------


def _rows(n: int = 8) -> pl.DataFrame:
    rng = np.random.default_rng(7)
    rows = []
    for system, scale in (("human", 1.0), ("fast", 0.6), ("slow", 1.5)):
        for i in range(n):
            duration = rng.uniform(2, 9) * scale
            voiced = duration * rng.uniform(0.3, 0.8)
            f0 = np.sort(rng.uniform(90, 260, 7))
            words = " ".join(rng.choice(["yes", "well", "i", "think", "so", "maybe", "we", "could"],
                                        size=int(rng.integers(3, 25))))
            rows.append({"item_id": f"{system}-{i}", "system": system, "asker": "A", "question_key": f"q{i}",
                         "answer_duration_s": duration, "voiced_time_s": voiced, "voiced_ratio": voiced / duration,
                         **dict(zip(("f0_min", "f0_p10", "f0_p25", "f0_median", "f0_p75", "f0_p90", "f0_max"), f0)),
                         "f0_mean": float(f0.mean()), "f0_std": float(f0.std()),
                         "transcript_whisper": words if system == "slow" else None, "reference_text": words})
    return pl.DataFrame(rows, schema=RESULTS, strict=False)


def test_answer_features_temporal_and_spectral_definitions():
    row = {"answer_duration_s": 4.0, "voiced_time_s": 2.5, "voiced_ratio": 0.625, "f0_min": 90.0, "f0_p10": 100.0,
           "f0_p25": 110.0, "f0_median": 120.0, "f0_p75": 140.0, "f0_p90": 160.0, "f0_max": 200.0,
           "reference_text": "P0001: one two three four five"}
    values, source = answer_features(row)
    assert source == "reference_text"
    assert values["tmp_speech_rate_wps"] == pytest.approx(5 / 4.0)
    assert values["tmp_articulation_rate_wps"] == pytest.approx(5 / 2.5)
    assert values["tmp_unvoiced_time_s"] == pytest.approx(1.5)
    assert (values["f0_range"], values["f0_range_p10_p90"], values["f0_range_p25_p75"]) == (110.0, 60.0, 30.0)
    assert math.isnan(values["f0_mean"])
    silent, source = answer_features({"answer_duration_s": 0.0, "transcript_pocketsphinx": "hello there"})
    assert source == "transcript_pocketsphinx" and math.isnan(silent["tmp_speech_rate_wps"])


def test_distributional_metrics_per_system_and_pca_against_sklearn():
    rows = _rows()
    per_system, pooled = distributional_metrics(rows, ["human", "fast", "slow"], "human")
    durations = rows.filter(pl.col("system") == "fast")["answer_duration_s"]
    fast = per_system["fast"]["features"]["tmp_duration_s"]
    assert fast["value"] == pytest.approx(durations.mean()) and fast["std"] == pytest.approx(durations.std())
    assert per_system["slow"]["text_sources"] == {"transcript_whisper": 8}
    assert per_system["human"]["text_sources"] == {"reference_text": 8}
    assert "auroc_vs_reference" not in per_system["human"]
    human = rows.filter(pl.col("system") == "human")["answer_duration_s"].to_numpy()
    slow = rows.filter(pl.col("system") == "slow")["answer_duration_s"].to_numpy()
    assert per_system["slow"]["auroc_vs_reference"]["tmp_duration_s"]["value"] == pytest.approx(
        roc_auc_score(np.r_[np.ones(8), np.zeros(8)], np.r_[human, slow]))
    # the ≥ 50-word features have no value: left out of the clustering with the reason
    assert pooled["dropped_features"]["lex_mtld"] == "system 'human' has 0 finite value(s) (fewer than 5)"
    assert set(pooled["features"]) <= set(FEATURES) and "lex_mtld" not in pooled["features"]
    # every answer's PC coordinates equal scikit-learn's on the same z-scored matrix
    frame = pd.DataFrame([answer_features(r)[0] for r in rows.iter_rows(named=True)])[pooled["features"]]
    z = ((frame - frame.mean()) / frame.std()).fillna(0.0).to_numpy()
    expected = PCA(n_components=2).fit(z)
    ours = np.array([a["pc"] for a in pooled["pca"]["answers"]])
    signs = np.sign(np.sum(ours * expected.transform(z), axis=0))
    np.testing.assert_allclose(ours, signs * expected.transform(z), atol=1e-9)
    np.testing.assert_allclose(pooled["pca"]["explained_variance_ratio"], expected.explained_variance_ratio_)
    assert per_system["fast"]["pca_centroid"] == pytest.approx(ours[8:16].mean(axis=0).tolist())
    assert [a["item_id"] for a in pooled["pca"]["answers"]][:2] == ["human-0", "human-1"]


def test_too_few_answers_give_no_clustering_with_the_reason(tmp_path):
    per_system, pooled = distributional_metrics(_rows(3), ["human", "fast", "slow"], "human")
    assert pooled["clusters"] == [] and pooled["reason"] == (
        "no feature has 5 values, two of them different, in every system "
        "(e.g. f0_min: system 'human' has 3 finite value(s) (fewer than 5))")
    assert per_system["fast"]["features"]["tmp_duration_s"]["n"] == 3
    with pytest.raises(NoPlotData, match="explainable-feature PCA skipped: no feature has 5 values"):
        plot_feature_pca(pooled, tmp_path / "pca.png", ["human"])


def test_eval_writes_explainable_features_figure_and_table(tmp_path):
    results = tmp_path / "results.parquet"
    _rows().write_parquet(results)
    metrics = evaluate_files([results], tmp_path / "metrics.json", plot=tmp_path / "figures")
    assert (tmp_path / "figures" / "fig_feature_pca.png").stat().st_size > 0
    assert metrics["figures"]["fig_feature_pca"]["path"].endswith("fig_feature_pca.png")
    assert metrics["systems"]["slow"]["explainable_features"]["n_answers"] == 8
    assert "table_i" not in metrics
    text = format_table(metrics)
    assert "Explainable features:" in text and "slow: 8 answers, general feature" in text
    # one system alone: clustered on its own answers, no AUROC (nothing to compare with)
    metrics = evaluate_naturalness(_rows().filter(pl.col("system") == "human"))
    assert metrics["explainable_features"]["clusters"] and "reason" not in metrics["explainable_features"]
    assert "auroc_vs_reference" not in metrics["systems"]["human"]["explainable_features"]


# --- Table I ----------------------------------------------------------------------------------


def _wav(path, seconds: float, rate: int = 8000):
    sf.write(path, np.zeros(int(round(seconds * rate)), dtype=np.float32), rate)
    return path.name


def _corpus(tmp_path):
    """Three conversations: c1 improvised/dev (files 2.0 s and 2.5 s), c2 improvised/test (one stereo
    file of 3.0 s), c3 naturalistic/dev (1.5 s and 1.0 s)."""
    files = {name: _wav(tmp_path / f"{name}.wav", s) for name, s in
             (("c1a", 2.0), ("c1b", 2.5), ("c2", 3.0), ("c3a", 1.5), ("c3b", 1.0))}
    rows = [("c1", "A", files["c1a"], "improvised", "dev"), ("c1", "B", files["c1b"], None, None),
            ("c2", "A", files["c2"], "improvised", "test"), ("c2", "B", files["c2"], "improvised", "test"),
            ("c3", "A", files["c3a"], "naturalistic", "dev"), ("c3", "B", files["c3b"], "naturalistic", "dev")]
    segments = pd.DataFrame(rows, columns=["conversation_id", "speaker", "audio_path", "subset", "split"])
    segments["start"], segments["end"], segments["text"] = 0.0, 1.0, "hi?"
    segments.to_csv(tmp_path / "segments.csv", index=False)
    (tmp_path / "selection").mkdir()
    metadata = pd.DataFrame({"conversation_id": ["c1", "c1", "c3"], "question_end_time": [10.0, 20.0, 30.0],
                             "answer_duration": [1.0, 2.0, 3.0]})
    metadata.to_csv(tmp_path / "selection" / "metadata.csv", index=False)
    return tmp_path / "segments.csv", tmp_path / "selection"


def test_corpus_table_counts_and_hours(tmp_path):
    segments, selection = _corpus(tmp_path)
    table = corpus_table(segments, selection)
    assert table["columns"] == [{"subset": "improvised", "split": "dev"}, {"subset": "improvised", "split": "test"},
                                {"subset": "naturalistic", "split": "dev"}, {"subset": "total", "split": ""}]
    seconds = {n: sf.info(tmp_path / f"{n}.wav").duration for n in ("c1a", "c1b", "c2", "c3a", "c3b")}
    expected_hours = [max(seconds["c1a"], seconds["c1b"]) / 3600, seconds["c2"] / 3600,
                      max(seconds["c3a"], seconds["c3b"]) / 3600]
    rows = table["rows"]
    assert rows["original_conversations"] == [1, 1, 1, 3]
    assert rows["original_hours"] == pytest.approx([*expected_hours, sum(expected_hours)])
    assert rows["selected_dialogues"] == [2, 0, 1, 3]
    assert rows["context_question_hours"] == pytest.approx([30 / 3600, 0, 30 / 3600, 60 / 3600])
    assert rows["answer_hours"] == pytest.approx([3 / 3600, 0, 3 / 3600, 6 / 3600])
    assert rows["total_selected_hours"] == pytest.approx([33 / 3600, 0, 33 / 3600, 66 / 3600])
    text = format_corpus_table(table)
    assert "improvised/dev" in text and "Selected dialogues" in text and "0.02h" in text
    only = corpus_table(selection=selection / "metadata.csv")
    assert only["rows"]["original_hours"] is None and "--segments" in only["reasons"]["original"]
    assert only["columns"][0] == {"subset": "all", "split": "all"} and only["rows"]["selected_dialogues"] == [3, 3]
    dev = corpus_table(segments, selection, splits=("dev",))
    assert [c["subset"] for c in dev["columns"]] == ["improvised", "naturalistic", "total"]
    assert dev["rows"]["original_conversations"] == [1, 1, 2] and dev["rows"]["selected_dialogues"] == [2, 1, 3]
    with pytest.raises(ManifestError, match=r"Table I: no conversation of subset scripted; split dev \(found "
                                            r"improvised/dev, improvised/test, naturalistic/dev\)"):
        corpus_table(segments, selection, subsets=("scripted",), splits=("dev",))
    assert "-" in format_corpus_table(only)


def test_corpus_table_prefers_the_metadata_labels_and_eval_wires_it(tmp_path):
    segments, selection = _corpus(tmp_path)
    metadata = pd.read_csv(selection / "metadata.csv")
    metadata["subset"], metadata["split"] = "naturalistic", "test"
    metadata.to_csv(selection / "metadata.csv", index=False)
    assert corpus_table(segments, selection)["rows"]["selected_dialogues"] == [0, 0, 0, 3, 3]
    results = tmp_path / "results.parquet"
    _rows(3).write_parquet(results)
    metrics = evaluate_files([results], tmp_path / "m.json", segments=segments, selection=selection)
    assert metrics["table_i"]["rows"]["original_conversations"][-1] == 3
    assert "Table I: original conversations and selected dialogues" in format_table(metrics)


def test_corpus_table_errors_name_the_file_and_row(tmp_path):
    segments, selection = _corpus(tmp_path)
    with pytest.raises(ValueError, match="needs the segments table, the selection, or both"):
        corpus_table()
    pd.DataFrame({"conversation_id": ["c9"], "question_end_time": [1.0], "answer_duration": [1.0]}).to_csv(
        tmp_path / "other.csv", index=False)
    with pytest.raises(ManifestError, match=r"other.csv row 1: conversation 'c9' is not in the segments table"):
        corpus_table(segments, tmp_path / "other.csv")
    pd.DataFrame({"conversation_id": ["c1"], "question_end_time": [-1.0], "answer_duration": [1.0]}).to_csv(
        tmp_path / "negative.csv", index=False)
    with pytest.raises(ManifestError, match=r"negative.csv row 1: question_end_time -1.0 is not a non-negative"):
        corpus_table(selection=tmp_path / "negative.csv")
    pd.DataFrame({"conversation_id": ["c1"]}).to_csv(tmp_path / "bare.csv", index=False)
    with pytest.raises(ManifestError, match=r"bare.csv: the selection metadata lacks column\(s\) question_end_time, "
                                            "answer_duration"):
        corpus_table(selection=tmp_path / "bare.csv")
    row = {"conversation_id": ["c1"], "speaker": ["A"], "start": [0.0], "end": [1.0], "text": ["hi?"],
           "audio_path": ["missing.wav"]}
    pd.DataFrame(row).to_csv(tmp_path / "seg.csv", index=False)
    with pytest.raises(AudioError, match=r"seg.csv: conversation 'c1': cannot read the audio .*missing.wav"):
        corpus_table(tmp_path / "seg.csv")
    pd.DataFrame({"conversation_id": ["c1"], "audio_path": ["x.wav"]}).to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(ManifestError, match=r"short.csv: missing column\(s\) speaker, start, end, text"):
        corpus_table(tmp_path / "short.csv")
    with pytest.raises(ManifestError, match="a folder, but not a Seamless Interaction folder"):
        corpus_table(selection)  # a selection folder given as the segments


def test_corpus_table_lists_an_unreadable_conversation(tmp_path):
    segments, _ = _corpus(tmp_path)
    frame = pd.read_csv(segments)
    bad = frame.iloc[[0]].assign(conversation_id="c4", start="soon")  # an unreadable start: the row is a problem
    pd.concat([frame, bad]).to_csv(segments, index=False)
    table = corpus_table(segments)
    assert table["rows"]["original_conversations"][-1] == 3 and table["unreadable_conversations"] == ["c4"]
    assert format_corpus_table(table).endswith("1 unreadable conversation(s) left out: c4")


def test_corpus_table_refuses_fifos_instead_of_blocking_on_them(tmp_path):
    """A FIFO where an original's audio or the selection's metadata.csv is expected: one error naming it
    (was: Table I blocked forever in soundfile's open, and 'no such file or folder' for the FIFO table)."""
    import os

    from fifo_guard import unblocking

    segments, selection = _corpus(tmp_path)
    (tmp_path / "c3a.wav").unlink()
    os.mkfifo(tmp_path / "c3a.wav")
    (selection / "metadata.csv").unlink()
    os.mkfifo(selection / "metadata.csv")

    with unblocking(tmp_path / "c3a.wav", selection / "metadata.csv"):  # a blocked read fails, not hangs
        with pytest.raises(AudioError, match=r"segments\.csv: conversation 'c3': the audio .*c3a\.wav is not a "
                                             r"regular file"):
            corpus_table(segments)
        with pytest.raises(ManifestError, match=r"metadata\.csv: not a regular file or folder \(a FIFO"):
            corpus_table(selection=selection)

def test_cli_eval_table_i_explainable_features_and_report(tmp_path, capsys):
    from sdscore.cli import main

    segments, selection = _corpus(tmp_path)
    results = tmp_path / "results.parquet"
    _rows().write_parquet(results)
    out, html = tmp_path / "metrics.json", tmp_path / "report.html"
    assert main(["eval", "naturalness", str(results), "--out", str(out), "--plot", str(tmp_path / "figures"),
                 "--segments", str(segments), "--selection", str(selection), "--report", str(html)]) == 0
    printed = capsys.readouterr().err  # the CLI's console writes to stderr
    assert "Table I: original conversations and selected dialogues" in printed and "naturalistic/dev" in printed
    assert "Explainable features:" in printed
    page = html.read_text(encoding="utf-8")
    assert "Table I: original conversations and selected dialogues" in page
    assert "most separable features (AUROC vs reference)" in page and "LDA baseline score (test)" in page
    assert "Explainable features: answers on the first two principal components" in page


def test_corpus_table_of_a_seamless_interaction_folder(tmp_path):
    """Table I's originals from a Seamless Interaction folder as select-dialogues reads it: per
    interaction its subset/split folders and the longer of its participants' files."""
    import json

    root = tmp_path / "seamless"
    lengths = {("improvised", "dev", "V00_S0001_I00000001"): (2.0, 3.0),
               ("naturalistic", "test", "V00_S0002_I00000007"): (1.0, 1.5)}
    for (subset, split, interaction), seconds in lengths.items():
        folder = root / subset / split / "0000"
        folder.mkdir(parents=True)
        for participant, length in zip(("P0001", "P0002"), seconds):
            _wav(folder / f"{interaction}_{participant}.wav", length, rate=16000)
            entry = {"transcript": "Hi?", "start": 0.0, "end": 0.5, "words": []}
            (folder / f"{interaction}_{participant}.json").write_text(
                json.dumps({"id": f"{interaction}_{participant}", "metadata:transcript": [entry]}))
    table = corpus_table(root)
    assert table["columns"][:2] == [{"subset": "improvised", "split": "dev"}, {"subset": "naturalistic", "split": "test"}]
    assert table["rows"]["original_conversations"] == [1, 1, 2]
    assert table["rows"]["original_hours"] == pytest.approx([3.0 / 3600, 1.5 / 3600, 4.5 / 3600])


def test_average_ranks_equal_scipy_rankdata():
    from sdscore.protocols.naturalness.feature_clusters import average_ranks

    values = np.random.default_rng(8).integers(0, 7, 50).astype(float)
    np.testing.assert_array_equal(average_ranks(values), stats.rankdata(values))
    assert average_ranks(np.array([])).size == 0


def test_lda_1d_equals_sklearn_linear_discriminant():
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    from sdscore.protocols.naturalness.distributional_features import lda_1d

    rng = np.random.default_rng(9)
    reference, other = rng.normal(1.0, 1.0, 23), rng.normal(0.2, 1.5, 31)
    lda = LinearDiscriminantAnalysis().fit(np.r_[reference, other][:, None], np.r_[np.ones(23), np.zeros(31)])
    slope, intercept = lda_1d(reference, other)
    grid = np.linspace(-4, 4, 17)
    np.testing.assert_allclose(slope * grid + intercept, lda.decision_function(grid[:, None]), rtol=1e-9, atol=1e-9)
    assert lda_1d(reference[:1], other) is None and lda_1d(np.ones(3), np.ones(4)) is None


def test_lda_baseline_fits_on_dev_and_scores_test_as_the_released_code():
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    rows = _rows(16).with_columns(pl.Series("split", (["dev"] * 8 + ["test"] * 8) * 3))
    per_system, pooled = distributional_metrics(rows, ["human", "fast", "slow"], "human")
    baseline = per_system["fast"]["lda_baseline"]
    frame = pd.DataFrame([answer_features(r)[0] for r in rows.iter_rows(named=True)])
    frame["system"], frame["split"] = rows["system"].to_list(), rows["split"].to_list()
    probabilities = []
    for feature in FEATURES:
        dev = frame[(frame.split == "dev") & frame.system.isin(["human", "fast"])].dropna(subset=[feature])
        if (dev.system == "human").sum() < 2 or (dev.system == "fast").sum() < 2 or dev[feature].std() == 0:
            assert baseline["features"][feature]["accuracy"] is None
            continue
        lda = LinearDiscriminantAnalysis().fit(dev[[feature]], (dev.system == "human").astype(int))
        test = frame[(frame.split == "test") & frame.system.isin(["human", "fast"])].dropna(subset=[feature])
        truth = (test.system == "human").astype(int)
        got = baseline["features"][feature]
        assert got["accuracy"] == pytest.approx(float((lda.predict(test[[feature]]) == truth).mean()))
        assert got["auroc"] == pytest.approx(roc_auc_score(truth, lda.predict_proba(test[[feature]])[:, 1]))
        fast = frame[(frame.split == "test") & (frame.system == "fast")][[feature]]
        probabilities.append(np.where(fast[feature].notna(), lda.predict_proba(fast.fillna(0))[:, 1], np.nan))
    assert baseline["value"] == pytest.approx(np.nanmean(np.array(probabilities), axis=0).mean())
    assert baseline["n"] == 8 and "lda_baseline" not in per_system["human"]
    from sdscore.protocols.naturalness.distributional_features import format_explainable

    assert f"LDA baseline score {baseline['value']:.3f}" in format_explainable(per_system, pooled)
    without = distributional_metrics(_rows(), ["human", "fast"], "human")[0]["fast"]["lda_baseline"]
    assert without == {"value": None, "reason": "needs dev and test rows (the results' split column) of both "
                                                "'human' and 'fast'"}


@pytest.mark.parametrize("column", ["answer_duration_s", "f0_max"])
def test_values_too_large_to_summarise_are_null_with_the_reason_and_metrics_stay_json(column):
    """One 1e308 in a results column overflowed a std (Table III's duration, the explainable features,
    pitch variation) to inf, and eval failed writing METRICS.json ('Out of range float values are not JSON
    compliant', naming nothing); now those records are null with the reason, the other systems kept."""
    import json
    import re

    from sdscore.protocols.naturalness.evaluate import evaluate_naturalness

    frame = _rows().with_columns(pl.when(pl.col("item_id") == "human-1").then(pl.lit(1e308))
                                 .otherwise(pl.col(column)).alias(column))
    metrics = evaluate_naturalness(frame)
    json.dumps(metrics, allow_nan=False)
    human = metrics["systems"]["human"]
    record = human["answer_duration_s"] if column == "answer_duration_s" else human["pitch_variation"]
    assert record["value"] is None and re.search(r"too large to (summarise|compute with)", record["reason"])
    if column == "answer_duration_s":
        feature = human["explainable_features"]["features"]["tmp_duration_s"]
        assert feature["value"] is None and "largest |value| 1e+308" in feature["reason"]
    assert metrics["systems"]["fast"]["answer_duration_s"]["value"] is not None
