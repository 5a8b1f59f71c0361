"""`sdscore eval consistency`: SpeakerSleuth's metrics of one or several results files, in one table.

One file gives its metrics (with the threshold sweep for embedding methods, and position bias and
agreement across option orders for LALM judges). Several files (say, Pairwise (ECAPA), Centroid and
an LALM judge scored on the same manifest) give each run's metrics under ``runs`` and a ``table`` with
one row per run: the headline numbers of the paper's Table 2.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import polars as pl

from sdscore.atomic_write import write_json
from sdscore.corpus.results_file import read_results
from sdscore.errors import ManifestError
from sdscore.metrics._inputs import error_mask, nonfinite_mask, nonfinite_report, refuse_nonfinite
from sdscore.metrics.consistency import consistency_summary, detection_accuracy, localization_summary
from sdscore.metrics.position_bias import order_agreement, position_bias, position_shares
from sdscore.protocols.consistency.choices import METHODS
from sdscore.protocols.consistency.scorer import RESULTS, flag_turns
from sdscore.protocols.consistency.spec import SPEC

#: Table 2's headline columns: (table name, path into the metrics)
TABLE_COLUMNS = (
    ("det_S1", ("detection", "S1")), ("det_S2", ("detection", "S2")), ("det_S3", ("detection", "S3")),
    ("det_bal", ("detection", "balanced")), ("loc_bal_f1", ("localization", "balanced_f1")),
    ("disc_acc", ("discrimination", "accuracy", "average")), ("ndcg@1", ("discrimination", "ndcg@1")),
    ("ndcg@2", ("discrimination", "ndcg@2")), ("exact_match", ("discrimination", "exact_match")),
    ("position_bias", ("options", "position_bias")),
)

#: The scores whose NaN/±inf leave a row out of every metric (counted under nonfinite_excluded).
NONFINITE_COLUMNS = ("turn_scores", "candidate_scores")

#: Thresholds of the sensitivity sweep (SpeakerSleuth Appendix B.2).
SWEEP = tuple(round(0.1 * k, 1) for k in range(1, 8))


def _method_of(results: pl.DataFrame) -> str:
    methods = results["method"].drop_nulls().unique().to_list() if "method" in results.columns else []
    if len(methods) != 1 or methods[0] not in METHODS:
        raise ValueError(f"results must come from one scoring method of {', '.join(METHODS)}, got {methods}")
    return methods[0]


def sweep_thresholds(results: pl.DataFrame, thresholds=SWEEP) -> pl.DataFrame:
    """Detection accuracy and localization per threshold, re-deciding from the stored turn_scores.

    One row per threshold: threshold, S1, S2, S3, balanced (detection accuracy) and the
    localization keys (S1_f1, S2_precision, ..., balanced_f1). Nothing is re-embedded.
    """
    method = _method_of(results)
    rows = results.filter(
        (pl.col("task") == "detection") & pl.col("error").is_null() & pl.col("turn_scores").is_not_null()
    )
    if rows.height == 0:
        raise ValueError("no scored detection rows to sweep (every row has an error or no turn_scores)")
    scores, scenarios, truth = rows["turn_scores"].to_list(), rows["scenario"], rows["true_turns"]
    table = []
    for threshold in thresholds:
        flagged = [flag_turns(s, method, float(threshold)) for s in scores]
        detection = detection_accuracy(scenarios, [bool(f) for f in flagged])
        localization = localization_summary(scenarios, flagged, truth)
        table.append({"threshold": float(threshold), **detection, **localization})
    return pl.DataFrame(table)


def option_summary(results: pl.DataFrame) -> dict | None:
    """Position shares and bias of the LALM answers that pick among shown options, and agreement across
    orders (sdscore.metrics.position_bias); None when the results hold no such answers. Answers are
    counted per call; rows asked with a different number of options than the most common are left out."""
    if "option_orders" not in results.columns:
        return None
    rows = results.filter(pl.col("option_orders").is_not_null() & pl.col("answers").is_not_null())
    calls = [(order, answer) for orders, answers in zip(rows["option_orders"].to_list(), rows["answers"].to_list())
             for order, answer in zip(orders, answers) if answer]
    if not calls:
        return None
    n_options = Counter(len(order) for order, _ in calls).most_common(1)[0][0]
    letters = [chr(ord("A") + i) for i in range(n_options)]
    positions = [letters.index(answer[0]) for order, answer in calls if len(order) == n_options]
    shares = position_shares(positions, n_options)
    picks = []
    for orders, answers in zip(rows["option_orders"].to_list(), rows["answers"].to_list()):
        picks.append([order[letters.index(a[0])] for order, a in zip(orders, answers)
                      if a and len(order) == n_options])
    return {"n_options": n_options, "n_answers": len(positions),
            "position_shares": dict(zip(letters, shares.tolist())), "position_bias": position_bias(shares),
            **order_agreement(picks)}


def evaluate_consistency(results: pl.DataFrame) -> dict:
    """SpeakerSleuth metrics of a results frame (metrics.consistency_summary), with row counts, the
    method, model and threshold, and the LALM option summary."""
    summary = consistency_summary(results)
    summary["n_rows"] = results.height
    for name in ("method", "model"):
        values = results[name].drop_nulls().unique().to_list() if name in results.columns else []
        summary[name] = values[0] if len(values) == 1 else None
    thresholds = results["threshold"].drop_nulls() if "threshold" in results.columns else []
    summary["threshold"] = thresholds[0] if summary["method"] is not None and len(thresholds) else None
    summary["options"] = option_summary(results)
    if "cost" in results.columns and results["cost"].drop_nulls().len():
        refuse_nonfinite(results, "cost", SPEC.unique_key, "consistency results")
        summary["cost"] = float(results["cost"].drop_nulls().sum())
    return summary


def without_nonfinite(results: pl.DataFrame) -> tuple[pl.DataFrame, dict | None]:
    """The results less the rows without an error whose turn_scores or candidate_scores hold NaN/±inf
    (their flags and ranking come from scores that are not numbers), and the report of those rows."""
    failed = error_mask(results)
    report = nonfinite_report(results.filter(pl.Series(~failed)), NONFINITE_COLUMNS, SPEC.unique_key)
    if report is None:
        return results, None
    return results.filter(pl.Series(failed | ~nonfinite_mask(results, NONFINITE_COLUMNS))), report


def _metrics_of(results_path: str | os.PathLike) -> tuple[dict, pl.DataFrame | None]:
    results = read_results(results_path, RESULTS, required=("task",),
                           unique=SPEC.unique_key)
    if results.height == 0:
        raise ManifestError(f"{results_path}: the results hold no rows; there is nothing to evaluate")
    n_rows = results.height
    results, nonfinite = without_nonfinite(results)
    metrics = evaluate_consistency(results)
    metrics["n_rows"] = n_rows
    if nonfinite is not None:
        metrics["nonfinite_excluded"] = nonfinite
    sweepable = results.filter(
        (pl.col("task") == "detection") & pl.col("error").is_null() & pl.col("turn_scores").is_not_null()
    ).height > 0
    sweep = sweep_thresholds(results) if sweepable else None
    metrics["threshold_sweep"] = None if sweep is None else sweep.to_dicts()
    return metrics, sweep


def run_eval(
    results_path: str | os.PathLike, out_json: str | os.PathLike, plot_path: str | os.PathLike | None = None
) -> dict:
    """Metrics of a results Parquet as JSON (with the threshold sweep), and the sweep plot when asked."""
    metrics, sweep = _metrics_of(results_path)
    if plot_path is not None:
        if sweep is None:
            raise ValueError(f"{results_path}: no scored detection rows, so there is no threshold sweep to plot")
        from sdscore.report.consistency_plots import plot_threshold_sweep

        plot_threshold_sweep(sweep, plot_path, method=metrics.get("method"))
    write_json(out_json, metrics)
    return metrics


def run_label(metrics: dict, path: str | os.PathLike) -> str:
    """A run's name in the table: "method (model)", else the file's stem."""
    method, model = metrics.get("method"), metrics.get("model")
    if method is None:
        return Path(path).stem
    return f"{method} ({model})" if model else str(method)


def _lookup(metrics: dict, path: tuple[str, ...]):
    value = metrics
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def compare_runs(results: list, out_json: str | os.PathLike) -> dict:
    """Each results file's metrics under ``runs`` (by label) and the ``table`` of headline numbers."""
    runs: dict[str, dict] = {}
    for path in results:
        metrics, _ = _metrics_of(path)
        label = run_label(metrics, path)
        if label in runs:
            label = f"{label} [{Path(path).stem}]"
        if label in runs:
            raise ValueError(f"two results files give the run label {label!r}; rename one of them")
        metrics["results_file"] = str(path)
        runs[label] = metrics
    table = [{"run": label, **{name: _lookup(m, key) for name, key in TABLE_COLUMNS}} for label, m in runs.items()]
    out = {"runs": runs, "table": table}
    write_json(out_json, out)
    return out


def evaluate_files(results: list, out_json: str | os.PathLike, *, plot=None, seed: int = 0) -> dict:
    """`sdscore eval consistency` (the registry's uniform signature; seed is unused: no resampling)."""
    if len(results) == 1:
        return run_eval(results[0], out_json, plot_path=plot)
    if plot is not None:
        raise ValueError("--plot draws one run's threshold sweep; evaluate that results file alone")
    return compare_runs(results, out_json)


def format_table(metrics: dict) -> str | None:
    """The runs' table as plain text, percentages to one decimal (None for a single run)."""
    table = metrics.get("table")
    if not table:
        return None
    names = ["run", *(name for name, _ in TABLE_COLUMNS)]
    cells = [[row["run"], *("-" if row[n] is None else f"{100 * row[n]:.1f}" for n in names[1:])] for row in table]
    widths = [max(len(names[i]), *(len(c[i]) for c in cells)) for i in range(len(names))]
    lines = ["  ".join(n.ljust(w) for n, w in zip(names, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
