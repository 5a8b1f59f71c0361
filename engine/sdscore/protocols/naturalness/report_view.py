"""The naturalness report (SPEARBench): Table III per system, the paired tests against the reference
system, Figs. 3, 4 and 6, and the worst and best rated answers (DNSMOS OVRL) with their audio."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import polars as pl

from sdscore.protocols.naturalness.evaluate import TABLE_COLUMNS
from sdscore.report.html.elements import Figure, Note, Table, format_value, metric, text
from sdscore.report.html.embedding import png_file_uri
from sdscore.report.html.items import extreme_items, failed_items
from sdscore.report.html.view_context import ViewContext

#: Headline values per system: (label, key, digits).
HEADLINE = (("WER %", "wer_pct", 1), ("latency ms", "latency_ms", 0), ("interrupted %", "interrupted_pct", 1),
            ("DNSMOS OVRL", "mos_dnsmos_ovrl", 2), ("pitch variation", "pitch_variation", 3))
FIGURES = {"fig2_turn_taking": "Fig. 2 (top): turn-taking surprisal per answer (model-free n-gram baseline)",
           "fig2_turn_taking_vap": "Fig. 2 (top): turn-taking surprisal per answer (VAP evaluators, "
                                   "--turn-taking-model)",
           "fig2_emotional_naturalness": "Fig. 2 (bottom): emotional naturalness score per answer (test rows)",
           "fig3_dialect_profiles": "Fig. 3: dialect profiles of questions and answers",
           "fig4_avd_scatter": "Fig. 4: arousal/valence/dominance of answers against questions",
           "fig6_pitch_features": "Fig. 6: speaker-normalised pitch features per system",
           "fig5_stances": "Fig. 5: answers at the positive pole of each stance dimension, per system",
           "fig_feature_pca": "Explainable features: answers on the first two principal components"}


def _facts(row: dict) -> list[tuple[str, str]]:
    return [("system", format_value(row.get("system") or "human")),
            ("DNSMOS OVRL", format_value(row.get("mos_dnsmos_ovrl"), 2)),
            ("latency ms", format_value(row.get("latency_ms"), 0)),
            ("answer transcript", format_value(row.get("reference_text")))]


def _value(source: str, metrics, system: str, key: str, digits: int):
    cell = metric(source, metrics, ("systems", system, key, "value"), digits)
    reason = metrics["systems"][system][key].get("reason")
    return replace(cell, hint=reason) if reason else cell


def _figures(ctx: ViewContext) -> list:
    """The eval's figure PNGs when METRICS.json lists them and they exist, else drawn afresh (the same
    evaluation, run again in a temporary folder only for its figures)."""
    listed = ctx.metrics.get("figures") or {}
    paths = {name: Path(entry["path"]) for name, entry in listed.items() if entry.get("path")}
    if not paths or not all(p.is_file() for p in paths.values()):
        from sdscore.protocols.naturalness.evaluate import evaluate_files

        with tempfile.TemporaryDirectory(prefix="sdscore-report-") as folder:
            redrawn = evaluate_files([p for p, _ in ctx.results], Path(folder) / "metrics.json",
                                     plot=Path(folder) / "figures")["figures"]
            return _figure_blocks(redrawn, {n: Path(e["path"]) for n, e in redrawn.items() if e.get("path")})
    return _figure_blocks(listed, paths)


def _figure_blocks(listed: dict, paths: dict[str, Path]) -> list:
    blocks: list = []
    for name, title in FIGURES.items():
        if name in paths:
            blocks.append(Figure(title, png_file_uri(paths[name])))
        elif name in listed:
            blocks.append(Note(f"{title}: not drawn ({listed[name].get('skipped', 'no data')})."))
    return blocks


def _stances(m: dict) -> list:
    """The stance judge's values per system, labelled with the judge that gave them (the demo's is a fake)."""
    from sdscore.protocols.naturalness.stance_dimensions import NAMES

    systems = {name: values.get("stances") or {} for name, values in m.get("systems", {}).items()}
    judged = {name: st for name, st in systems.items() if st.get("per_dimension")}
    if not judged:
        return []
    judges = sorted({j for st in judged.values() for j in st.get("judges", [])})
    fake = any("fake" in j for j in judges)
    caption = (f"Judge: {', '.join(judges)}. The answer's rating (-1/0/+1 on each dimension) against the "
               "question's; Same/Neg/Pos % pooled over rows and dimensions, then the positive-pole % per dimension.")
    if fake:
        caption = "FAKE JUDGE (the demo's stand-in: ratings from the clips' loudness, not a stance model). " + caption
    rows = []
    for name, st in judged.items():
        vs = st["vs_question"]
        rows.append([text(name), text(str(st["n_scored"])), text(str(st["n_errors"])),
                     *(text(format_value(vs[k]["value"], 1)) for k in ("same", "more_negative", "more_positive")),
                     *(text(format_value(st["positive_pct"][d], 0)) for d in NAMES)])
    return [Table("Interpersonal stances" + (" (fake judge)" if fake else ""),
                  ["system", "rows", "errors", "same %", "more negative %", "more positive %",
                   *(f"{d} +%" for d in NAMES)], rows, caption)]


def _explainable(m: dict) -> list:
    """Table I when the eval counted it, and per system the explainable features' general component,
    PCA centroid and the features that separate it most from the reference (AUROC farthest from 0.5)."""
    from sdscore.protocols.naturalness.corpus_table import ROWS

    blocks: list = []
    table_i = m.get("table_i")
    if table_i:
        header = ["", *(c["subset"] if c["subset"] == "total" else f"{c['subset']} {c['split']}"
                        for c in table_i["columns"])]
        rows = [[text(label), *(text("-" if table_i["rows"][key] is None else
                                     f"{v:.0f}" if kind == "count" else f"{v:.2f} h") for v in
                                (table_i["rows"][key] or [None] * (len(header) - 1)))]
                for key, label, kind in ROWS]
        blocks.append(Table("Table I: original conversations and selected dialogues", header, rows,
                            "As SPEARBench's Table I: original hours per conversation its longest audio file; "
                            "contexts+questions the question clips, answers the answer clips.", sortable=False))
    pooled = m.get("explainable_features") or {}
    if not pooled.get("clusters"):
        return blocks
    rows = []
    for name, values in m["systems"].items():
        features = values.get("explainable_features") or {}
        general = features.get("general_feature") or {}
        aurocs = {k: v["value"] for k, v in (features.get("auroc_vs_reference") or {}).items() if v.get("value") is not None}
        top = sorted(aurocs, key=lambda k: -abs(aurocs[k] - 0.5))[:3]
        rows.append([text(name), text(str(features.get("n_answers", 0))), text(format_value(general.get("value"), 2)),
                     text(", ".join(format_value(v, 2) for v in features.get("pca_centroid") or [])),
                     text("; ".join(f"{k} {aurocs[k]:.2f}" for k in top) or "-"),
                     text(format_value((features.get("lda_baseline") or {}).get("value"), 3))])
    ratios = pooled["pca"]["explained_variance_ratio"]
    blocks.append(Table("Explainable features", ["system", "answers", "general feature", "PC centroid",
                                                 "most separable features (AUROC vs reference)",
                                                 "LDA baseline score (test)"], rows,
                        f"{len(pooled['features'])} spectral, temporal and lexical features z-scored over all systems' "
                        f"answers, {len(pooled['clusters'])} correlation clusters (|rho| >= "
                        f"{pooled['threshold_abs_rho']}); the PCs explain "
                        + " / ".join(f"{100 * r:.1f} %" for r in ratios) + " of the variance. AUROC: P(reference "
                        "answer's value > this system's); 0.5 = indistinguishable. LDA baseline score: the released "
                        "explainable baseline (per-feature LDA fitted on dev, mean P(human-like) of the test answers); "
                        "— without dev and test rows."))
    return blocks


def _emotional(m: dict) -> list:
    """Emotional naturalness per system: the score, its paired Friedman test against the reference, and
    the calibration; a random-weight predictor (the demo's) labelled as such."""
    calibration = m.get("emotional_naturalness_calibration") or {}
    systems = {name: values.get("emotional_naturalness") or {} for name, values in m.get("systems", {}).items()}
    if calibration.get("shift") is None:
        return []
    rows = []
    for name, record in systems.items():
        test = record.get("friedman_vs_reference") or {}
        rows.append([text(name), text(format_value(record.get("value"), 2)), text(str(record.get("n", 0))),
                     text(format_value(test.get("statistic"), 2)), text(format_value(test.get("p_value"), 4)),
                     text(str(test.get("n_blocks", "")) if test else "")])
    models = ", ".join(calibration.get("models") or []) or "unnamed"
    caption = (f"Predictor: {models}. Logits shifted by {calibration['shift']:.4g} so that "
               f"{calibration['dev_positive_pct']:.1f}% of the {calibration['n_dev']} dev answers of "
               f"{m.get('reference_system')} score > 0 ({calibration['rule']}); "
               f"{format_value(calibration.get('test_reference_positive_pct'), 1)}% of its "
               f"{calibration.get('n_test_reference')} test answers do. Friedman: paired against "
               f"{m.get('reference_system')} by question on the test rows.")
    random = bool(calibration.get("random_weights"))
    if random:
        caption = "RANDOM-WEIGHT PREDICTOR (not a trained model: the scores mean nothing). " + caption
    return [Table("Emotional naturalness" + (" (random-weight predictor)" if random else ""),
                  ["system", "score", "test rows", "Friedman χ²", "p", "questions"], rows, caption)]


def _caveats(m: dict) -> list:
    """A note per Table III column whose values carry a caveat (a random-weight model's)."""
    notes = []
    for header, key, _ in TABLE_COLUMNS:
        caveat = next((v[key]["caveat"] for v in m.get("systems", {}).values() if (v.get(key) or {}).get("caveat")),
                      None)
        if caveat:
            notes.append(Note(f"{header}: {caveat}."))
    return notes


def build(ctx: ViewContext) -> tuple[Table, list]:
    m, s = ctx.metrics, ctx.source
    systems = list(m.get("systems", {}))
    rows = [[text(name), metric(s, m, ("systems", name, "n_rows")), metric(s, m, ("systems", name, "n_errors")),
             *(_value(s, m, name, key, digits) for _, key, digits in HEADLINE)] for name in systems]
    headline = Table("Headline", ["system", "rows", "errors", *(label for label, _, _ in HEADLINE)], rows,
                     "Means over each system's rows (see the definitions below); naturalness's METRICS.json has no "
                     "bootstrap CIs. — where a value is undefined (point at it for the reason).")
    blocks: list = []
    table = [[text(name), metric(s, m, ("systems", name, "n_rows"))] +
             [_value(s, m, name, key, digits) for _, key, digits in TABLE_COLUMNS] for name in systems]
    blocks.append(Table("Table III per system", ["system", "rows", *(h for h, _, _ in TABLE_COLUMNS)], table,
                        "Rounded as the CLI's table: MOS 2 decimals, percentages 1, ms 0. DNSMOS/P.808 stand in "
                        "for UTMOS. Point at a — to see why the value is undefined."))
    tests = []
    for name, columns in (m.get("paired_tests") or {}).items():
        for column, result in columns.items():
            if result.get("p_value") is None:
                continue
            tests.append([text(name), text(column), metric(s, m, ("paired_tests", name, column, "p_value"), 4),
                          metric(s, m, ("paired_tests", name, column, "n_pairs"))])
    if tests:
        blocks.append(Table(f"Paired tests against {m.get('reference_system')}",
                            ["system", "metric", "p", "pairs"], tests,
                            "Wilcoxon signed-rank, rows paired by question; tests without a p-value are left out."))
    blocks += _caveats(m)
    blocks += _emotional(m)
    blocks += _stances(m)
    blocks += _explainable(m)
    blocks += _figures(ctx)
    definitions = m.get("definitions") or {}
    if definitions:
        blocks.append(Table("Definitions", ["value", "how it is computed"],
                            [[text(k), text(v)] for k, v in definitions.items()], sortable=False))
    frames = [frame for _, frame in ctx.results]
    results = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    finder = ctx.finders[0]
    blocks.append(failed_items(finder, results, _facts))
    if "mos_dnsmos_ovrl" in results.columns:
        blocks += extreme_items(finder, results, pl.col("mos_dnsmos_ovrl"), "DNSMOS OVRL of the answer", _facts,
                                ("Best rated answers (highest DNSMOS OVRL)", "Worst rated answers (lowest DNSMOS OVRL)"))
    return headline, blocks


#: several results files (one per system) show one item list over all their manifests
MERGE_MANIFESTS = True


def clip_paths(row: dict) -> list[tuple[str, str | None]]:
    """The audio worth hearing for one item: the question and the answer."""
    return [("question", row.get("audio_path")), ("answer", row.get("answer_audio_path"))]
