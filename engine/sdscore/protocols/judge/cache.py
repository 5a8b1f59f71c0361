"""Disk cache of validated chat replies, keyed by sha256 of (model, messages, request parameters).

One JSON file per reply under ``<dir>/<key[:2]>/<key>.json``, written to a temp file in the same
folder and renamed, so a reader never sees half a file and concurrent writers of one key are safe.
Entries hold the reply text and its token usage only: never request headers, so never the API key.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from sdscore.atomic_write import write_json


def request_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    """Hex sha256 of the canonical JSON of (model, messages, params): the same request, the same key."""
    canonical = json.dumps(
        {"model": model, "messages": messages, "params": params},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ReplyCache:
    """A folder of cached replies; unreadable entries count as misses and are overwritten."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"ReplyCache({str(self.directory)!r})"

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached entry for key, or None."""
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return entry if isinstance(entry, dict) else None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store entry under key atomically."""
        target = self._path(key)
        write_json(target, entry, indent=None, ensure_ascii=False, sort_keys=True)
