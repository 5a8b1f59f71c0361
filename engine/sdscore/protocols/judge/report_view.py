"""The judge report (TRACE): overall accuracy with its paired-bootstrap CI, accuracy and κ per
dimension, confusion matrices, the probes, McNemar between judges and cost; the items a judge got
wrong against the human overall label (the rule and LLM judges give no confidence to rank by)."""

from __future__ import annotations

import polars as pl

from sdscore.report.html.elements import (
    Figure,
    ItemList,
    Table,
    ci_cells,
    format_value,
    leaf_rows,
    metric,
    optional_metric,
    text,
)
from sdscore.report.html.embedding import render_png
from sdscore.report.html.items import EXTREMES, failed_items, failed_rows
from sdscore.report.html.view_context import ViewContext, headline_row

DIMENSIONS = ("content", "voice_quality", "paralinguistics", "overall")


def _facts(row: dict) -> list[tuple[str, str]]:
    return [(f"{d} (judge / human)", f"{format_value(row.get(f'{d}_pred'))} / {format_value(row.get(d))}")
            for d in DIMENSIONS]


def build(ctx: ViewContext) -> tuple[Table, list]:
    m, s = ctx.metrics, ctx.source
    judges = list(m.get("judges", {}))
    rows = [headline_row(f"overall accuracy, {name}", metric(s, m, ("judges", name, "accuracy", "overall")),
                         ci_cells(s, m, ("judges", name, "overall_ci95"))) for name in judges]
    rows += [headline_row("items", metric(s, m, ("n_items",))),
             headline_row("items with a human overall label", metric(s, m, ("n_labelled",)))]
    boot = m.get("bootstrap") or {}
    headline = ctx.headline(rows, f"Accuracy against the human overall label (errors count as wrong), 3 decimals; "
                                  f"CI: paired bootstrap, {boot.get('n_boot', '?')} resamples, seed {boot.get('seed', '?')}.")
    blocks: list = []
    dims = [[text(name), text(d), optional_metric(s, m, ("judges", name, "accuracy", d)),
             optional_metric(s, m, ("judges", name, "kappa", d)), *ci_cells(s, m, ("judges", name, "kappa_ci95", d))]
            for name in judges for d in DIMENSIONS]
    blocks.append(Table("Accuracy and Cohen's κ per dimension", ["judge", "dimension", "accuracy", "κ", "κ CI low",
                                                                 "κ CI high"], dims,
                        "— where the items have no human label for the dimension (or κ is undefined); κ CI: "
                        "bootstrap over the items, the same resamples as the accuracy CIs."))
    untyped = [[text(name), text(m["judges"][name].get("labels", "typed")),
                optional_metric(s, m, ("judges", name, "untyped_overall", "accuracy")),
                optional_metric(s, m, ("judges", name, "untyped_overall", "kappa")),
                *ci_cells(s, m, ("judges", name, "untyped_overall", "kappa_ci95"))]
               for name in judges if "untyped_overall" in m["judges"][name]]
    if untyped:
        blocks.append(Table("Every judge on the untyped 3-way scale (1 / 2 / tie)",
                            ["judge", "labels", "accuracy", "κ", "κ CI low", "κ CI high"], untyped,
                            "Typed ties (both good / both bad) read as one tie on both sides, so typed and "
                            "original-label judges compare on one scale — TRACE's hackability table."))
    from sdscore.report.judge_plots import plot_judge_confusion

    for name in judges:
        uri = render_png(lambda target, name=name: plot_judge_confusion(name, m["judges"][name], target))
        blocks.append(Figure(f"Confusion matrices: {name}", uri, "Rows: human label; columns: the judge's label."))
        probes = leaf_rows(s, m, ("judges", name, "probes"))
        if probes:
            blocks.append(Table(f"Probes: {name}", ["probe / statistic", "value"], probes,
                                "P1 content counterfactual, P2 ablation flip rates, P3 attribution (TRACE §5)."))
    if m.get("mcnemar"):
        blocks.append(Table("McNemar between judges (exact, two-sided)", ["judge A", "judge B", "p"],
                            [[text(t["a"]), text(t["b"]), metric(s, m, ("mcnemar", i, "p_value"), 4)]
                             for i, t in enumerate(m["mcnemar"])]))
    cost = [[text(row["judge"]), metric(s, m, ("cost", i, "overall_accuracy")), metric(s, m, ("cost", i, "n_errors")),
             metric(s, m, ("cost", i, "total_usd"), 4), metric(s, m, ("cost", i, "usd_per_item"), 6),
             metric(s, m, ("cost", i, "priced_items"))] for i, row in enumerate(m.get("cost") or [])]
    blocks.append(Table("Cost", ["judge", "overall accuracy", "errors", "total USD", "USD per item", "priced items"],
                        cost, "— where the judge reports no price (the rule judge is free)."))
    for (path, results), finder in zip(ctx.results, ctx.finders):
        failed = failed_items(finder, results, _facts)
        failed.title = f"Failed items: {path.stem}"
        blocks.append(failed)
        if {"overall", "overall_pred"} <= set(results.columns):
            wrong = results.join(failed_rows(results).select("item_id"), on="item_id", how="anti").filter(
                pl.col("overall").is_not_null() & (pl.col("overall_pred") != pl.col("overall")))
            items = [finder.item(row, _facts(row)) for row in wrong.head(EXTREMES).iter_rows(named=True)]
            note = (f"{wrong.height} scored items disagree with the human overall label; the first {len(items)} "
                    "are shown (the judge gives no confidence to rank them by)")
            blocks.append(ItemList(f"Disagreements with the human label: {path.stem}", items,
                                   note + (f". No audio: {finder.audio_note}" if finder.audio_note else ""),
                                   role="extreme"))
    return headline, blocks


def clip_paths(row: dict) -> list[tuple[str, str | None]]:
    """The audio worth hearing for one judge item: the instruction (when spoken) and both responses."""
    clips = [("instruction", row.get("instruction_path"))] if row.get("instruction_path") else []
    return clips + [("response 1", row.get("audio1_path")), ("response 2", row.get("audio2_path"))]
