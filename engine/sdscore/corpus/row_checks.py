"""Per-row checks of a typed manifest, as polars expressions: a failure mask and a message each.

Masks are computed over every row; messages only on failing rows, so a clean 1M-row manifest costs
a few boolean columns. Each message says what is wrong with the value, without the row or column.
Every spec gets the checks of its columns' types, required columns, enumerations and unique key;
anything beyond those is the spec's own `row_checks` (a protocol's spec.py), built from the
generic blocks here (turn lists, path lists, first bad element of a list).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from sdscore.corpus.column_types import ORIGINAL_PREFIX, describe_dtype
from sdscore.corpus.raw_table import PARSE_ERROR
from sdscore.corpus.schemas import TURN_ROLES, ManifestSpec

#: Internal column: 0-based data-row index.
ROW_INDEX = "_row_index"
#: Internal column: 0-based index of the first row with the same unique key.
FIRST_ROW_OF_KEY = "_first_row_of_key"


@dataclass(frozen=True)
class RowCheck:
    """One rule: failed is True on rows that break it; message (String) is read on those rows only.

    column is the column the message is about, or None when the message names it itself.
    """

    column: str | None
    failed: pl.Expr
    message: pl.Expr


def row_checks(spec: ManifestSpec, cast_checked: list[str], has_parse_error: bool) -> list[RowCheck]:
    """All checks of a manifest spec, in the order problems are reported: the columns' types, the
    required columns, the enumerations, the spec's own row checks (none unless it asks), the unique key."""
    checks: list[RowCheck] = []
    if has_parse_error:
        parse = pl.col(PARSE_ERROR)
        checks.append(RowCheck(None, parse.is_not_null(), parse))
    checks += [_cast_check(name, spec.schema[name]) for name in cast_checked]
    required = [_required_check(name, spec.schema[name]) for name in spec.required]
    if has_parse_error:
        # What the reader could not convert is null: its reason is reported, not "is missing".
        converted = pl.col(PARSE_ERROR).is_null()
        required = [RowCheck(c.column, c.failed & converted, c.message) for c in required]
    checks += required
    checks += [_allowed_check(name, values) for name, values in spec.allowed_values.items()]
    checks += spec.row_checks()
    checks.append(_duplicate_check(spec))
    return [RowCheck(c.column, c.failed.fill_null(False), c.message) for c in checks]


def first_row_of_key(spec: ManifestSpec) -> pl.Expr:
    """The helper column the duplicate check needs, computed over all rows before filtering."""
    return pl.col(ROW_INDEX).min().over(list(spec.unique_key)).alias(FIRST_ROW_OF_KEY)


def quoted(value: pl.Expr) -> pl.Expr:
    """A value as 'text' for messages ("null" when missing)."""
    return pl.format("'{}'", value.cast(pl.String)).fill_null("null")


def _cast_check(name: str, dtype: pl.DataType) -> RowCheck:
    original, typed = pl.col(ORIGINAL_PREFIX + name), pl.col(name)
    if isinstance(dtype, pl.List):
        bad = pl.col(ORIGINAL_PREFIX + name).list.eval(
            pl.element().is_not_null() & pl.element().cast(dtype.inner, strict=False).is_null()
        )
        if dtype.inner == pl.Int64:
            bad = pl.col(ORIGINAL_PREFIX + name).list.eval(_not_integer(pl.element()))
        first = bad.list.arg_max()
        value = original.list.get(first, null_on_oob=True)
        message = pl.format(
            "the element at index {} is {}, not {}", first, quoted(value), pl.lit(describe_dtype(dtype.inner))
        )
        return RowCheck(name, bad.list.any(), message)
    failed = _not_integer(original) if dtype == pl.Int64 else original.is_not_null() & typed.is_null()
    message = pl.format("{} is not {}", quoted(original), pl.lit(describe_dtype(dtype)))
    return RowCheck(name, failed, message)


