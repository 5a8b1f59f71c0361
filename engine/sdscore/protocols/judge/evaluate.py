"""The judge protocol's evaluation: compare judges with the human labels (evaluate_judges), and the
file-to-file evaluation the CLI calls (run_eval, evaluate_files); scoring (score_judge and the Scorer
that `sdscore score judge` streams a manifest through) is in judge/scorer.py, the judges in judges.py.

Statistics: accuracy counts an errored row as wrong; κ, confusion matrices and probes use the rows
that have a prediction; a dimension without human labels gets None. overall_ci95 is a seeded paired
bootstrap over the items with a human overall label (the same resampled items for every judge), and
McNemar (exact, two-sided) compares each pair of judges on those items.

Label modes: a ``typed`` judge is scored on the 4-way labels; an ``original``-label judge (one
overall 1 / 2 / tie, TRACE Tab. 1) on the 3-way scale, the human typed ties read as one untyped
"tie", with no per-dimension statistics or P1/P2 probes. Every judge also gets ``untyped_overall``
(both sides on the 3-way scale), so typed and original-label judges compare on one scale (the
hackability comparison); McNemar between judges of different modes uses that scale too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sdscore.atomic_write import write_json
from sdscore.corpus.results_file import check_results_file, read_results
from sdscore.metrics._inputs import refuse_nonfinite
from sdscore.metrics.agreement import (
    THREE_WAY_LABELS,
    TIE,
    bootstrap_kappa_ci,
    cohen_kappa,
    confusion_matrix,
    mcnemar_p,
    paired_bootstrap_ci,
)
from sdscore.metrics.fusion import JUDGE_LABELS
from sdscore.protocols.judge.interface import DIMENSIONS
from sdscore.protocols.judge.overall_replies import LABEL_MODES, ORIGINAL_LABELS
from sdscore.protocols.judge.probes import (
    ablation_flip_rates,
    attribution,
    content_counterfactual,
)
from sdscore.protocols.judge.results import LABEL_COLUMNS, PRED_COLUMNS, RESULT_SCHEMA, check_fusion, results_settings
from sdscore.protocols.judge.spec import SPEC


def _correct(truth: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Item-wise correctness; a missing prediction (an errored row) counts as wrong."""
    return np.array([p is not None and p == t for t, p in zip(truth, pred)], dtype=bool)


