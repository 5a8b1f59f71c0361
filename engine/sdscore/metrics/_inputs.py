"""Input checks shared by the metric modules: 1-D arrays, equal lengths, known labels, error rows.

Every check raises ValueError (never ``assert``) with a message naming the argument and the problem.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Sized

import numpy as np
import polars as pl


def as_1d(values, name: str, dtype=None) -> np.ndarray:
    """``values`` (list, numpy array or polars Series) as a 1-D numpy array; ValueError otherwise."""
    if isinstance(values, pl.Series):
        values = values.to_numpy()
    array = np.asarray(values, dtype=dtype)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    return array


def as_bool_1d(values, name: str) -> np.ndarray:
    """A 1-D boolean array; integers 0/1 are accepted, anything else raises ValueError."""
    array = as_1d(values, name)
    if array.dtype == bool:
        return array
    if array.size == 0:
        return array.astype(bool)
    if array.dtype.kind not in "iuf" or not np.isin(array, (0, 1)).all():
        raise ValueError(f"{name} must hold booleans (or 0/1), got dtype {array.dtype}")
    return array.astype(bool)


def as_finite_1d(values, name: str) -> np.ndarray:
    """A 1-D float64 array with no NaN/Inf; the message names the first bad position."""
    array = as_1d(values, name, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name} has a non-finite value {array[bad[0]]} at position {bad[0]}")
    return array


def check_same_length(**arrays: Sized) -> None:
    """Raise ValueError quoting every length unless all the named arrays have the same length."""
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        quoted = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ValueError(f"lengths differ: {quoted}")


def check_labels(values: Iterable, allowed: Sequence[str], name: str) -> None:
    """Raise ValueError naming the first value of ``values`` not in ``allowed``."""
    allowed_set = set(allowed)
    for position, value in enumerate(values):
        if not isinstance(value, str) or value not in allowed_set:
            raise ValueError(f"{name} has unknown label {value!r} at position {position}; expected one of {list(allowed)}")


def as_label_array(values, allowed: Sequence[str], name: str) -> np.ndarray:
    """A 1-D object array of labels, every one checked against ``allowed``."""
    array = as_1d(values, name, dtype=object)
    check_labels(array, allowed, name)
    return array


def check_columns(frame: pl.DataFrame, required: Sequence[str], what: str) -> None:
    """Raise ValueError listing the columns of ``required`` that ``frame`` lacks."""
    missing = [column for column in required if column not in frame.columns]
    if missing:
        raise ValueError(f"{what} frame lacks column(s) {missing}; it has {frame.columns}")


def error_mask(frame: pl.DataFrame) -> np.ndarray:
    """Boolean ``[rows]``: the row carries an error (an ``error`` that is not null and not "")."""
    if "error" not in frame.columns:
        return np.zeros(frame.height, dtype=bool)
    error = frame["error"].cast(pl.String)
    return (error.is_not_null() & (error != "")).fill_null(False).to_numpy()


def drop_error_rows(frame: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Rows without an error, and how many rows carried one (see ``error_mask``)."""
    failed = error_mask(frame)
    return frame.filter(pl.Series(~failed)), int(failed.sum())


def mean_or_none(values: np.ndarray) -> float | None:
    """Mean of a 1-D array, or None when it is empty (undefined; JSON-safe, never NaN)."""
    return float(np.mean(values)) if len(values) else None


def nonfinite_mask(frame: pl.DataFrame, columns: Iterable[str]) -> np.ndarray:
    """Boolean ``[rows]``: the row holds a NaN or ±inf in one of ``columns`` (float columns, or lists of
    floats: any element). Nulls are missing values, not non-finite ones; absent columns are skipped."""
    mask = np.zeros(frame.height, dtype=bool)
    for column in columns:
        mask |= _column_nonfinite(frame, column)
    return mask


def _column_nonfinite(frame: pl.DataFrame, column: str) -> np.ndarray:
    if column not in frame.columns:
        return np.zeros(frame.height, dtype=bool)
    series = frame[column]
    if isinstance(series.dtype, (pl.List, pl.Array)):
        if not series.dtype.inner.is_float():
            return np.zeros(frame.height, dtype=bool)
        listed = pl.col(column).arr.to_list() if isinstance(series.dtype, pl.Array) else pl.col(column)
        expr = listed.list.eval(pl.element().is_finite().not_().fill_null(False)).list.any()
        return frame.select(expr.fill_null(False)).to_series().to_numpy().astype(bool)
    if not series.dtype.is_float():
        return np.zeros(frame.height, dtype=bool)
    return (~series.is_finite()).fill_null(False).to_numpy().astype(bool)


def nonfinite_report(frame: pl.DataFrame, columns: Sequence[str], id_columns: Sequence[str],
                     shown: int = 5) -> dict | None:
    """Which rows of ``frame`` hold a non-finite value in ``columns`` (see ``nonfinite_mask``), for the
    eval output: {n_rows, ids (the first ``shown``, as "k1/k2" of ``id_columns``, else "row N"),
    columns: {column: rows}}; None when every value is finite."""
    mask = nonfinite_mask(frame, columns)
    if not mask.any():
        return None
    positions = np.flatnonzero(mask)[:shown]
    keys = [c for c in id_columns if c in frame.columns]
    ids = ["/".join(str(frame[c][int(p)]) for c in keys) if keys else f"row {int(p) + 1}" for p in positions]
    per_column = {c: int(_column_nonfinite(frame, c).sum()) for c in columns}
    return {"n_rows": int(mask.sum()), "ids": ids, "columns": {c: n for c, n in per_column.items() if n}}


def _nonfinite_reports(value, where: str = ""):
    """(where, report) for every ``nonfinite_excluded`` entry of an eval's metrics, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "nonfinite_excluded" and isinstance(item, dict):
                yield where, item
            else:
                yield from _nonfinite_reports(item, f"{where}/{key}" if where else str(key))
    elif isinstance(value, list):
        for item in value:
            yield from _nonfinite_reports(item, where)


def nonfinite_note(metrics: dict, shown: int = 5) -> str | None:
    """One line for stderr: how many rows held NaN/±inf scores, left out of the metrics, and their first ids."""
    reports = list(_nonfinite_reports(metrics))
    if not reports:
        return None
    n = sum(report["n_rows"] for _, report in reports)
    ids = [i for _, report in reports for i in report["ids"]][:shown]
    columns = sorted({c for _, report in reports for c in report.get("columns", {})})
    places = sorted({where for where, _ in reports if where})
    return (f"note: {n} row{'s' if n != 1 else ''} with non-finite (NaN/inf) {', '.join(columns)} excluded from "
            f"the metrics{' (' + ', '.join(places) + ')' if places else ''}: {', '.join(ids)}"
            f"{', ...' if n > len(ids) else ''} (see nonfinite_excluded in the metrics JSON)")


def refuse_nonfinite(frame: pl.DataFrame, column: str, id_columns: Sequence[str], what: str) -> None:
    """ValueError naming the rows (their ids) whose ``column`` is NaN/±inf: for values that are summed
    (a cost), where leaving a row out would misstate the total and keeping it would write NaN."""
    report = nonfinite_report(frame, (column,), id_columns)
    if report is not None:
        more = f" and {report['n_rows'] - len(report['ids'])} more" if report["n_rows"] > len(report["ids"]) else ""
        raise ValueError(f"{what}: {column} is NaN or infinite on {report['n_rows']} row"
                         f"{'s' if report['n_rows'] != 1 else ''} ({', '.join(report['ids'])}{more}); "
                         f"give a finite {column} or none (null)")
