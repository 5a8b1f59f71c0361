"""SPEARBench's explainable distributional baselines in `eval naturalness`: per answer the spectral
(F0), temporal and lexical features of the authors' bin/distrib_baselines, per system their means, the
answers' separability from the reference system's, the correlation-cluster PCA and the answers'
coordinates on the first two principal components (the "explainable features" PCA figure).

Features per scored row (results.py's columns; null where their inputs are):

- spectral: the F0 statistics in Hz (f0_min … f0_max, f0_mean, f0_std) and the ranges f0_range
  (max − min), f0_range_p10_p90, f0_range_p25_p75, as the released compute_f0_features;
- temporal: tmp_duration_s (the answer clip), tmp_voiced_time_s, tmp_voiced_ratio,
  tmp_unvoiced_time_s (duration − voiced time), tmp_speech_rate_wps (words / duration) and
  tmp_articulation_rate_wps (words / voiced time). The released temporal extractor has no word timings
  for the benchmark's answers: it spreads the words evenly over the answer, so its pause statistics are
  a function of words per second alone; these use the measured voiced time instead;
- lexical: lexical_features.py on the answer's text — transcript_whisper when there is one, else the
  manifest's transcript_answer (reference_text), else transcript_pocketsphinx (the released code: the
  ASR transcript, else the transcript); `text_sources` counts which was used.

The clustering (feature_clusters.py) is fitted once on every system's scored rows pooled (the authors
fit it per model on the dev split of the human and that model's answers), so that every system's
answers lie in one space; a feature enters only with at least MIN_VALID finite values and two different
values in every system (the released numeric_feature_columns), the others are listed with why.
auroc_vs_reference: per feature, P(reference value > system value) + ½ P(equal) over all pairs of the
two systems' answers (Mann–Whitney); 0.5 = indistinguishable. The released baseline fits a 1-D LDA per
feature on dev and reports its test AUROC; a 1-D LDA's posterior is monotone in the feature, so its
AUROC is this value or 1 − it. lda_baseline is that released baseline itself, when the rows have
dev and test splits: per feature a 1-D LDA fitted on the dev answers of the reference and the system,
its accuracy and AUROC on the test answers, and the system's score, the mean over its test answers of
the mean P(reference) over the features (their average_naturalness_score).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from sdscore.protocols.naturalness.feature_clusters import (
    CLUSTER_RHO,
    MIN_VALID,
    average_ranks,
    fit_clusters,
    principal_components,
)
from sdscore.protocols.naturalness.lexical_features import LEXICAL_FEATURES, lexical_features, tokens

SPECTRAL_FEATURES = ("f0_min", "f0_p10", "f0_p25", "f0_median", "f0_p75", "f0_p90", "f0_max", "f0_mean", "f0_std",
                     "f0_range", "f0_range_p10_p90", "f0_range_p25_p75")
TEMPORAL_FEATURES = ("tmp_duration_s", "tmp_voiced_time_s", "tmp_voiced_ratio", "tmp_unvoiced_time_s",
                     "tmp_speech_rate_wps", "tmp_articulation_rate_wps")
FEATURES = (*SPECTRAL_FEATURES, *TEMPORAL_FEATURES, *LEXICAL_FEATURES)
#: the text columns tried in order for the lexical features
TEXT_COLUMNS = ("transcript_whisper", "reference_text", "transcript_pocketsphinx")
FIGURE = "fig_feature_pca"


def _number(value) -> float:
    return np.nan if value is None else float(value)


def _ratio(a: float, b: float) -> float:
    return a / b if np.isfinite(a) and np.isfinite(b) and b > 0 else np.nan


def answer_text(row: dict) -> tuple[str | None, str | None]:
    """(the text the lexical features read, its column) — the first TEXT_COLUMNS with a word."""
    for column in TEXT_COLUMNS:
        text = row.get(column)
        if text and tokens(str(text)):
            return str(text), column
    return None, None


def answer_features(row: dict) -> tuple[dict[str, float], str | None]:
    """FEATURES of one results row (NaN where undefined) and the text column the lexical ones read."""
    f0 = {name: _number(row.get(name)) for name in SPECTRAL_FEATURES[:9]}
    out = dict(f0)
    out["f0_range"] = f0["f0_max"] - f0["f0_min"]
    out["f0_range_p10_p90"] = f0["f0_p90"] - f0["f0_p10"]
    out["f0_range_p25_p75"] = f0["f0_p75"] - f0["f0_p25"]
    text, source = answer_text(row)
    lexical = lexical_features(text)
    words = _number(lexical["lex_total_words"])
    duration, voiced = _number(row.get("answer_duration_s")), _number(row.get("voiced_time_s"))
    out.update(tmp_duration_s=duration, tmp_voiced_time_s=voiced, tmp_voiced_ratio=_number(row.get("voiced_ratio")),
               tmp_unvoiced_time_s=duration - voiced, tmp_speech_rate_wps=_ratio(words, duration),
               tmp_articulation_rate_wps=_ratio(words, voiced))
    out.update({name: _number(value) for name, value in lexical.items()})
    return out, source


def feature_matrix(rows: pl.DataFrame) -> tuple[np.ndarray, list[str | None]]:
    """Answers × FEATURES (NaN where undefined; ±inf as NaN) and each answer's text column."""
    table, sources = [], []
    for row in rows.iter_rows(named=True):
        values, source = answer_features(row)
        table.append([values[name] for name in FEATURES])
        sources.append(source)
    matrix = np.asarray(table, dtype=np.float64).reshape(len(table), len(FEATURES))
    matrix[~np.isfinite(matrix)] = np.nan
    return matrix, sources


