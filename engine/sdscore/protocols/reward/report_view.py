"""The reward report (SDiaReward / ESDR-Bench): Table 2 accuracies, margin buckets, the violin/box plot,
and the most and least confident pairs by |reward gap|."""

from __future__ import annotations

import polars as pl

from sdscore.report.html.elements import (
    Figure,
    Note,
    Table,
    format_value,
    metric,
    optional_metric,
    text,
)
from sdscore.report.html.embedding import render_png
from sdscore.report.html.items import extreme_items, failed_items
from sdscore.report.html.view_context import ViewContext, headline_row

HEADLINE = (("overall micro", "overall_micro"), ("overall macro", "overall_macro"),
            ("modality micro", "modality_micro"), ("modality macro", "modality_macro"),
            ("colloquialness", "colloquial"))


def _facts(row: dict) -> list[tuple[str, str]]:
    return [("subset", format_value(row.get("subset"))), ("chosen reward", format_value(row.get("chosen_reward"))),
            ("rejected reward", format_value(row.get("rejected_reward"))), ("correct", format_value(row.get("correct")))]


def build(ctx: ViewContext) -> tuple[Table, list]:
    m, s = ctx.metrics, ctx.source
    rows = [headline_row(name, optional_metric(s, m, (key,))) for name, key in HEADLINE]
    rows += [headline_row("pairs", metric(s, m, ("n",))), headline_row("pairs with an error", metric(s, m, ("n_errors",)))]
    headline = ctx.headline(rows, "Accuracy: fraction of pairs whose chosen reward is above the rejected one (3 "
                                  "decimals; errors left out). Reward's METRICS.json has no bootstrap CIs.")
    blocks: list = []
    subsets = [[text(name), metric(s, m, ("subsets", name, "criterion")), metric(s, m, ("subsets", name, "n")),
                metric(s, m, ("subsets", name, "n_errors")), metric(s, m, ("subsets", name, "accuracy"))]
               for name in m.get("subsets", {})]
    blocks.append(Table("Accuracy per subset (Table 2)", ["subset", "criterion", "pairs", "errors", "accuracy"],
                        subsets))
    for key, label in (("by_category", "category"), ("by_source", "source")):
        groups = m.get(key) or {}
        if groups:
            blocks.append(Table(f"Accuracy per {label}", [label, "pairs", "errors", "accuracy"],
                                [[text(name), metric(s, m, (key, name, "n")), metric(s, m, (key, name, "n_errors")),
                                  metric(s, m, (key, name, "accuracy"))] for name in groups]))
    buckets = []
    for i, bucket in enumerate(m.get("margin_buckets") or []):
        upper = "∞" if bucket["upper"] is None else format_value(bucket["upper"], 2)
        buckets.append([text(f"[{format_value(bucket['lower'], 2)}, {upper})", sort_key=repr(float(bucket["lower"]))),
                        metric(s, m, ("margin_buckets", i, "n")), metric(s, m, ("margin_buckets", i, "accuracy"))])
    if buckets:
        blocks.append(Table("Accuracy per |reward gap| bucket", ["|chosen − rejected|", "pairs", "accuracy"], buckets,
                            "A well-calibrated model is more often right where the gap is wide."))
    path, results = ctx.results[0]
    if {"chosen_reward", "rejected_reward"} <= set(results.columns):
        from sdscore.report.reward_plots import plot_reward_distributions

        frame = results if "subset" in results.columns else results.with_columns(pl.lit("all pairs").alias("subset"))
        try:
            uri = render_png(lambda target: plot_reward_distributions(frame, target, title=f"rewards per subset: {path.name}"))
            blocks.append(Figure("Rewards per subset", uri, "Violin and box of the chosen and rejected rewards "
                                 "(SDiaReward Fig. 4); diamond: mean."))
        except ValueError as error:
            blocks.append(Note(f"No reward plot: {error}"))
    finder = ctx.finders[0]
    blocks.append(failed_items(finder, results, _facts))
    if {"chosen_reward", "rejected_reward"} <= set(results.columns):
        gap = (pl.col("chosen_reward").cast(pl.Float64) - pl.col("rejected_reward").cast(pl.Float64)).abs()
        blocks += extreme_items(finder, results, gap, "|chosen − rejected reward|", _facts,
                                ("Most confident pairs (widest reward gap)", "Least confident pairs (narrowest gap)"))
    return headline, blocks


def clip_paths(row: dict) -> list[tuple[str, str | None]]:
    """The audio worth hearing for one reward pair: each side's last turn."""
    from sdscore.report.html.items import last_audio

    return [("chosen, last turn", last_audio(row.get("chosen"))),
            ("rejected, last turn", last_audio(row.get("rejected")))]
