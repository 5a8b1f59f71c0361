"""The consistency report (SpeakerSleuth): detection, localization and discrimination, the threshold
sweep (table and plot), and the detection instances decided with the widest and narrowest margin."""

from __future__ import annotations

import polars as pl

from sdscore.report.html.elements import (
    Figure,
    Table,
    format_value,
    metric,
    optional_metric,
    text,
)
from sdscore.report.html.embedding import render_png
from sdscore.report.html.items import extreme_items, failed_items
from sdscore.report.html.view_context import ViewContext, headline_row

SCENARIOS = (("S1", "S1 consistent"), ("S2", "S2 gender switch"), ("S3", "S3 similar speaker"))
SWEEP_COLUMNS = ("threshold", "S1", "S2", "S3", "balanced", "S2_f1", "S3_f1", "balanced_f1")


def _facts(row: dict) -> list[tuple[str, str]]:
    scores = row.get("turn_scores")
    return [("task", format_value(row.get("task"))), ("scenario", format_value(row.get("scenario"))),
            ("true turns", format_value(row.get("true_turns"))), ("flagged turns", format_value(row.get("flagged_turns"))),
            ("turn scores", "—" if scores is None else ", ".join(format_value(v) for v in scores))]


def build(ctx: ViewContext) -> tuple[Table, list]:
    m, s = ctx.metrics, ctx.source
    rows = [headline_row("detection accuracy, balanced", optional_metric(s, m, ("detection", "balanced"))),
            headline_row("localization F1, balanced", optional_metric(s, m, ("localization", "balanced_f1"))),
            headline_row("discrimination accuracy, average",
                         optional_metric(s, m, ("discrimination", "accuracy", "average"))),
            headline_row("discrimination NDCG@1", optional_metric(s, m, ("discrimination", "ndcg@1"))),
            headline_row("rows", metric(s, m, ("n_rows",))), headline_row("rows with an error", metric(s, m, ("n_errors",)))]
    method = f"method {m.get('method', '?')}, threshold {format_value(m.get('threshold'))}"
    headline = ctx.headline(rows, f"{method}; fractions, 3 decimals. Consistency's METRICS.json has no bootstrap CIs.")
    blocks: list = []
    detection = [[text(label), optional_metric(s, m, ("detection", key)),
                  optional_metric(s, m, ("counts", "detection", key)),
                  optional_metric(s, m, ("localization", f"{key}_precision")) if key != "S1" else text("—"),
                  optional_metric(s, m, ("localization", f"{key}_recall")) if key != "S1" else text("—"),
                  optional_metric(s, m, ("localization", f"{key}_f1"))] for key, label in SCENARIOS]
    blocks.append(Table("Detection and localization per scenario",
                        ["scenario", "detection accuracy", "instances", "loc. precision", "loc. recall", "loc. F1"],
                        detection, "S1 has no altered turn: its localization F1 is 1 when nothing is flagged."))
    disc = m.get("discrimination") or {}
    disc_rows = [[text(f"accuracy, {name}"), metric(s, m, ("discrimination", "accuracy", name))]
                 for name in disc.get("accuracy") or {}]
    disc_rows += [[text(key), metric(s, m, ("discrimination", key))] for key in disc if key != "accuracy"]
    if disc_rows:
        blocks.append(Table("Discrimination (which candidate is the speaker)", ["statistic", "value"], disc_rows))
    sweep = m.get("threshold_sweep") or []
    if sweep:
        present = [c for c in SWEEP_COLUMNS if c in sweep[0]]
        table = [[metric(s, m, ("threshold_sweep", i, c), 2 if c == "threshold" else 3) for c in present]
                 for i in range(len(sweep))]
        blocks.append(Table("Threshold sweep", [c.replace("_", " ") for c in present], table,
                            "Detection accuracy per scenario and localization F1, re-decided from the stored turn "
                            "scores at each threshold."))
        from sdscore.report.consistency_plots import plot_threshold_sweep

        uri = render_png(lambda target: plot_threshold_sweep(pl.DataFrame(sweep), target, method=m.get("method")))
        blocks.append(Figure("Threshold sweep plot", uri, "Left: detection accuracy; right: localization F1."))
    _, results = ctx.results[0]
    finder = ctx.finders[0]
    blocks.append(failed_items(finder, results, _facts))
    if {"turn_scores", "threshold", "task"} <= set(results.columns):
        methods = results["method"].drop_nulls() if "method" in results.columns else pl.Series([], dtype=pl.String)
        centroid = methods.str.starts_with("centroid").any()  # centroid and centroid-raw
        decisive = pl.col("turn_scores").list.max() if centroid else pl.col("turn_scores").list.min()
        margin = pl.when(pl.col("task") == "detection").then((decisive - pl.col("threshold")).abs())
        blocks += extreme_items(finder, results, margin, "|decisive turn score − threshold| (detection rows)", _facts,
                                ("Most confident detections (decisive score far from the threshold)",
                                 "Least confident detections (decisive score at the threshold)"))
    return headline, blocks


def clip_paths(row: dict) -> list[tuple[str, str | None]]:
    """The audio worth hearing for one instance: its turns, then its candidates with their labels."""
    clips = [(f"turn {i}", p) for i, p in enumerate(row.get("turn_paths") or ())]
    return clips + [(f"candidate {i} ({s})", p) for i, (p, s) in
                    enumerate(zip(row.get("candidate_paths") or (), row.get("candidate_scenarios") or ()))]