def auroc_greater(reference: np.ndarray, other: np.ndarray) -> float:
    """P(reference > other) + ½ P(equal) over every pair (the Mann–Whitney AUROC)."""
    ranks = average_ranks(np.concatenate([reference, other]))
    u = ranks[:reference.size].sum() - reference.size * (reference.size + 1) / 2
    return float(u / (reference.size * other.size))


def _summary(values: np.ndarray) -> dict:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {"value": None, "n": 0, "reason": "no answer has a value"}
    with np.errstate(over="ignore", invalid="ignore"):
        mean, std = float(finite.mean()), float(finite.std(ddof=1)) if finite.size > 1 else None
    if not all(math.isfinite(v) for v in (mean, std) if v is not None):
        return {"value": None, "n": 0, "reason": f"the values are too large to summarise (the mean or std overflows; "
                                                 f"largest |value| {float(np.abs(finite).max()):g})"}
    return {"value": mean, "n": int(finite.size), "std": std}


def usable_features(matrix: np.ndarray, systems: np.ndarray, names: Sequence[str]) -> tuple[list[int], dict]:
    """The columns with ≥ MIN_VALID finite values and two different values in every system; the others
    name → why."""
    keep, dropped = [], {}
    for j, name in enumerate(names):
        for system in dict.fromkeys(systems.tolist()):
            values = matrix[systems == system, j]
            values = values[np.isfinite(values)]
            if values.size < MIN_VALID or np.unique(values).size < 2:
                dropped[name] = (f"system {system!r} has {values.size} finite value(s)"
                                 + (f" (fewer than {MIN_VALID})" if values.size < MIN_VALID else ", all equal"))
                break
        else:
            keep.append(j)
    return keep, dropped


def distributional_metrics(rows: pl.DataFrame, order: Sequence[str], reference: str) -> tuple[dict, dict]:
    """(per system: features, text sources, AUROC vs reference, cluster/general/PC means; the pooled
    clustering and PCA with every answer's coordinates) from the scored rows of every system."""
    matrix, sources = feature_matrix(rows)
    systems = np.asarray(rows["system"].to_list(), dtype=object)
    per_system: dict[str, dict] = {}
    for name in order:
        mask = systems == name
        used = [s for s, m in zip(sources, mask) if m]
        per_system[name] = {
            "n_answers": int(mask.sum()),
            "features": {f: _summary(matrix[mask, j]) for j, f in enumerate(FEATURES)},
            "text_sources": {column: used.count(column) for column in (*TEXT_COLUMNS, None) if used.count(column)},
        }
        if None in per_system[name]["text_sources"]:
            per_system[name]["text_sources"]["none"] = per_system[name]["text_sources"].pop(None)
    _separability(per_system, matrix, systems, reference)
    splits = np.asarray(rows["split"].to_list() if "split" in rows.columns else [None] * rows.height, dtype=object)
    _lda_baselines(per_system, matrix, systems, splits, reference)
    pooled = _clusters(per_system, matrix, systems, rows)
    return per_system, pooled


def lda_1d(reference: np.ndarray, other: np.ndarray) -> tuple[float, float] | None:
    """A two-class linear discriminant on one feature (reference = class 1), as scikit-learn's
    LinearDiscriminantAnalysis's decision function works out: class means, the pooled within-class
    variance over n and the class shares as priors; (slope, intercept) of the log-odds of the reference class, or None
    with fewer than 2 values per class or no spread."""
    if reference.size < 2 or other.size < 2 or np.concatenate([reference, other]).std() == 0:
        return None
    m1, m0 = reference.mean(), other.mean()
    n = reference.size + other.size
    variance = (((reference - m1) ** 2).sum() + ((other - m0) ** 2).sum()) / n
    if variance <= 0:
        return None
    slope = (m1 - m0) / variance
    return slope, -(m1 * m1 - m0 * m0) / (2 * variance) + np.log(reference.size / other.size)


