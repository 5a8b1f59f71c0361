"""Confusion-matrix PNGs of judges against the human labels, from evaluate_judges' metrics.

Drawn with matplotlib's object API on an Agg canvas: no pyplot, no global backend switch.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

PANELS = (
    ("content", "Content"),
    ("voice_quality", "Voice quality"),
    ("paralinguistics", "Paralinguistics"),
    ("overall", "Overall (fused)"),
)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "judge"


def plot_judge_confusion(name: str, metrics: dict, path: str | os.PathLike) -> Path:
    """One PNG with a panel per labelled dimension: rows = human label, columns = judge label, with counts."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    confusion = metrics["confusion"]
    labels = confusion["labels"]
    panels = [(key, title) for key, title in PANELS if key in confusion]
    figure = Figure(figsize=(4.2 * len(panels), 4.4), layout="constrained")
    FigureCanvasAgg(figure)
    axes = np.atleast_1d(figure.subplots(1, len(panels)))
    for ax, (key, title) in zip(axes, panels):
        counts = np.asarray(confusion[key], dtype=np.int64).reshape(len(labels), len(labels))
        ax.imshow(counts, cmap="Blues", vmin=0, vmax=max(int(counts.max()), 1))
        for (row, col), value in np.ndenumerate(counts):
            color = "white" if value > counts.max() / 2 else "black"
            ax.text(col, row, str(value), ha="center", va="center", color=color, fontsize=9)
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
        ax.set_yticks(range(len(labels)), labels)
        ax.set_xlabel("judge")
        ax.set_ylabel("human")
        accuracy = metrics["accuracy"].get(key)
        ax.set_title(title if accuracy is None else f"{title}: acc {accuracy:.3f}")
    figure.suptitle(name)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=100)
    return target


def plot_confusions(metrics: dict, plots_dir: str | os.PathLike) -> dict[str, Path]:
    """``confusion_<judge>.png`` for every judge in evaluate_judges' metrics; returns name → path."""
    directory = Path(plots_dir)
    return {
        name: plot_judge_confusion(name, judge, directory / f"confusion_{_safe(name)}.png")
        for name, judge in metrics["judges"].items()
    }
