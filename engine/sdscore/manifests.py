"""Manifests by protocol name: sdscore.corpus's entry points for callers that hold a registered
protocol's name ("reward", "judge", ... or a plugin's) rather than its ManifestSpec.

This module sits above the protocols, beside the CLI: it asks the registry (protocols/registry.py,
the only protocol table) for a protocol's spec and hands that spec down; sdscore.corpus itself takes
ManifestSpec values only. Each function also takes a ManifestSpec as it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal, TypeVar

import polars as pl

from sdscore import corpus
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.validate import DEFAULT_MAX_ERRORS
from sdscore.errors import ManifestError
from sdscore.protocols.registry import PROTOCOLS

Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def manifest_specs() -> dict[str, ManifestSpec]:
    """Every registered protocol's ManifestSpec, by name, in the registry's order."""
    return {name: entry.manifest_spec() for name, entry in PROTOCOLS.items()}


def manifest_spec(protocol: str | ManifestSpec, source: str = "<frame>") -> ManifestSpec:
    """A registered protocol's ManifestSpec (a spec is returned as it is); a ManifestError naming
    source and the registered protocols when there is none."""
    if isinstance(protocol, ManifestSpec):
        return protocol
    entry = PROTOCOLS.get(protocol)
    if entry is None:
        raise ManifestError(f"{source}: unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    return entry.manifest_spec()


def read_manifest(
    path: str | os.PathLike,
    protocol: str | ManifestSpec | None = None,
    *,
    resolve_audio: bool = True,
    lazy: bool = False,
    errors: Literal["raise", "collect"] = "raise",
    max_errors: int = DEFAULT_MAX_ERRORS,
    lhotse_group_by: str | None = None,
) -> pl.DataFrame | pl.LazyFrame:
    """sdscore.corpus.read_manifest with protocol a registered protocol's name, a ManifestSpec, or
    None: the registered protocol the file's format belongs to, else the one its columns fit.
    lhotse_group_by: "speaker" (None: the same) or "recording", a Lhotse manifest's instances
    (lhotse_format); refused for any other manifest."""
    specs = tuple(manifest_specs().values()) if protocol is None else manifest_spec(protocol, os.fspath(path))
    return corpus.read_manifest(path, specs, resolve_audio=resolve_audio, lazy=lazy, errors=errors,
                                max_errors=max_errors, lhotse_group_by=lhotse_group_by)


def validate_manifest(frame: Frame, protocol: str | ManifestSpec, source: str = "<frame>", **options) -> Frame:
    """sdscore.corpus.validate_manifest with a registered protocol's name (or a ManifestSpec)."""
    return corpus.validate_manifest(frame, manifest_spec(protocol, source), source, **options)


def resolve_audio_paths(frame: Frame, protocol: str | ManifestSpec, base_dir: str) -> Frame:
    """sdscore.corpus.resolve_audio_paths with a registered protocol's name (or a ManifestSpec)."""
    return corpus.resolve_audio_paths(frame, manifest_spec(protocol), base_dir)


def audio_paths(frame: pl.DataFrame, protocol: str | ManifestSpec) -> list[str]:
    """sdscore.corpus.audio_paths with a registered protocol's name (or a ManifestSpec)."""
    return corpus.audio_paths(frame, manifest_spec(protocol))


def infer_protocol(columns: Iterable[str], source: str = "<frame>") -> str:
    """The one registered protocol whose required columns (its id aside, which can be filled) are all present."""
    return corpus.infer_spec(list(columns), tuple(manifest_specs().values()), source).name
