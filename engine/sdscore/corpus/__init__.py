"""Manifests as polars frames: schemas, readers of each format, row-numbered validation, writing."""

from sdscore.corpus.audio_paths import resolve_audio_paths
from sdscore.corpus.referenced_audio import audio_paths
from sdscore.corpus.read import infer_protocol, load_table, read_manifest
from sdscore.corpus.schemas import (
    ALLOWED_VALUES,
    AUDIO_COLUMNS,
    BATTLES,
    CONSISTENCY_INSTANCES,
    ID_COLUMN,
    JUDGE_ITEMS,
    NATURALNESS_ITEMS,
    REQUIRED,
    REWARD_PAIRS,
    SCHEMAS,
    TURN,
    UNIQUE_KEY,
)
from sdscore.corpus.validate import ERROR_COLUMN, validate_manifest
from sdscore.corpus.write import write_manifest

__all__ = [
    "ALLOWED_VALUES",
    "AUDIO_COLUMNS",
    "BATTLES",
    "CONSISTENCY_INSTANCES",
    "ERROR_COLUMN",
    "ID_COLUMN",
    "JUDGE_ITEMS",
    "NATURALNESS_ITEMS",
    "REQUIRED",
    "REWARD_PAIRS",
    "SCHEMAS",
    "TURN",
    "UNIQUE_KEY",
    "audio_paths",
    "infer_protocol",
    "load_table",
    "read_manifest",
    "resolve_audio_paths",
    "validate_manifest",
    "write_manifest",
]
