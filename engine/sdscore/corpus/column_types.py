"""Cast manifest columns to their schema dtypes; casts that can fail per row keep the original for checks.

A column of the wrong kind altogether (text where a list belongs) is a file-level ManifestError.
"""

from __future__ import annotations

import polars as pl

from sdscore.corpus.schemas import TURN
from sdscore.errors import ManifestError

#: Prefix of the internal columns that keep a column's values as read, for the cast checks.
ORIGINAL_PREFIX = "_original_"

_TURN_FIELDS = ("role", "text", "audio_path")


def describe_dtype(dtype: pl.DataType) -> str:
    """Name a schema dtype the way an error message should ("a number", "a list of turns")."""
    if dtype == TURN:
        return "a turn {role, text, audio_path}"
    if dtype == pl.String:
        return "text"
    if dtype == pl.Float64:
        return "a number"
    if dtype == pl.Int64:
        return "an integer"
    if isinstance(dtype, pl.List):
        inner = describe_dtype(dtype.inner)
        return "a list of " + inner.removeprefix("a ").removeprefix("an ")
    return str(dtype)


def typed_columns(columns: pl.Schema, target: pl.Schema, source: str) -> tuple[list[pl.Expr], list[str]]:
    """Return expressions giving every target column its dtype, and the columns to check per row.

    Missing columns become typed nulls (the required ones are reported before this is called).
    """
    expressions: list[pl.Expr] = []
    checked: list[str] = []
    for name, dtype in target.items():
        if name not in columns:
            expressions.append(pl.lit(None, dtype).alias(name))
            continue
        expression, can_fail = _typed_expression(name, columns[name], dtype, source)
        expressions.append(expression.alias(name))
        if can_fail:
            checked.append(name)
    return expressions, checked


def _is_scalar(dtype: pl.DataType) -> bool:
    return dtype.is_numeric() or dtype in (pl.String, pl.Boolean, pl.Categorical) or isinstance(dtype, pl.Enum)


def _typed_expression(name: str, found: pl.DataType, wanted: pl.DataType, source: str) -> tuple[pl.Expr, bool]:
    column = pl.col(name)
    if found == wanted:
        return column, False
    if found == pl.Null:
        return column.cast(wanted), False
    if isinstance(wanted, pl.List) and wanted.inner == TURN:
        return _turn_list(name, found, source), False
    if _is_scalar(wanted) and _is_scalar(found):
        return column.cast(wanted, strict=False), wanted != pl.String
    if isinstance(wanted, pl.List) and isinstance(found, pl.List):
        inner = found.inner
        if inner == pl.Null or _is_scalar(inner):
            can_fail = wanted.inner != pl.String and inner != pl.Null
            return column.cast(wanted, strict=False), can_fail
    raise ManifestError(_wrong_kind(name, found, wanted, source))


def _wrong_kind(name: str, found: pl.DataType, wanted: pl.DataType, source: str) -> str:
    message = f"{source}: column '{name}' is {found}, expected {describe_dtype(wanted)}"
    if isinstance(wanted, pl.List) and found == pl.String:
        message += " (CSV cannot hold lists: use Parquet or JSONL)"
    return message


def _turn_list(name: str, found: pl.DataType, source: str) -> pl.Expr:
    """Rebuild each turn as {role, text, audio_path} by field name; absent fields become null."""
    if found == pl.List(pl.Null):
        return pl.col(name).cast(pl.List(TURN))
    if not (isinstance(found, pl.List) and isinstance(found.inner, pl.Struct)):
        raise ManifestError(_wrong_kind(name, found, pl.List(TURN), source))
    fields = {field.name: field.dtype for field in found.inner.fields}
    if "content" in fields and "text" not in fields and "audio_path" not in fields:
        raise ManifestError(
            f"{source}: column '{name}' holds SDiaReward turns {{role, content}} mixed with "
            "sdscore columns; give the file in one format"
        )
    parts = []
    for field_name in _TURN_FIELDS:
        dtype = fields.get(field_name)
        if dtype is None or dtype == pl.Null:
            parts.append(pl.lit(None, pl.String).alias(field_name))
        elif _is_scalar(dtype):
            parts.append(pl.element().struct.field(field_name).cast(pl.String).alias(field_name))
        else:
            raise ManifestError(f"{source}: column '{name}': turn field '{field_name}' is {dtype}, expected text")
    return pl.col(name).list.eval(pl.struct(parts))
