"""SPEARBench figures from the naturalness results: Fig. 3 dialect profiles, Fig. 4 question-vs-answer
arousal/valence/dominance, Fig. 6 speaker-normalised pitch features per F0 bin.

Drawn with matplotlib's object API on an Agg canvas: no pyplot, no global backend switch, no
seaborn. Each function takes the scored rows (one per answer, a `system` column) and returns the
path it wrote, or raises NoPlotData with the reason when the figure's columns hold no value.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from sdscore.atomic_write import atomic_path

FIGURES = ("fig3_dialect_profiles", "fig4_avd_scatter", "fig6_pitch_features")


class NoPlotData(ValueError):
    """A figure has nothing to draw; the message says which columns were empty."""


def _figure(width: float, height: float, ncols: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure, np.atleast_1d(figure.subplots(1, ncols))


def _colours(systems: Sequence[str]) -> dict[str, tuple]:
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    return {name: palette(i % 10) for i, name in enumerate(systems)}


def _systems(frame: pl.DataFrame, systems: Sequence[str] | None) -> list[str]:
    present = set(frame["system"].drop_nulls().to_list())
    order = list(systems) if systems is not None else sorted(present)
    return [name for name in order if name in present]


def _save(figure, path: str | os.PathLike) -> Path:
    target = Path(path)
    with atomic_path(target) as temp:
        figure.savefig(temp, dpi=100, format="png")
    return target


def _profile(rows: pl.DataFrame, column: str, width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Mean and 95 % half-width (1.96 SEM) per group of a system's finite log-prob vectors."""
    vectors = [v for v in rows[column].drop_nulls().to_list() if len(v) == width]
    matrix = np.asarray(vectors, dtype=np.float64).reshape(len(vectors), width)
    matrix = matrix[np.isfinite(matrix).all(axis=1)]
    if matrix.shape[0] == 0:
        return None
    sem = matrix.std(axis=0, ddof=1) / np.sqrt(matrix.shape[0]) if matrix.shape[0] > 1 else np.zeros(width)
    return matrix.mean(axis=0), 1.96 * sem


def plot_dialect_profiles(frame: pl.DataFrame, path: str | os.PathLike, *, groups: Sequence[str],
                          systems: Sequence[str] | None = None) -> Path:
    """Fig. 3: mean dialect log-probability per group (point plot, 95 % CI), questions | answers, per system."""
    names = _systems(frame, systems)
    colours = _colours(names)
    profiles = {(name, column): _profile(frame.filter(pl.col("system") == name), column, len(groups))
                for name in names for column in ("dialect_question", "dialect_answer")}
    if all(p is None for p in profiles.values()):
        raise NoPlotData("Fig. 3 skipped: dialect_question and dialect_answer are null on every scored row "
                         "(no dialect classifier given?)")
    figure, axes = _figure(13, 4.8, 2)
    x = np.arange(len(groups))
    for ax, column, title in zip(axes, ("dialect_question", "dialect_answer"), ("Questions", "Answers")):
        for i, name in enumerate(names):
            profile = profiles[(name, column)]
            if profile is None:
                continue
            offset = (i - (len(names) - 1) / 2) * 0.06
            ax.errorbar(x + offset, profile[0], yerr=profile[1], marker="o", markersize=4, capsize=2,
                        linewidth=1.2, color=colours[name], label=name)
        ax.set_title(title)
        ax.set_xticks(x, groups, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("mean dialect log-probability")
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=8, title="system")
    figure.suptitle("Dialect profiles (SPEARBench Fig. 3)")
    return _save(figure, path)


def plot_avd_scatter(frame: pl.DataFrame, path: str | os.PathLike, *, dims: Sequence[str],
                     systems: Sequence[str] | None = None) -> Path:
    """Fig. 4: answer vs question value per emotion dimension, one colour and least-squares line per system."""
    names = _systems(frame, systems)
    colours = _colours(names)
    pairs = {}
    for dim in dims:
        q, a = pl.col(f"{dim}_question").cast(pl.Float64), pl.col(f"{dim}_answer").cast(pl.Float64)
        for name in names:
            rows = frame.filter((pl.col("system") == name) & q.is_not_null() & a.is_not_null()
                                & q.is_finite() & a.is_finite())
            if rows.height:
                pairs[(dim, name)] = (rows[f"{dim}_question"].to_numpy(), rows[f"{dim}_answer"].to_numpy())
    if not pairs:
        raise NoPlotData("Fig. 4 skipped: the question/answer " + "/".join(dims) + " columns are null on every "
                         "scored row (no emotion model given?)")
    figure, axes = _figure(5 * len(dims), 4.8, len(dims))
    for ax, dim in zip(axes, dims):
        for name in names:
            if (dim, name) not in pairs:
                continue
            x, y = pairs[(dim, name)]
            label = name
            if x.size >= 2 and np.ptp(x) > 0:
                slope, intercept = np.polyfit(x, y, 1)
                ends = np.array([x.min(), x.max()])
                ax.plot(ends, slope * ends + intercept, color=colours[name], linewidth=1.8)
                if np.ptp(y) > 0:
                    label = f"{name} (ρ={np.corrcoef(x, y)[0, 1]:.2f})"
            ax.scatter(x, y, s=10, alpha=0.35, color=colours[name], edgecolors="none", label=label)
        ax.axline((0, 0), slope=1, color="#777777", linestyle="--", linewidth=0.8)
        ax.set_title(dim.capitalize())
        ax.set_xlabel(f"question {dim}")
        ax.set_ylabel(f"answer {dim}")
        ax.grid(alpha=0.3)
        if any(key[0] == dim for key in pairs):
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no {dim} values", transform=ax.transAxes, ha="center", va="center")
    figure.suptitle("Question vs answer emotion dimensions (SPEARBench Fig. 4)")
    return _save(figure, path)