def _aligned(results: Mapping[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """The result frames in one item order: as given when the item_id sequences agree, else sorted by item_id."""
    if not results:
        raise ValueError("no judge results given")
    for name, frame in results.items():
        missing = [c for c in ("item_id", *PRED_COLUMNS, "error") if c not in frame.columns]
        if missing:
            raise ValueError(f"results of judge {name!r} lack columns {missing}")
    frames = dict(results)
    first_name, first = next(iter(frames.items()))
    ids = first.get_column("item_id").to_list()
    if all(frame.get_column("item_id").to_list() == ids for frame in frames.values()):
        return frames
    for name, frame in frames.items():
        if frame.get_column("item_id").n_unique() != frame.height:
            raise ValueError(f"results of judge {name!r} repeat item ids and their order differs from {first_name!r}'s")
        if set(frame.get_column("item_id").to_list()) != set(ids):
            raise ValueError(f"judges {first_name!r} and {name!r} were run on different items")
    return {name: frame.sort("item_id") for name, frame in frames.items()}


def _labels(frames: Mapping[str, pl.DataFrame]) -> dict[str, np.ndarray]:
    """Human labels per dimension (null where absent); they must agree across the result files."""
    labels: dict[str, np.ndarray] = {}
    for dimension in LABEL_COLUMNS:
        seen = [frame.get_column(dimension).to_list() for frame in frames.values() if dimension in frame.columns]
        if not seen:
            continue
        if any(values != seen[0] for values in seen):
            raise ValueError(f"the result files disagree on the human {dimension!r} labels")
        labels[dimension] = np.asarray(seen[0], dtype=object)
    if "overall" not in labels:
        raise ValueError("the results have no human 'overall' labels to evaluate against")
    return labels


def _nan_to_none(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _untyped(values: np.ndarray) -> np.ndarray:
    """Typed ties (both_good, both_bad) as one untyped "tie"; other labels and None unchanged."""
    return np.array([TIE if v in ("both_good", "both_bad") else v for v in values], dtype=object)


def _agreement(truth: np.ndarray, pred: np.ndarray, label_set: Sequence[str], n_boot: int,
               seed: int) -> tuple[float | None, float | None, list | None, list]:
    """(accuracy over the labelled items — a missing prediction is wrong —, κ and its bootstrap CI over
    the items with a prediction, confusion matrix) of one label column."""
    has_label = np.array([t is not None for t in truth], dtype=bool)
    both = has_label & np.array([p is not None for p in pred], dtype=bool)
    accuracy = float(_correct(truth[has_label], pred[has_label]).mean()) if has_label.any() else None
    kappa = _nan_to_none(cohen_kappa(truth[both], pred[both], label_set)) if both.any() else None
    ci = None
    if kappa is not None:
        ci = list(bootstrap_kappa_ci(truth[both], pred[both], label_set, n_boot=n_boot, seed=seed))
    return accuracy, kappa, ci, confusion_matrix(truth[both], pred[both], label_set).tolist()


def _judge_metrics(frame: pl.DataFrame, labels: Mapping[str, np.ndarray], rule: str, n_boot: int,
                   seed: int, label_mode: str = "typed") -> dict[str, Any]:
    accuracy: dict[str, float | None] = dict.fromkeys(LABEL_COLUMNS)
    kappa: dict[str, float | None] = dict.fromkeys(LABEL_COLUMNS)
    kappa_ci: dict[str, list | None] = dict.fromkeys(LABEL_COLUMNS)
    original = label_mode == "original"
    label_set = ORIGINAL_LABELS if original else JUDGE_LABELS
    confusion = {}
    for dimension, truth in labels.items():
        if original and dimension != "overall":
            continue  # the judge gave no per-dimension labels
        pred = np.asarray(frame.get_column(f"{dimension}_pred").to_list(), dtype=object)
        truth = _untyped(truth) if original else truth
        accuracy[dimension], kappa[dimension], kappa_ci[dimension], confusion[dimension] = _agreement(
            truth, pred, label_set, n_boot, seed)
    overall_pred = np.asarray(frame.get_column("overall_pred").to_list(), dtype=object)
    untyped = _agreement(_untyped(labels["overall"]), _untyped(overall_pred), THREE_WAY_LABELS, n_boot, seed)
    ok = frame.get_column("error").is_null().to_numpy()
    overall = labels["overall"]
    scored = ok & np.array([t is not None for t in overall])
    if original:  # P3 asks only whether a winner was named: an untyped tie names none
        probes: dict[str, Any] = {"p3": attribution(overall[scored], np.where(
            overall_pred[scored] == TIE, "both_bad", overall_pred[scored]).astype(object))}
    else:
        predicted = frame.filter(pl.col("error").is_null())
        dims = [np.asarray(predicted.get_column(f"{d}_pred").to_list(), dtype=object) for d in DIMENSIONS]
        with_truth = {d: labels[d][ok] for d in ("paralinguistics", "voice_quality") if d in labels}
        probes = {
            "p1_content_counterfactual": content_counterfactual(
                *dims, rule=rule, labels=with_truth if len(with_truth) == 2 else None
            ),
            "p2_flip_rate": ablation_flip_rates(*dims, rule=rule),
            "p3": attribution(overall[scored], overall_pred[scored]),
        }
    costs = frame.get_column("cost").drop_nulls()
    return {
        "labels": label_mode,
        "n_items": frame.height,
        "n_errors": int(frame.height - ok.sum()),
        "accuracy": accuracy,
        "kappa": kappa,
        "kappa_ci95": kappa_ci,
        "confusion": {"labels": list(label_set), **confusion},
        "untyped_overall": {"labels": list(THREE_WAY_LABELS), "accuracy": untyped[0], "kappa": untyped[1],
                            "kappa_ci95": untyped[2]},
        "probes": probes,
        "cost": {
            "total_usd": float(costs.sum()) if costs.len() else None,
            "usd_per_item": float(costs.sum()) / frame.height if costs.len() and frame.height else None,
            "priced_items": int(costs.len()),
        },
    }


def label_mode_of(frame: pl.DataFrame) -> str:
    """The label mode of results written without a recorded one: "original" when a prediction is an
    untyped "tie", or when no row has dimension labels but some row has an overall label."""
    overall = frame.get_column("overall_pred")
    if (overall == TIE).any():
        return "original"
    dims = [c for c in ("content_pred", "voice_quality_pred", "paralinguistics_pred") if c in frame.columns]
    if overall.is_not_null().any() and all(frame.get_column(c).is_null().all() for c in dims):
        return "original"
    return "typed"


def _check_predictions(name: str, frame: pl.DataFrame, mode: str) -> None:
    label_set = ORIGINAL_LABELS if mode == "original" else JUDGE_LABELS
    bad = frame.filter(pl.col("overall_pred").is_not_null() & ~pl.col("overall_pred").is_in(list(label_set)))
    if bad.height:
        row = bad.row(0, named=True)
        raise ValueError(f"results of judge {name!r} ({mode} labels): item {row['item_id']} has overall_pred "
                         f"{row['overall_pred']!r}, expected one of {list(label_set)}")


def evaluate_judges(
    results: Mapping[str, pl.DataFrame],
    seed: int = 0,
    n_boot: int = 10_000,
    fusion: str | Mapping[str, str] = "speakbench",
    labels: str | Mapping[str, str | None] | None = None,
) -> dict[str, Any]:
    """Agreement of each judge with the human labels (fractions), McNemar between judges, probes and
    cost; ``fusion`` is the rule each judge's results were fused with (for P1/P2), ``labels`` each
    judge's label mode ("typed" / "original"; None: read from the results, see label_mode_of). See
    the module doc."""
    frames = _aligned(results)
    truth = _labels(frames)
    rules = {name: fusion if isinstance(fusion, str) else fusion.get(name, "speakbench") for name in frames}
    for rule in rules.values():
        check_fusion(rule)
    given = {name: labels if labels is None or isinstance(labels, str) else labels.get(name) for name in frames}
    modes = {name: given[name] or label_mode_of(frame) for name, frame in frames.items()}
    for name, mode in modes.items():
        if mode not in LABEL_MODES:
            raise ValueError(f"unknown label mode {mode!r} for judge {name!r}; expected one of {list(LABEL_MODES)}")
        _check_predictions(name, frames[name], mode)
        refuse_nonfinite(frames[name], "cost", SPEC.unique_key, f"results of judge {name!r}")
    has_overall = np.array([t is not None for t in truth["overall"]])
    if not has_overall.any():
        raise ValueError("no item has a human overall label")

    def correct_on(name: str, untyped: bool) -> np.ndarray:
        pred = np.asarray(frames[name].get_column("overall_pred").to_list(), dtype=object)[has_overall]
        reference = truth["overall"][has_overall]
        if untyped:
            return _correct(_untyped(reference), _untyped(pred))
        return _correct(reference, pred)

    correct = {name: correct_on(name, modes[name] == "original") for name in frames}
    intervals = paired_bootstrap_ci(correct, n_boot=n_boot, seed=seed)
    judges = {}
    for name, frame in frames.items():
        metrics = _judge_metrics(frame, truth, rules[name], n_boot, seed, modes[name])
        metrics["overall_ci95"] = [intervals[name]["lower"], intervals[name]["upper"]]
        metrics["fusion"] = rules[name]
        judges[name] = metrics
    names = list(frames)
    mcnemar = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if modes[a] == modes[b]:
                mcnemar.append({"a": a, "b": b, "p_value": mcnemar_p(correct[a], correct[b])})
            else:  # typed against original labels: both on the untyped scale
                p_value = mcnemar_p(correct_on(a, True), correct_on(b, True))
                mcnemar.append({"a": a, "b": b, "p_value": p_value, "scale": "untyped"})
    cost_table = [
        {"judge": name, "overall_accuracy": m["accuracy"].get("overall"), "n_errors": m["n_errors"], **m["cost"]}
        for name, m in judges.items()
    ]
    return {
        "n_items": int(has_overall.size),
        "n_labelled": int(has_overall.sum()),
        "bootstrap": {"n_boot": n_boot, "seed": seed, "level": 0.95},
        "judges": judges,
        "mcnemar": mcnemar,
        "cost": cost_table,
    }


def run_eval(
    results_paths: Sequence[str | os.PathLike],
    out_json: str | os.PathLike,
    plots_dir: str | os.PathLike | None = None,
    seed: int = 0,
    n_boot: int = 10_000,
) -> dict[str, Any]:
    """`sdscore eval judge`: evaluate results files (a judge is named by its file's stem), write
    METRICS.json and, with plots_dir, one confusion-matrix PNG per judge; returns the metrics."""
    paths = [Path(p) for p in results_paths]
    names = [p.stem for p in paths]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"results files share the stem(s) {repeated}; a judge is named by its file's stem")
    for path in paths:  # every file checked before any is read
        check_results_file(path)
    columns = {**RESULT_SCHEMA, **dict.fromkeys(LABEL_COLUMNS, pl.String)}
    results = {name: read_results(path, columns, required=("item_id", "overall_pred"),
                                   unique=SPEC.unique_key) for name, path in zip(names, paths)}
    settings = {name: results_settings(path) for name, path in zip(names, paths)}
    fusion = {name: settings[name].get("fusion", "speakbench") for name in names}
    labels = {name: settings[name].get("labels") for name in names}  # None: read from the results
    metrics = evaluate_judges(results, seed=seed, n_boot=n_boot, fusion=fusion, labels=labels)
    if plots_dir is not None:
        from sdscore.report.judge_plots import plot_confusions

        metrics["plots"] = {name: str(p) for name, p in plot_confusions(metrics, plots_dir).items()}
    write_json(out_json, metrics)
    return metrics


def evaluate_files(results: Sequence, out_json: str | os.PathLike, *, plot=None, seed: int = 0) -> dict:
    """`sdscore eval judge` (the registry's uniform signature): plot is a folder of confusion PNGs."""
    return run_eval(results, out_json, plots_dir=plot, seed=seed)
