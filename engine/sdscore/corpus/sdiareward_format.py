"""SDiaReward preference pairs ({"chosen": [turn], "rejected": [turn], ...}) → REWARD_PAIRS rows.

A turn is {"role", "content": [{"type": "text", "text"} | {"type": "audio", "audio": path}]}; ours is
{role, text, audio_path}: texts are joined with a space, a turn may hold one audio item at most.
Columnar inputs go through the expression converter (sdiareward_arrow); what it cannot take goes
through the row converter here, in batches, so a large file never sits in memory as Python objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from sdscore.corpus.raw_table import PARSE_ERROR, RawTable, RowLocator, data_row_labels
from sdscore.corpus.row_locations import jsonl_row_locator
from sdscore.corpus.schemas import CRITERIA
from sdscore.corpus.sdiareward_arrow import UnsupportedLayout, convert_pairs

_ARROW_TURN = pa.struct([("role", pa.string()), ("text", pa.string()), ("audio_path", pa.string())])
#: What the row converter produces; margin stays text here and is typed by validation, as for columns.
CONVERTED_ARROW_SCHEMA = pa.schema(
    [
        ("pair_id", pa.string()),
        ("criterion", pa.string()),
        ("subset", pa.string()),
        ("category", pa.string()),
        ("source", pa.string()),
        ("chosen", pa.list_(_ARROW_TURN)),
        ("rejected", pa.list_(_ARROW_TURN)),
        ("margin", pa.string()),
        (PARSE_ERROR, pa.string()),
    ]
)

BATCH_ROWS = 50_000


@dataclass(frozen=True)
class UnparsedRow:
    """A row that is not even JSON; it becomes a row with only its id and this reason."""

    reason: str


def is_sdiareward_row(row: Any) -> bool:
    """True if row looks like SDiaReward's: chosen/rejected turns that carry a "content" field."""
    if not isinstance(row, dict):
        return False
    for key in ("chosen", "rejected"):
        turns = row.get(key)
        if isinstance(turns, list) and any(isinstance(t, dict) and "content" in t for t in turns):
            return True
    return False


def is_sdiareward_arrow_schema(schema: Any) -> bool:
    """True if a pyarrow schema's chosen column is a list of structs with a "content" field."""
    if "chosen" not in schema.names:
        return False
    chosen = schema.field("chosen").type
    if not (pa.types.is_list(chosen) or pa.types.is_large_list(chosen)):
        return False
    turn = chosen.value_type
    return pa.types.is_struct(turn) and turn.get_field_index("content") >= 0


def pairs_frame(rows: Iterable[Any], *, id_prefix: str = "") -> pl.DataFrame:
    """Convert SDiaReward rows (dicts, or UnparsedRow) a batch at a time; ids default to prefix + row number."""
    batches = []
    columns: dict[str, list] = {name: [] for name in CONVERTED_ARROW_SCHEMA.names}
    for index, row in enumerate(rows):
        for name, value in convert_pair(row, f"{id_prefix}{index}").items():
            columns[name].append(value)
        if len(columns[PARSE_ERROR]) >= BATCH_ROWS:
            batches.append(pa.table(columns, schema=CONVERTED_ARROW_SCHEMA))
            columns = {name: [] for name in CONVERTED_ARROW_SCHEMA.names}
    batches.append(pa.table(columns, schema=CONVERTED_ARROW_SCHEMA))
    return pl.from_arrow(pa.concat_tables(batches))


def convert_pair(row: Any, default_id: str) -> dict[str, Any]:
    """One SDiaReward row → REWARD_PAIRS values; the first problem of each turn list goes to _parse_error."""
    out: dict[str, Any] = dict.fromkeys(CONVERTED_ARROW_SCHEMA.names)
    if isinstance(row, UnparsedRow):
        out["pair_id"], out[PARSE_ERROR] = default_id, row.reason
        return out
    if not isinstance(row, dict):
        out["pair_id"] = default_id
        out[PARSE_ERROR] = f"row is {type(row).__name__}, expected an object with chosen and rejected"
        return out
    given_id = row.get("pair_id", row.get("id"))
    out["pair_id"] = default_id if given_id is None else str(given_id)
    for name in ("subset", "category", "source", "margin"):
        out[name] = _text(row.get(name))
    out["criterion"] = _text(row.get("criterion")) or _criterion_of(out["subset"], out["category"])
    problems: list[str] = []
    for name in ("chosen", "rejected"):
        out[name] = _turns(row.get(name), name, problems)
    out[PARSE_ERROR] = "; ".join(problems) or None
    return out


