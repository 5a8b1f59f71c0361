"""Manifests as polars frames: schemas, readers of each format, row-numbered validation, writing.

Every entry point takes a ManifestSpec (a protocol package's spec.SPEC), or for read_manifest a
sequence of candidate specs to infer from; sdscore.read_manifest and friends take a protocol's name."""

from sdscore.corpus.audio_paths import resolve_audio_paths
from sdscore.corpus.referenced_audio import audio_paths
from sdscore.corpus.read import infer_spec, load_table, read_manifest
from sdscore.corpus.schemas import (
    BATTLES,
    CONSISTENCY_INSTANCES,
    JUDGE_ITEMS,
    NATURALNESS_ITEMS,
    REWARD_PAIRS,
    TURN,
    ManifestSpec,
    make_spec,
)
from sdscore.corpus.validate import ERROR_COLUMN, validate_manifest
from sdscore.corpus.write import write_manifest

__all__ = [
    "BATTLES",
    "CONSISTENCY_INSTANCES",
    "ERROR_COLUMN",
    "JUDGE_ITEMS",
    "NATURALNESS_ITEMS",
    "REWARD_PAIRS",
    "TURN",
    "ManifestSpec",
    "audio_paths",
    "infer_spec",
    "load_table",
    "make_spec",
    "read_manifest",
    "resolve_audio_paths",
    "validate_manifest",
    "write_manifest",
]