def plot_pitch_features(frame: pl.DataFrame, path: str | os.PathLike, *, features: Sequence[str],
                        systems: Sequence[str] | None = None) -> Path:
    """Fig. 6: box plots of speaker-normalised F0 features (the bins: min … max), one box per system.

    `frame`'s feature columns must already be speaker-normalised.
    """
    names = _systems(frame, systems)
    colours = _colours(names)
    data = {}
    for feature in features:
        for name in names:
            values = frame.filter(pl.col("system") == name)[feature].cast(pl.Float64).drop_nulls()
            values = values.filter(values.is_finite()).to_numpy()
            if values.size:
                data[(feature, name)] = values
    if not data:
        raise NoPlotData("Fig. 6 skipped: the speaker-normalised F0 features (" + ", ".join(features)
                         + ") are null on every scored row (no voiced frame, or no f0_mean)")
    from matplotlib.patches import Patch

    figure, axes = _figure(max(8, 1.2 * len(features) * max(1, len(names)) ** 0.5), 4.8, 1)
    ax = axes[0]
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        keys = [(j, data[(feature, name)]) for j, feature in enumerate(features) if (feature, name) in data]
        if not keys:
            continue
        positions = [j - 0.4 + width * (i + 0.5) for j, _ in keys]
        boxes = ax.boxplot([v for _, v in keys], positions=positions, widths=width * 0.9, patch_artist=True,
                           showfliers=False, manage_ticks=False,
                           medianprops={"color": "black"})
        for box in boxes["boxes"]:
            box.set_facecolor(colours[name])
            box.set_alpha(0.6)
    ax.set_xticks(np.arange(len(features)), features)
    ax.set_xlabel("F0 feature")
    ax.set_ylabel("F0 / mean F0 of the same asker's answers")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(handles=[Patch(facecolor=colours[n], alpha=0.6, label=n) for n in names], fontsize=8, title="system")
    figure.suptitle("Speaker-normalised pitch features per F0 bin (SPEARBench Fig. 6)")
    return _save(figure, path)


def plot_score_histograms(frame: pl.DataFrame, path: str | os.PathLike, *, column: str, label: str, title: str,
                          systems: Sequence[str] | None = None, bins: int = 20) -> Path:
    """Fig. 2-style: one histogram of a per-answer score per system (shared bins, densities overlaid)."""
    names = _systems(frame, systems)
    data = {}
    for name in names:
        values = frame.filter(pl.col("system") == name)[column].cast(pl.Float64).drop_nulls()
        values = values.filter(values.is_finite()).to_numpy()
        if values.size:
            data[name] = values
    if not data:
        raise NoPlotData(f"{title} skipped: {column} is null on every scored row")
    pooled = np.concatenate(list(data.values()))
    low, high = float(pooled.min()), float(pooled.max())
    edges = np.linspace(low, high if high > low else low + 1.0, bins + 1)
    colours = _colours(list(data))
    figure, axes = _figure(7, 4, 1)
    ax = axes[0]
    for name, values in data.items():
        ax.hist(values, bins=edges, density=True, alpha=0.45, color=colours[name], label=f"{name} (n={values.size})")
    ax.set_xlabel(label)
    ax.set_ylabel("density")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, title="system")
    figure.suptitle(title)
    return _save(figure, path)


def plot_naturalness_figures(frame: pl.DataFrame, folder: str | os.PathLike, *, groups: Sequence[str],
                             dims: Sequence[str], features: Sequence[str],
                             systems: Sequence[str] | None = None) -> dict[str, dict]:
    """Figs. 3, 4 and 6 as PNGs in `folder`: name → {"path": ...} or {"skipped": reason}."""
    folder = Path(folder)
    jobs = {
        "fig3_dialect_profiles": lambda p: plot_dialect_profiles(frame, p, groups=groups, systems=systems),
        "fig4_avd_scatter": lambda p: plot_avd_scatter(frame, p, dims=dims, systems=systems),
        "fig6_pitch_features": lambda p: plot_pitch_features(frame, p, features=features, systems=systems),
    }
    out: dict[str, dict] = {}
    for name, draw in jobs.items():
        try:
            out[name] = {"path": str(draw(folder / f"{name}.png"))}
        except NoPlotData as reason:
            out[name] = {"skipped": str(reason)}
    return out
