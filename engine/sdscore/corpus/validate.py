"""Validate a manifest frame against its spec: columns, dtypes, enumerations, lists, unique ids.

Problems are reported as "FILE: row N, column 'c': what is wrong". Mode "raise" gathers up to
max_errors of them into one ManifestError; mode "collect" keeps every row and sets `error` on bad ones.
"""

from __future__ import annotations

from typing import Literal, TypeVar

import polars as pl

from sdscore.corpus.column_types import ORIGINAL_PREFIX, typed_columns
from sdscore.corpus.raw_table import PARSE_ERROR, RowLocator, data_row_labels
from sdscore.corpus.row_checks import FIRST_ROW_OF_KEY, ROW_INDEX, RowCheck, first_row_of_key, row_checks
from sdscore.corpus.schemas import ManifestSpec, require_spec
from sdscore.errors import ManifestError

Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)

#: The column that collect mode adds: null on good rows, the problems of a bad row otherwise.
ERROR_COLUMN = "error"

DEFAULT_MAX_ERRORS = 20


def validate_manifest(
    frame: Frame,
    spec: ManifestSpec,
    source: str = "<frame>",
    *,
    errors: Literal["raise", "collect"] = "raise",
    max_errors: int = DEFAULT_MAX_ERRORS,
    locate_rows: RowLocator | None = None,
    row_offset: int = 0,
    first_rows: pl.Series | None = None,
) -> Frame:
    """Check frame against a manifest spec (its schema and rules); return it cast to the schema (extras kept last).

    errors="raise" raises one ManifestError naming source, row and column of up to max_errors problems.
    errors="collect" returns every row, with an `error` column set on bad rows (their bad values null).
    A missing required column or a column of the wrong kind is a file-level error in both modes.
    A LazyFrame stays lazy, but its rows are read once here to check them.
    A window of a larger manifest passes row_offset (its first row's index in the manifest, so
    messages number rows as in the file) and first_rows (manifest_first_rows of the whole file,
    sliced to the window: the duplicate-key check then sees every row, not just the window's).
    """
    if errors not in ("raise", "collect"):
        raise ValueError(f"errors must be 'raise' or 'collect', not {errors!r}")
    if max_errors < 1:
        raise ValueError(f"max_errors must be at least 1, not {max_errors}")
    spec = require_spec(spec, "sdscore.corpus.validate_manifest")
    locate_rows = locate_rows or data_row_labels
    eager = isinstance(frame, pl.DataFrame)
    schema = spec.schema
    columns = frame.lazy().collect_schema()
    missing = [name for name in spec.required if name not in columns]
    if missing:
        raise ManifestError(
            f"{source}: missing required column{'s' if len(missing) > 1 else ''} "
            f"{', '.join(repr(m) for m in missing)} for protocol '{spec.name}' "
            f"(found: {', '.join(columns.names()) or 'no columns'})"
        )
    typed_expressions, cast_checked = typed_columns(columns, schema, source)
    has_parse_error = PARSE_ERROR in columns
    extras = [name for name in columns if name not in schema and name not in (PARSE_ERROR, ERROR_COLUMN)]
    internal = [ORIGINAL_PREFIX + name for name in cast_checked] + ([PARSE_ERROR] if has_parse_error else [])
    typed = (
        frame.lazy()
        .with_columns(pl.col(name).alias(ORIGINAL_PREFIX + name) for name in cast_checked)
        .with_columns(typed_expressions)
        .select(*schema.names(), *extras, *internal)
    )
    if eager:
        typed = typed.collect().lazy()
    output_columns = [*schema.names(), *extras]

    checks = row_checks(spec, cast_checked, has_parse_error)
    if first_rows is not None and len(first_rows) != frame.lazy().select(pl.len()).collect().item():
        raise ValueError(f"first_rows has {len(first_rows)} values for a window of another size")
    masks, bad_rows = _failing_rows(typed, spec, checks, row_offset, first_rows)
    if errors == "raise":
        if bad_rows.height:
            raise ManifestError(
                _report(typed, masks, bad_rows, checks, source, max_errors, locate_rows, row_offset)
            )
        result = typed.select(output_columns)
    else:
        messages = _row_messages(typed, bad_rows, checks, row_offset)
        error = pl.lit(None, pl.String)
        if messages.height:
            rows, texts = messages[ROW_INDEX] - row_offset, messages[ERROR_COLUMN]
            error = pl.int_range(pl.len(), dtype=rows.dtype).replace_strict(rows, texts, default=None)
        result = typed.select(*output_columns, error.alias(ERROR_COLUMN))
    return result.collect() if eager else result