def _not_integer(value: pl.Expr) -> pl.Expr:
    """True where a value is present but is not a whole number (1.5 would otherwise cast to 1)."""
    as_float = value.cast(pl.Float64, strict=False)
    return value.is_not_null() & (as_float.is_null() | (as_float != as_float.floor()))


def _required_check(name: str, dtype: pl.DataType) -> RowCheck:
    column = pl.col(name)
    failed = column.is_null()
    message = pl.lit("is missing")
    if dtype == pl.String:
        failed = failed | (column.str.strip_chars() == "")
        message = pl.when(column.is_null()).then(pl.lit("is missing")).otherwise(pl.lit("is empty"))
    return RowCheck(name, failed, message)


def _allowed_check(name: str, values: tuple[str, ...]) -> RowCheck:
    column = pl.col(name)
    failed = column.is_not_null() & ~column.is_in(values)
    return RowCheck(name, failed, pl.format("{} is not one of {}", quoted(column), pl.lit(", ".join(values))))


def _duplicate_check(spec: ManifestSpec) -> RowCheck:
    key = spec.unique_key
    id_column = pl.col(spec.id_column)
    failed = id_column.is_not_null() & (pl.col(FIRST_ROW_OF_KEY) != pl.col(ROW_INDEX))
    message = pl.format("{} repeats row {}", quoted(id_column), pl.col(FIRST_ROW_OF_KEY) + 1)
    if len(key) > 1:
        others = [pl.format("{} {}", pl.lit(k), quoted(pl.col(k))) for k in key if k != spec.id_column]
        message = pl.format(
            "{} repeats row {} (same {})",
            quoted(id_column),
            pl.col(FIRST_ROW_OF_KEY) + 1,
            pl.concat_str(others, separator=", "),
        )
    return RowCheck(spec.id_column, failed, message)


def non_empty_list(name: str, what: str) -> RowCheck:
    """A list column that is present must hold something ("has no {what}")."""
    column = pl.col(name)
    return RowCheck(name, column.is_not_null() & (column.list.len() == 0), pl.lit(f"has no {what}"))


def first_bad_element(name: str, bad_element: pl.Expr, describe: Callable[[pl.Expr, pl.Expr], pl.Expr]) -> RowCheck:
    """A check on list elements (null counts as bad): describe(n, element) the first bad one, n from 1."""
    bad = pl.col(name).list.eval(bad_element.fill_null(True))
    first = bad.list.arg_max()
    element = pl.col(name).list.get(first, null_on_oob=True)
    return RowCheck(name, bad.list.any(), describe(first + 1, element))


def turn_list_checks(name: str) -> list[RowCheck]:
    """A list of TURN structs: not empty, known roles, each turn with text or an audio path."""
    role = pl.element().struct.field("role")
    has_no_content = pl.element().struct.field("text").is_null() & (
        pl.element().struct.field("audio_path").fill_null("").str.strip_chars() == ""
    )
    return [
        non_empty_list(name, "turns"),
        first_bad_element(
            name,
            ~role.is_in(TURN_ROLES),
            lambda n, turn: pl.format(
                "turn {} has role {}, not one of {}",
                n,
                quoted(turn.struct.field("role")),
                pl.lit(", ".join(TURN_ROLES)),
            ),
        ),
        first_bad_element(
            name, has_no_content, lambda n, _turn: pl.format("turn {} has neither text nor audio_path", n)
        ),
    ]


def path_list_checks(name: str) -> list[RowCheck]:
    """A list of audio paths: not empty, no missing path."""
    return [
        non_empty_list(name, "paths"),
        first_bad_element(
            name,
            pl.element().is_null() | (pl.element().str.strip_chars() == ""),
            lambda n, _path: pl.format("the path at index {} is missing", n - 1),
        ),
    ]


def list_text(column: pl.Expr) -> pl.Expr:
    """A list column as "[a, b, c]" text, for messages."""
    return pl.format("[{}]", column.cast(pl.List(pl.String)).list.join(", "))
