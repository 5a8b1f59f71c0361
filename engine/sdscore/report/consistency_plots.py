"""Threshold-sweep PNG of the consistency protocol: detection accuracy and localization F1 vs threshold.

Drawn with matplotlib's object API on an Agg canvas: no pyplot, no global backend switch.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

DETECTION = (("S1", "S1 consistent"), ("S2", "S2 gender switch"), ("S3", "S3 similar speaker"), ("balanced", "balanced"))
LOCALIZATION = (("S1_f1", "S1"), ("S2_f1", "S2"), ("S3_f1", "S3"), ("balanced_f1", "balanced"))


def plot_threshold_sweep(sweep: pl.DataFrame, path: str | os.PathLike, method: str | None = None) -> Path:
    """Two panels over sweep's rows (protocols.consistency.sweep_thresholds): accuracy and F1 per scenario."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    missing = [k for k, _ in (("threshold", ""), *DETECTION, *LOCALIZATION) if k not in sweep.columns]
    if missing:
        raise ValueError(f"sweep frame lacks columns {missing}")
    figure = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2, sharex=True)
    x = sweep["threshold"].to_list()
    for ax, series, title in ((left, DETECTION, "Detection accuracy"), (right, LOCALIZATION, "Localization F1")):
        for key, label in series:
            y = [float("nan") if v is None else v for v in sweep[key].to_list()]
            ax.plot(x, y, marker="o", label=label, linewidth=2.5 if key.startswith("balanced") else 1.5)
        ax.set_title(title)
        ax.set_xlabel("threshold τ")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if method is not None:
        figure.suptitle(f"Speaker consistency — {method} method")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=100)
    return target