def _mask_name(index: int) -> str:
    return f"_failed_{index}"


def manifest_first_rows(keys: pl.DataFrame | pl.LazyFrame, spec: ManifestSpec) -> pl.Series:
    """Per row, the index of the first row with its unique key (keys: the spec's key columns)."""
    return (
        keys.lazy().with_row_index(ROW_INDEX).select(first_row_of_key(spec)).collect().to_series()
    )


def _failing_rows(
    typed: pl.LazyFrame, spec: ManifestSpec, checks: list[RowCheck], row_offset: int, first_rows: pl.Series | None
) -> tuple[list[str], pl.DataFrame]:
    """Evaluate every check's mask over all rows; keep the failing rows' masks (and row indices)."""
    masks = [_mask_name(i) for i in range(len(checks))]
    indexed = typed.with_row_index(ROW_INDEX, offset=row_offset)
    bad_rows = (
        (indexed.with_columns(first_row_of_key(spec)) if first_rows is None
         else indexed.with_columns(pl.lit(first_rows.cast(pl.UInt32)).alias(FIRST_ROW_OF_KEY)))
        .select(ROW_INDEX, FIRST_ROW_OF_KEY, *(check.failed.alias(m) for check, m in zip(checks, masks, strict=True)))
        .filter(pl.any_horizontal(masks))
        .collect(engine="streaming")
    )
    return masks, bad_rows


def _problems(typed: pl.LazyFrame, bad_rows: pl.DataFrame, checks: list[RowCheck], row_offset: int) -> pl.DataFrame:
    """One row per failing row: its index and one message column per check (null where it passed)."""
    values = typed.with_row_index(ROW_INDEX, offset=row_offset).filter(pl.col(ROW_INDEX).is_in(bad_rows[ROW_INDEX].implode()))
    joined = values.join(bad_rows.lazy(), on=ROW_INDEX, how="inner", maintain_order="left")
    return joined.select(
        ROW_INDEX,
        *(pl.when(pl.col(_mask_name(i))).then(check.message).alias(_mask_name(i)) for i, check in enumerate(checks)),
    ).collect()


def _prefix(check: RowCheck) -> str:
    return f"column '{check.column}': " if check.column else ""


def _row_messages(typed: pl.LazyFrame, bad_rows: pl.DataFrame, checks: list[RowCheck], row_offset: int) -> pl.DataFrame:
    """The `error` text of each failing row: its problems joined by "; "."""
    problems = _problems(typed, bad_rows, checks, row_offset)
    parts = [pl.lit(_prefix(check)) + pl.col(_mask_name(i)) for i, check in enumerate(checks)]
    return problems.select(ROW_INDEX, pl.concat_str(parts, separator="; ", ignore_nulls=True).alias(ERROR_COLUMN))


def _report(
    typed: pl.LazyFrame,
    masks: list[str],
    bad_rows: pl.DataFrame,
    checks: list[RowCheck],
    source: str,
    max_errors: int,
    locate_rows: RowLocator,
    row_offset: int,
) -> str:
    """Format the first max_errors problems, one per line, each naming source, row and column."""
    total = int(bad_rows.select(pl.sum_horizontal(masks).sum()).item())
    problems = _problems(typed, bad_rows.head(max_errors), checks, row_offset)
    labels = dict(zip(problems[ROW_INDEX].to_list(), locate_rows(problems[ROW_INDEX].to_list()), strict=True))
    lines: list[str] = []
    for row in problems.iter_rows(named=True):
        for i, check in enumerate(checks):
            message = row[_mask_name(i)]
            if message is not None and len(lines) < max_errors:
                lines.append(f"{source}: {labels[row[ROW_INDEX]]}, {_prefix(check)}{message}")
    if total == 1:
        return lines[0]
    shown = "" if len(lines) == total else f" (first {len(lines)} shown)"
    return f"{source}: {total} problems{shown}:\n" + "\n".join("  " + line for line in lines)
