"""TRACE's HCoT human labels (a JSON array of pairs with a nested "label") → JUDGE_ITEMS rows.

item_id comes from "index", dataset from the file's stem (speakbench, s2sarena), the four labels
from "label"; integer labels (1, 2) become the strings the schema uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from sdscore.corpus.raw_table import PARSE_ERROR, RawTable, RowLocator, data_row_labels
from sdscore.corpus.schemas import JUDGE_ITEMS

CONVERTED_SCHEMA = pl.Schema({**JUDGE_ITEMS, PARSE_ERROR: pl.String})

LABEL_FIELDS = ("content", "voice_quality", "paralinguistics", "overall")
_COPIED = ("instruction_id", "instruction_text", "instruction_path", "model_a", "model_b", "audio1_path", "audio2_path")


def is_hcot_row(row: Any) -> bool:
    """True if row looks like an HCoT item: two response paths, and labels or an index."""
    return isinstance(row, dict) and "audio1_path" in row and "audio2_path" in row


def judge_items_frame(rows: list[Any], dataset: str) -> pl.DataFrame:
    """Convert HCoT rows into a JUDGE_ITEMS frame plus _parse_error; item_id defaults to the row number."""
    columns: dict[str, list] = {name: [] for name in CONVERTED_SCHEMA}
    for index, row in enumerate(rows):
        for name, value in convert_item(row, index, dataset).items():
            columns[name].append(value)
    return pl.DataFrame(columns, schema=CONVERTED_SCHEMA)


def convert_item(row: Any, index: int, dataset: str) -> dict[str, Any]:
    """One HCoT row → a dict of JUDGE_ITEMS values; problems go to _parse_error, not raised."""
    out: dict[str, Any] = dict.fromkeys(CONVERTED_SCHEMA)
    out["dataset"] = dataset
    if not isinstance(row, dict):
        out["item_id"] = str(index)
        out[PARSE_ERROR] = f"row is {type(row).__name__}, expected an object"
        return out
    given_id = row.get("item_id", row.get("index"))
    out["item_id"] = str(index) if given_id is None else str(given_id)
    for name in _COPIED:
        out[name] = None if row.get(name) is None else str(row[name])
    labels = row.get("label", {})
    if not isinstance(labels, dict):
        out[PARSE_ERROR] = f"column 'label': is {type(labels).__name__}, expected an object with " + ", ".join(
            LABEL_FIELDS
        )
        return out
    for name in LABEL_FIELDS:
        value = labels.get(name, row.get(name))
        out[name] = None if value is None else str(value)
    return out


def read_hcot_rows(
    rows: list[Any], source: str, base_dir: str, dataset: str, locate_rows: RowLocator = data_row_labels
) -> RawTable:
    """Wrap converted HCoT rows as a judge table; dataset is usually the file's stem."""
    frame = judge_items_frame(rows, dataset).lazy()
    return RawTable(frame, source, base_dir, locate_rows, "judge", "HCoT")


def dataset_name(path: str) -> str:
    """The dataset an HCoT file holds, from its name: speakbench.json → "speakbench"."""
    return Path(path).name.split(".")[0]