def _lda_baselines(per_system: dict, matrix: np.ndarray, systems: np.ndarray, splits: np.ndarray,
                   reference: str) -> None:
    """The released explainable baseline (compute_features_scores.py): per feature a 1-D LDA of the
    reference's vs the system's answers fitted on the dev rows, its accuracy and AUROC on the test rows,
    and the system's naturalness score: the mean over its test answers of the mean P(reference) over
    the features."""
    dev, test = splits == "dev", splits == "test"
    ref = systems == reference
    for name, values in per_system.items():
        if name == reference:
            continue
        own = systems == name
        if not ((ref & dev).any() and (own & dev).any() and (ref & test).any() and (own & test).any()):
            values["lda_baseline"] = {"value": None, "reason": "needs dev and test rows (the results' split column) "
                                                                 f"of both {reference!r} and {name!r}"}
            continue
        features, probabilities = {}, []
        for j, feature in enumerate(FEATURES):
            column = matrix[:, j]
            fitted = lda_1d(*(column[m & dev][np.isfinite(column[m & dev])] for m in (ref, own)))
            if fitted is None:
                features[feature] = {"accuracy": None, "auroc": None,
                                     "reason": "fewer than 2 dev values per system, or no spread"}
                continue
            slope, intercept = fitted
            a, b = (column[m & test][np.isfinite(column[m & test])] for m in (ref, own))
            score = lambda x: slope * x + intercept  # noqa: E731 - the log-odds of the reference
            out = {"n_reference_test": int(a.size), "n_test": int(b.size)}
            if a.size and b.size:
                hits = (score(a) > 0).sum() + (score(b) <= 0).sum()
                out.update(accuracy=float(hits / (a.size + b.size)),
                           auroc=auroc_greater(score(a), score(b)))
            else:
                out.update(accuracy=None, auroc=None, reason="no test value")
            features[feature] = out
            own_test = column[own & test]
            probabilities.append(np.where(np.isfinite(own_test), 1 / (1 + np.exp(-score(own_test))), np.nan))
        per_answer = np.array(probabilities)
        answered = np.isfinite(per_answer).any(axis=0) if per_answer.size else np.zeros(0, dtype=bool)
        score_mean = (np.nanmean(per_answer[:, answered], axis=0) if answered.any() else np.zeros(0))
        values["lda_baseline"] = {"value": float(score_mean.mean()) if score_mean.size else None,
                                  "n": int(score_mean.size), "features": features}


def _separability(per_system: dict, matrix: np.ndarray, systems: np.ndarray, reference: str) -> None:
    ref = systems == reference
    for name, values in per_system.items():
        if name == reference:
            continue
        out = {}
        for j, feature in enumerate(FEATURES):
            a, b = matrix[ref, j], matrix[systems == name, j]
            a, b = a[np.isfinite(a)], b[np.isfinite(b)]
            out[feature] = ({"value": auroc_greater(a, b), "n_reference": int(a.size), "n": int(b.size)} if a.size and b.size
                            else {"value": None, "reason": f"{'the reference' if not a.size else name!r} has no value"})
        values["auroc_vs_reference"] = out


