"""The results file of `sdscore score judge`: its columns, the settings it was scored with, and the
check of a fusion rule (the one scoring fuses C/VQ/P with, read back by the evaluation)."""

from __future__ import annotations

import os
from typing import Any

import polars as pl

from sdscore.metrics.fusion import FUSION_RULES
from sdscore.protocols.judge.interface import DIMENSIONS
from sdscore.runtime.provenance import read_provenance

LABEL_COLUMNS = (*DIMENSIONS, "overall")
PRED_COLUMNS = tuple(f"{name}_pred" for name in LABEL_COLUMNS)
RESULT_SCHEMA = pl.Schema(
    {
        "item_id": pl.String,
        **dict.fromkeys(PRED_COLUMNS, pl.String),
        "reasoning": pl.String,
        "cost": pl.Float64,
        "error": pl.String,
    }
)
#: an LLM judge's results also keep, on a row whose reply never parsed, the last reply's text
RAW_REPLY = "raw_reply"


def check_fusion(fusion: str) -> None:
    """ValueError naming the known rules when `fusion` is not one of them."""
    if fusion not in FUSION_RULES:
        raise ValueError(f"unknown fusion rule {fusion!r}; expected one of {list(FUSION_RULES)}")


def results_settings(path: str | os.PathLike) -> dict[str, Any]:
    """The settings a results file was scored with (its run provenance; {} for files written otherwise)."""
    settings = read_provenance(path).get("settings")
    return settings if isinstance(settings, dict) else {}