def _criterion_of(subset: str | None, category: str | None) -> str:
    """SDiaReward's colloquial subset is judged on colloquialness; every other pair on modality."""
    said = f"{subset or ''} {category or ''}".lower()
    return CRITERIA[1] if "colloquial" in said else CRITERIA[0]


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _turns(value: Any, column: str, problems: list[str]) -> list[dict] | None:
    """Convert a turn list; on the first turn with a problem, record it and return None."""
    if value is None:
        return None
    if not isinstance(value, list):
        problems.append(f"column '{column}': is {type(value).__name__}, expected a list of turns")
        return None
    turns = []
    for number, turn in enumerate(value, start=1):
        converted, problem = _turn(turn)
        if problem:
            problems.append(f"column '{column}': turn {number} {problem}")
            return None
        turns.append(converted)
    return turns


def _turn(turn: Any) -> tuple[dict | None, str | None]:
    """One turn → ({role, text, audio_path}, None), or (None, what is wrong with it)."""
    if not isinstance(turn, dict):
        return None, f"is {type(turn).__name__}, expected an object with role and content"
    content = turn.get("content")
    items = [content] if isinstance(content, (str, dict)) else content or []
    if not isinstance(items, list):
        return None, f"has content of type {type(content).__name__}, expected a list"
    texts, audios = [], []
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else "text" if isinstance(item, str) else None
        if kind == "text":
            text = item if isinstance(item, str) else item.get("text")
            if text is not None:
                texts.append(str(text))
        elif kind == "audio":
            audio = item.get("audio")
            if isinstance(audio, dict):
                if not audio.get("path"):
                    return None, "has audio without a path (embedded audio is not supported)"
                audio = audio["path"]
            audios.append(None if audio is None else str(audio))
        else:
            return None, f"has a content item of type {kind!r}; expected 'text' or 'audio'"
    if len(audios) > 1:
        return None, f"has {len(audios)} audio items; a turn holds at most one"
    role = turn.get("role")
    converted = {
        "role": None if role is None else str(role),
        "text": " ".join(texts) or None,
        "audio_path": audios[0] if audios else None,
    }
    return converted, None


def jsonl_rows(path: str) -> Iterator[Any]:
    """The rows of a JSONL file (blank lines skipped); a line that is not JSON becomes an UnparsedRow."""
    with open(path, "rb") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as error:
                yield UnparsedRow(f"not valid JSON ({error.msg} at column {error.colno})")


def columnar_pairs(frame: pl.LazyFrame, id_prefix: str = "") -> pl.LazyFrame | None:
    """The expression converter's result, or None when the layout needs the row converter."""
    try:
        return convert_pairs(frame, id_prefix)
    except UnsupportedLayout:
        return None


def _table(frame: pl.LazyFrame | pl.DataFrame, source: str, base_dir: str, locate: RowLocator) -> RawTable:
    return RawTable(frame.lazy(), source, base_dir, locate, "reward", "SDiaReward")


def read_sdiareward_jsonl(path: str, source: str, base_dir: str) -> RawTable:
    """Parse with pyarrow's JSON reader and convert by columns; mixed layouts stream through the rows."""
    import pyarrow.json as pa_json

    locate = jsonl_row_locator(path)
    try:
        converted = columnar_pairs(pl.from_arrow(pa_json.read_json(path)).lazy())
    except pa.ArrowInvalid:  # types differ between rows, or a line is not JSON
        converted = None
    if converted is not None:
        return _table(converted, source, base_dir, locate)
    return _table(pairs_frame(jsonl_rows(path)), source, base_dir, locate)


def read_sdiareward_rows(rows: list[Any], source: str, base_dir: str) -> RawTable:
    """Convert SDiaReward rows already in memory (a JSON array)."""
    return _table(pairs_frame(rows), source, base_dir, data_row_labels)


def read_sdiareward_parquet(path: str, source: str, base_dir: str) -> RawTable:
    """Convert a Parquet file lazily by columns, or batch by batch through the rows for odd layouts."""
    import pyarrow.parquet as pq

    converted = columnar_pairs(pl.scan_parquet(path))
    if converted is not None:
        return _table(converted, source, base_dir, data_row_labels)
    batches = pq.ParquetFile(path).iter_batches(batch_size=10_000)
    return read_sdiareward_batches(batches, source, base_dir)


def read_sdiareward_batches(batches: Iterable[Any], source: str, base_dir: str) -> RawTable:
    """Convert SDiaReward rows from pyarrow record batches through the row converter."""
    rows = (row for batch in batches for row in batch.to_pylist())
    return _table(pairs_frame(rows), source, base_dir, data_row_labels)
