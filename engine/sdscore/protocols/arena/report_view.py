"""The arena report (S2S-Arena): Bradley–Terry leaderboard with bootstrap CIs, online Elo (overall and
per domain), the win-rate matrix as a heat map, position and length bias, and the biggest upsets.

Battles carry no audio (the manifest names models and verdicts only), so arena items have no players.
"""

from __future__ import annotations

import polars as pl

from sdscore.report.html.elements import (
    Item,
    ItemList,
    Table,
    ci_cells,
    format_value,
    leaf_rows,
    metric,
    text,
)
from sdscore.report.html.view_context import ViewContext, headline_row

UPSETS = 5


def _upsets(ctx: ViewContext) -> ItemList:
    """Decisive battles won by the model with the lower Bradley–Terry rating, widest gap first."""
    _, battles = ctx.results[0]
    ratings = {name: v["rating"] for name, v in ctx.metrics.get("bradley_terry", {}).items()}
    decisive = battles.filter(pl.col("winner").is_in(["model_a", "model_b"]))
    winner = pl.when(pl.col("winner") == "model_a").then(pl.col("model_a")).otherwise(pl.col("model_b"))
    loser = pl.when(pl.col("winner") == "model_a").then(pl.col("model_b")).otherwise(pl.col("model_a"))
    table = decisive.select(pl.col("battle_id"), winner.alias("won"), loser.alias("lost"),
                            *(pl.col(c) for c in ("domain", "judge") if c in battles.columns))
    table = table.with_columns(
        (pl.col("lost").replace_strict(ratings, default=None, return_dtype=pl.Float64)
         - pl.col("won").replace_strict(ratings, default=None, return_dtype=pl.Float64)).alias("gap"))
    upsets = table.filter(pl.col("gap") > 0).sort(["gap", "battle_id"], descending=[True, False])
    items = [Item(str(row["battle_id"]), [("won", str(row["won"])), ("lost", str(row["lost"])),
                                         ("BT rating gap", format_value(row["gap"], 1)),
                                         *((c, format_value(row[c])) for c in ("domain", "judge") if c in row)])
             for row in upsets.head(UPSETS).iter_rows(named=True)]
    return ItemList("Biggest upsets", items, f"{upsets.height} of {decisive.height} decisive battles were won by "
                    "the lower-rated model; battles carry no audio, so there are no players.", role="upsets")


def build(ctx: ViewContext) -> tuple[Table, list]:
    m, s = ctx.metrics, ctx.source
    models = list(m.get("bradley_terry", {}))
    rows = [headline_row(f"Bradley–Terry, {name}", metric(s, m, ("bradley_terry", name, "rating"), 1),
                         ci_cells(s, m, ("bradley_terry", name, "ci95"), 1)) for name in models]
    rows.append(headline_row("battles", metric(s, m, ("n_battles",))))
    headline = ctx.headline(rows, "Ratings on the Elo scale (1 decimal); CI: bootstrap over battles, 95 %.")
    blocks: list = []
    elo = m.get("elo") or {}
    board = [[text(rank + 1), text(name), metric(s, m, ("bradley_terry", name, "rating"), 1),
              *ci_cells(s, m, ("bradley_terry", name, "ci95"), 1),
              metric(s, m, ("elo", name), 1) if name in elo else text("—")] for rank, name in enumerate(models)]
    blocks.append(Table("Leaderboard", ["rank", "model", "Bradley–Terry", "CI low", "CI high", "online Elo"], board,
                        "Online Elo depends on the battles' order; Bradley–Terry does not."))
    win_rate = m.get("win_rate") or {}
    order = [name for name in models if name in win_rate] + [name for name in win_rate if name not in models]
    matrix = []
    for row_model in order:
        cells = [text(row_model)]
        for col_model in order:
            if col_model in win_rate[row_model]:
                value = win_rate[row_model][col_model]
                cells.append(metric(s, m, ("win_rate", row_model, col_model), 2, shade=value))
            else:
                cells.append(text("—"))
        matrix.append(cells)
    if matrix:
        blocks.append(Table("Win rate (row model against column model)", ["model", *order], matrix,
                            "(wins + ½ ties) / battles, either position; darker is a higher win rate.",
                            kind="heatmap"))
    by_domain = m.get("elo_by_domain") or {}
    if by_domain:
        domain_models = list(dict.fromkeys(n for ratings in by_domain.values() for n in ratings))
        blocks.append(Table("Online Elo per domain", ["domain", *domain_models],
                            [[text(d), *(metric(s, m, ("elo_by_domain", d, n), 1) if n in r else text("—")
                                         for n in domain_models)] for d, r in by_domain.items()]))
    for key, title in (("position_bias", "Position bias"), ("length_bias", "Length bias")):
        if m.get(key):
            blocks.append(Table(title, ["statistic", "value"], leaf_rows(s, m, (key,))))
    agreement = m.get("judge_agreement") or {}
    if len(agreement) > 1 or any((v or {}).get("vs_human") for v in agreement.values()):
        columns = [("vs_human", "accuracy"), ("vs_human", "kappa"), ("vs_human", "accuracy_without_ties"),
                   ("vs_human", "kappa_without_ties"), ("repeated", "consistency"), ("swapped", "consistency")]
        rows = [[text(name), *(metric(s, m, ("judge_agreement", name, *c), 3) if (v.get(c[0]) or {}) else text("—")
                               for c in columns)] for name, v in agreement.items()]
        blocks.append(Table("Judges (S2S-Arena Table 6)", ["judge", "agreement with humans", "κ", "agreement, no ties",
                                                           "κ, no ties", "self-consistency (repeats)",
                                                           "self-consistency (swapped)"], rows,
                            f"Headline ratings are the {m.get('judge', '?')} judge's; every judge's own ratings "
                            "are under by_judge in METRICS.json. Agreement is over battles both judged (same "
                            "prompt, same positions)."))
    blocks.append(_upsets(ctx))
    return headline, blocks


#: why the report shows no audio for arena's items (a battles manifest is rated as it is)
NO_AUDIO = "battles carry no audio"
#: what the report's provenance says of a results file with no sdscore provenance
UNSCORED_KIND = "battles manifest (no scoring run)"


def read_results(path):
    """A battles manifest, or an audio judge's results read back as battles."""
    from sdscore.protocols.arena.judge_battles import read_battles

    return read_battles(path)[0]


def clip_paths(row: dict) -> list[tuple[str, str | None]]:
    return []
