"""Reward distributions per subset (SDiaReward Fig. 4 c–d): violin + box of chosen and rejected rewards.

Reads a reward results frame (pair_id, criterion, subset, category, chosen_reward, rejected_reward,
margin, correct, error). A pair is plotted only when it has no error and both rewards are finite;
the others are counted as excluded. Drawn with matplotlib's object API on an Agg canvas (no pyplot,
no global backend switch) and written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl

from sdscore.atomic_write import atomic_path
from sdscore.metrics._inputs import check_columns, error_mask

#: (side name, results column), in drawing order.
SIDES = (("chosen", "chosen_reward"), ("rejected", "rejected_reward"))
COLORS = {"chosen": "tab:orange", "rejected": "tab:blue"}
#: How a null group value is named.
NONE_LABEL = "<none>"
#: The violin's density estimate uses at most this many values per side (a fixed subsample);
#: the box and the statistics always use every value.
KDE_MAX_VALUES = 20_000

_OFFSET = 0.2  # chosen sits left of the group's tick, rejected right
_WIDTH = 0.36
_STATS_COLUMNS = ("side", "n", "n_excluded", "mean", "median", "q1", "q3")


def reward_distribution_stats(results: pl.DataFrame, by: str = "subset") -> pl.DataFrame:
    """One row per group × side (chosen, rejected): ``[by, side, n, n_excluded, mean, median, q1, q3]``.

    Groups come in order of first appearance (null named ``"<none>"``), including groups whose
    pairs were all excluded (n 0, statistics null). Quartiles are numpy's linear percentiles.
    """
    groups = _group_values(results, by)
    rows = []
    for label, (values, excluded) in groups.items():
        for side, _ in SIDES:
            side_values = values[side]
            empty = side_values.size == 0
            rows.append(
                {
                    by: label,
                    "side": side,
                    "n": int(side_values.size),
                    "n_excluded": excluded,
                    "mean": None if empty else float(np.mean(side_values)),
                    "median": None if empty else float(np.median(side_values)),
                    "q1": None if empty else float(np.percentile(side_values, 25)),
                    "q3": None if empty else float(np.percentile(side_values, 75)),
                }
            )
    schema = {by: pl.String, "side": pl.String, "n": pl.Int64, "n_excluded": pl.Int64}
    schema.update({name: pl.Float64 for name in ("mean", "median", "q1", "q3")})
    return pl.DataFrame(rows, schema=schema, orient="row")


def plot_reward_distributions(
    results: pl.DataFrame, out_png: str | os.PathLike, title: str | None = None, by: str = "subset"
) -> Path:
    """PNG of chosen vs rejected reward per group of ``by``: a violin with a box on it for each side.

    A side with a single distinct value is drawn as points with its box; a group with no plotted
    pair keeps its slot with a note. Tick labels carry the pairs plotted (and excluded).
    ValueError when no pair at all can be plotted. Returns the path written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    groups = _group_values(results, by)
    stats = reward_distribution_stats(results, by)
    if stats.height == 0 or int(stats["n"].max()) == 0:
        raise ValueError(
            f"no reward to plot: the results frame has {results.height} rows and none has both rewards "
            "finite and no error"
        )
    figure = Figure(figsize=(max(6.0, 1.5 * len(groups) + 2.0), 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.subplots()
    note = blended_transform_factory(ax.transData, ax.transAxes)
    labels = []
    for position, (label, (values, excluded)) in enumerate(groups.items()):
        n = int(values["chosen"].size)
        labels.append(f"{label}\nn={n}" + (f"\n({excluded} excluded)" if excluded else ""))
        if n == 0:
            ax.text(
                position,
                0.5,
                "no scored\npairs",
                transform=note,
                ha="center",
                va="center",
                color="gray",
                bbox={"facecolor": "white", "edgecolor": "none"},
            )
            continue
        for k, (side, _) in enumerate(SIDES):
            x = position - _OFFSET if side == "chosen" else position + _OFFSET
            _draw_side(ax, values[side], stats.row(len(SIDES) * position + k, named=True), x, COLORS[side])
    ax.axhline(0.0, color="gray", linewidth=0.8, linestyle="--", zorder=0)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel(by)
    ax.set_ylabel("reward")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=[Patch(color=COLORS[side], alpha=0.6, label=side) for side, _ in SIDES], fontsize=9)
    ax.set_title(title if title is not None else f"Chosen vs rejected reward by {by}")
    target = Path(out_png)
    with atomic_path(target) as temp:
        figure.savefig(temp, format="png", dpi=100)
    return target


def _draw_side(ax, values: np.ndarray, stats: dict, x: float, color: str) -> None:
    """Violin (or points, when the values have no spread) plus a narrow box from ``stats``."""
    if np.ptp(values) > 0:
        kde_values = values
        if values.size > KDE_MAX_VALUES:
            kde_values = np.random.default_rng(0).choice(values, KDE_MAX_VALUES, replace=False)
        parts = ax.violinplot([kde_values], positions=[x], widths=_WIDTH, showextrema=False)
        for body in parts["bodies"]:
            body.set_facecolor(color)
            body.set_edgecolor(color)
            body.set_alpha(0.45)
    else:
        ax.scatter(np.full(values.size, x), values, color=color, s=18, zorder=3)
    iqr = stats["q3"] - stats["q1"]
    low = values[values >= stats["q1"] - 1.5 * iqr].min()
    high = values[values <= stats["q3"] + 1.5 * iqr].max()
    box = {
        "med": stats["median"],
        "q1": stats["q1"],
        "q3": stats["q3"],
        "whislo": low,
        "whishi": high,
        "mean": stats["mean"],
        "fliers": [],
    }
    ax.bxp(
        [box],
        positions=[x],
        widths=_WIDTH / 4,
        showmeans=True,
        patch_artist=True,
        boxprops={"facecolor": "white", "edgecolor": "black", "linewidth": 0.8},
        medianprops={"color": "black", "linewidth": 1.4},
        meanprops={"marker": "D", "markerfacecolor": color, "markeredgecolor": "black", "markersize": 4},
        whiskerprops={"linewidth": 0.8},
        capprops={"linewidth": 0.8},
        manage_ticks=False,
    )


def _group_values(results: pl.DataFrame, by: str) -> dict[str, tuple[dict[str, np.ndarray], int]]:
    """Group label → ({side: plotted rewards}, excluded pairs), groups in order of first appearance."""
    check_columns(results, [by, *(column for _, column in SIDES)], "results")
    if by in _STATS_COLUMNS:
        raise ValueError(f"cannot group rewards by column {by!r}: the statistics table uses that name")
    if results.schema[by].is_nested():
        raise ValueError(f"cannot group rewards by column {by!r} of type {results.schema[by]}; use a scalar column")
    labels = results[by].cast(pl.String).fill_null(NONE_LABEL)
    rewards = {side: results[column].cast(pl.Float64).fill_null(float("nan")).to_numpy() for side, column in SIDES}
    usable = ~error_mask(results)
    for array in rewards.values():
        usable &= np.isfinite(array)
    label_array = labels.to_numpy()
    groups: dict[str, tuple[dict[str, np.ndarray], int]] = {}
    for label in labels.unique(maintain_order=True).to_list():
        in_group = label_array == label
        keep = in_group & usable
        values = {side: array[keep] for side, array in rewards.items()}
        groups[label] = (values, int(in_group.sum() - keep.sum()))
    return groups
