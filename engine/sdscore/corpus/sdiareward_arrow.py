"""SDiaReward pairs already in columnar form (Parquet, HF Arrow, JSONL parsed by pyarrow) → REWARD_PAIRS.

The same conversion as the row converter in sdiareward_format, written as polars expressions so a
million pairs convert in seconds. Layouts it does not know raise UnsupportedLayout; callers then
fall back to the row converter, which accepts anything JSON can hold.
"""

from __future__ import annotations

import polars as pl

from sdscore.corpus.raw_table import PARSE_ERROR
from sdscore.corpus.schemas import CRITERIA

_TEXT_FIELDS = ("subset", "category", "source")
_OK, _BAD_KIND, _NO_PATH, _MANY_AUDIO = 0, 1, 2, 3


class UnsupportedLayout(Exception):
    """The columns' types are not ones the expression converter handles."""


def convert_pairs(frame: pl.LazyFrame, id_prefix: str = "") -> pl.LazyFrame:
    """Convert SDiaReward columns to REWARD_PAIRS (+ _parse_error); pair_id defaults to prefix + row number."""
    schema = frame.collect_schema()
    for name in ("chosen", "rejected"):
        if name not in schema:
            raise UnsupportedLayout(f"no column {name!r}")
    given_ids = [pl.col(name).cast(pl.String) for name in ("pair_id", "id") if name in schema]
    row_id = pl.lit(id_prefix) + pl.int_range(pl.len(), dtype=pl.Int64).cast(pl.String)
    texts = {name: _text_column(schema, name) for name in (*_TEXT_FIELDS, "criterion")}
    said = pl.concat_str([texts["subset"].fill_null(""), texts["category"].fill_null("")], separator=" ")
    derived = pl.when(said.str.to_lowercase().str.contains("colloquial")).then(pl.lit(CRITERIA[1]))
    parts = {name: _turn_parts(name, schema[name]) for name in ("chosen", "rejected")}
    check = _any_problem(frame, parts)
    turns = {name: _turn_list(name, turn, check) for name, turn in parts.items()}
    staged = frame.select(
        pl.coalesce(*given_ids, row_id).alias("pair_id"),
        texts["criterion"].fill_null(derived.otherwise(pl.lit(CRITERIA[0]))).alias("criterion"),
        *(texts[name].alias(name) for name in _TEXT_FIELDS),
        *(expression.alias(name) for name, expression in turns.items()),
        (pl.col("margin") if "margin" in schema else pl.lit(None, pl.Float64)).alias("margin"),
    )
    problems = {name: _first_problem(name) if check else pl.lit(None, pl.String) for name in turns}
    return staged.select(
        "pair_id",
        "criterion",
        *_TEXT_FIELDS,
        *(pl.when(problems[name].is_null()).then(_clean(name)).alias(name) for name in turns),
        "margin",
        pl.concat_str(list(problems.values()), separator="; ", ignore_nulls=True).alias(PARSE_ERROR),
    ).with_columns(pl.when(pl.col(PARSE_ERROR) != "").then(pl.col(PARSE_ERROR)).alias(PARSE_ERROR))


def _text_column(schema: pl.Schema, name: str) -> pl.Expr:
    if name not in schema:
        return pl.lit(None, pl.String)
    if isinstance(schema[name], (pl.List, pl.Struct, pl.Array)):
        raise UnsupportedLayout(f"column {name!r} is {schema[name]}")
    return pl.col(name).cast(pl.String)


def _fields(dtype: pl.DataType, what: str) -> dict[str, pl.DataType]:
    if not isinstance(dtype, pl.Struct):
        raise UnsupportedLayout(f"{what} is {dtype}")
    return {field.name: field.dtype for field in dtype.fields}


def _turn_parts(name: str, dtype: pl.DataType) -> dict[str, pl.Expr] | None:
    """Expressions on one turn (pl.element()): role, text, audio_path, audio_count, code, kind, has_problem.

    None for a column that holds no turns at all (all null).
    """
    if dtype in (pl.Null, pl.List(pl.Null)):
        return None
    if not isinstance(dtype, pl.List):
        raise UnsupportedLayout(f"column {name!r} is {dtype}")
    turn = _fields(dtype.inner, "a turn")
    role = pl.element().struct.field("role").cast(pl.String) if "role" in turn else pl.lit(None, pl.String)
    content_type = turn.get("content", pl.Null)
    content = pl.element().struct.field("content")
    if content_type == pl.Null or content_type == pl.List(pl.Null):
        parts = {"text": pl.lit(None, pl.String), "audio_path": pl.lit(None, pl.String)}
    elif content_type == pl.String:
        parts = {"text": content, "audio_path": pl.lit(None, pl.String)}
    elif isinstance(content_type, pl.List):
        return {"role": role, **_items(content, _fields(content_type.inner, "a content item"))}
    else:
        raise UnsupportedLayout(f"turn content is {content_type}")
    no_problem = {"audio_count": pl.lit(0, pl.UInt32), "code": pl.lit(_OK, pl.UInt8), "kind": pl.lit(None, pl.String)}
    return {"role": role, **parts, **no_problem, "has_problem": pl.lit(False)}