def _clusters(per_system: dict, matrix: np.ndarray, systems: np.ndarray, rows: pl.DataFrame) -> dict:
    keep, dropped = usable_features(matrix, systems, FEATURES)
    names = tuple(FEATURES[j] for j in keep)
    base = {"threshold_abs_rho": CLUSTER_RHO, "min_valid": MIN_VALID, "dropped_features": dropped,
            "fitted_on": "every system's scored rows pooled"}
    try:
        if not keep:
            first = next(iter(dropped.items()))
            raise ValueError(f"no feature has {MIN_VALID} values, two of them different, in every system "
                             f"(e.g. {first[0]}: {first[1]})")
        model = fit_clusters(matrix[:, keep], names)
    except ValueError as error:
        return {**base, "clusters": [], "reason": str(error)}
    for name in names:
        if name not in model.features:
            dropped[name] = "no spread over the pooled rows"
    sub = matrix[:, [FEATURES.index(f) for f in model.features]]
    cluster_values = model.cluster_values(sub)
    general = cluster_values @ model.general
    z = np.nan_to_num(model.zscores(sub), nan=0.0)
    k = min(2, z.shape[1])
    components, ratios, centre = principal_components(z, k)
    scores = (z - centre) @ components.T
    clusters = [{"name": f"cluster_{i + 1:02d}", "features": [model.features[j] for j in group],
                 "loadings": [float(w) for w in weights], "explained_variance_ratio": explained}
                for i, (group, weights, explained) in enumerate(zip(model.clusters, model.loadings, model.explained))]
    for name, values in per_system.items():
        mask = systems == name
        values["clusters"] = {c["name"]: _summary(cluster_values[mask, i]) for i, c in enumerate(clusters)}
        values["general_feature"] = _summary(general[mask])
        values["pca_centroid"] = [float(scores[mask, i].mean()) if mask.any() else None for i in range(k)]
    ids = rows["item_id"].to_list() if "item_id" in rows.columns else [None] * rows.height
    return {
        **base,
        "features": list(model.features),
        "feature_means": [float(v) for v in model.means],
        "feature_stds": [float(v) for v in model.stds],
        "clusters": clusters,
        "general": {"loadings": [float(w) for w in model.general],
                    "explained_variance_ratio": model.general_explained},
        "pca": {"components": components.tolist(), "explained_variance_ratio": ratios.tolist(),
                "answers": [{"item_id": i, "system": s, "pc": [float(v) for v in p]}
                            for i, s, p in zip(ids, systems.tolist(), scores)]},
    }


def plot_feature_pca(pooled: dict, path: str | os.PathLike, systems: Sequence[str]) -> Path:
    """Every answer on the first two principal components of the z-scored explainable features, one colour
    per system, the system's centroid as a large marker (NoPlotData when there is no PCA)."""
    from sdscore.report.naturalness_plots import NoPlotData, _colours, _figure, _save

    pca = pooled.get("pca")
    if not pca or len(pca["explained_variance_ratio"]) < 2:
        raise NoPlotData("explainable-feature PCA skipped: "
                         + (pooled.get("reason") or "fewer than two features entered the PCA"))
    answers = pca["answers"]
    names = [s for s in systems if any(a["system"] == s for a in answers)]
    colours = _colours(names)
    figure, axes = _figure(6.4, 5.2, 1)
    ax = axes[0]
    for name in names:
        points = np.array([a["pc"] for a in answers if a["system"] == name])
        ax.scatter(points[:, 0], points[:, 1], s=12, alpha=0.4, color=colours[name], edgecolors="none", label=name)
        ax.scatter(*points.mean(axis=0), s=160, marker="X", color=colours[name], edgecolors="black", linewidths=0.8)
    ratios = pca["explained_variance_ratio"]
    ax.set_xlabel(f"PC1 ({100 * ratios[0]:.1f} % of the variance)")
    ax.set_ylabel(f"PC2 ({100 * ratios[1]:.1f} % of the variance)")
    ax.axhline(0, color="#777777", linewidth=0.6)
    ax.axvline(0, color="#777777", linewidth=0.6)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="system (X: centroid)")
    figure.suptitle(f"Explainable features: answers on the first two principal components\n"
                    f"of {len(pooled['features'])} z-scored spectral, temporal and lexical features", fontsize=10)
    return _save(figure, path)


def format_explainable(per_system: dict[str, dict], pooled: dict) -> str:
    """The explainable features as plain text: per system its answers, the general feature's mean ± std
    and its centroid on the first two principal components."""
    if not pooled.get("clusters"):
        return f"Explainable features: no clustering ({pooled.get('reason', 'no feature')})"
    ratios = pooled["pca"]["explained_variance_ratio"]
    lines = [f"Explainable features: {len(pooled['features'])} features in {len(pooled['clusters'])} clusters "
             f"(|rho| >= {pooled['threshold_abs_rho']}); PCs explain "
             + " / ".join(f"{100 * r:.1f} %" for r in ratios)]
    for name, values in per_system.items():
        general = values.get("general_feature") or {}
        if general.get("value") is None:
            lines.append(f"  {name}: no answer")
            continue
        spread = "" if general.get("std") is None else f" ± {general['std']:.2f}"
        centroid = ", ".join(f"{v:.2f}" for v in values["pca_centroid"])
        lda = (values.get("lda_baseline") or {}).get("value")
        lines.append(f"  {name}: {values['n_answers']} answers, general feature {general['value']:.2f}{spread}, "
                     f"PC centroid ({centroid})" + ("" if lda is None else f", LDA baseline score {lda:.3f}"))
    return "\n".join(lines)