def _turn_list(name: str, parts: dict[str, pl.Expr] | None, check: bool) -> pl.Expr:
    """Each turn → {role, text, audio_path, _code, _kind, _audio_count}; problem helpers only if check."""
    if parts is None:
        return pl.col(name).cast(pl.List(_STAGED_TURN))
    if not check:
        parts = {
            **parts,
            "code": pl.lit(_OK, pl.UInt8),
            "kind": pl.lit(None, pl.String),
            "audio_count": pl.lit(0, pl.UInt32),
        }
    return pl.col(name).list.eval(
        pl.struct(
            parts["role"].alias("role"),
            parts["text"].alias("text"),
            parts["audio_path"].alias("audio_path"),
            parts["code"].alias("_code"),
            parts["kind"].alias("_kind"),
            parts["audio_count"].alias("_audio_count"),
        )
    )


def _items(content: pl.Expr, item: dict[str, pl.DataType]) -> dict[str, pl.Expr]:
    """What a turn's content items give: text, audio path, and the first problem (code, kind)."""
    if "type" not in item:
        raise UnsupportedLayout("content items have no 'type'")
    kind = pl.element().struct.field("type").cast(pl.String)
    is_text, is_audio = kind == "text", kind == "audio"
    audio_type = item.get("audio", pl.Null)
    if audio_type == pl.Null:
        audio, has_no_path = pl.lit(None, pl.String), pl.lit(False)
    elif isinstance(audio_type, pl.Struct):
        if "path" not in _fields(audio_type, "audio"):
            raise UnsupportedLayout("audio structs have no 'path'")
        whole = pl.element().struct.field("audio")
        audio = whole.struct.field("path").cast(pl.String)
        has_no_path = whole.is_not_null() & (audio.fill_null("") == "")
    elif audio_type.is_nested():
        raise UnsupportedLayout(f"audio is {audio_type}")
    else:
        audio, has_no_path = pl.element().struct.field("audio").cast(pl.String), pl.lit(False)
    text = (
        pl.element().struct.field("text").cast(pl.String)
        if item.get("text", pl.Null) != pl.Null
        else pl.lit(None, pl.String)
    )
    bad_kind = kind.is_in(["text", "audio"]).not_().fill_null(True)
    item_code = (
        pl.when(bad_kind)
        .then(pl.lit(_BAD_KIND, pl.UInt8))
        .when(is_audio & has_no_path)
        .then(pl.lit(_NO_PATH, pl.UInt8))
        .otherwise(pl.lit(_OK, pl.UInt8))
    )
    audio_count = content.list.eval(is_audio.cast(pl.UInt32)).list.sum()
    item_problem = content.list.eval(bad_kind | (is_audio & has_no_path))
    # The first item with a problem, by index, so that its type can be named even when it is null.
    first = pl.when(item_problem.list.any()).then(item_problem.list.arg_max())
    first_code = content.list.eval(item_code).list.get(first, null_on_oob=True)
    many_audio = pl.when(audio_count > 1).then(pl.lit(_MANY_AUDIO, pl.UInt8))
    return {
        # An empty join ("") becomes null in _clean: referring to it twice here would compute it twice.
        "text": content.list.eval(text.filter(is_text)).list.drop_nulls().list.join(" "),
        "audio_path": content.list.eval(audio.filter(is_audio)).list.first(),
        "audio_count": audio_count,
        "code": pl.coalesce(first_code, many_audio, pl.lit(_OK, pl.UInt8)),
        "kind": content.list.get(first, null_on_oob=True).struct.field("type").cast(pl.String),
        "has_problem": item_problem.list.any() | (audio_count > 1),
    }


def _any_problem(frame: pl.LazyFrame, parts: dict[str, dict[str, pl.Expr] | None]) -> bool:
    """One cheap pass: does any turn have a problem? Clean files then skip the costly per-turn search."""
    flags = [
        pl.col(name).list.eval(turn["has_problem"]).list.any().any().alias(name)
        for name, turn in parts.items()
        if turn is not None
    ]
    if not flags:
        return False
    return any(frame.select(flags).collect().row(0))


_STAGED_TURN = pl.Struct(
    {
        "role": pl.String,
        "text": pl.String,
        "audio_path": pl.String,
        "_code": pl.UInt8,
        "_kind": pl.String,
        "_audio_count": pl.UInt32,
    }
)


def _first_problem(name: str) -> pl.Expr:
    """The message of the first turn with a problem, worded as the row converter words it."""
    column = pl.col(name)
    bad = column.list.eval(pl.element().struct.field("_code") != _OK)
    index = pl.when(bad.list.any()).then(bad.list.arg_max())
    turn = column.list.get(index, null_on_oob=True)
    where = pl.format("column '{}': turn {}", pl.lit(name), index + 1)
    kind = turn.struct.field("_kind")
    kind_text = pl.when(kind.is_null()).then(pl.lit("None")).otherwise(pl.format("'{}'", kind))
    code = turn.struct.field("_code")
    return (
        pl.when(code == _BAD_KIND)
        .then(pl.format("{} has a content item of type {}; expected 'text' or 'audio'", where, kind_text))
        .when(code == _NO_PATH)
        .then(pl.format("{} has audio without a path (embedded audio is not supported)", where))
        .when(code == _MANY_AUDIO)
        .then(pl.format("{} has {} audio items; a turn holds at most one", where, turn.struct.field("_audio_count")))
    )


def _clean(name: str) -> pl.Expr:
    turn = pl.element().struct
    text = pl.when(turn.field("text") != "").then(turn.field("text")).alias("text")
    return pl.col(name).list.eval(pl.struct(turn.field("role"), text, turn.field("audio_path")))
