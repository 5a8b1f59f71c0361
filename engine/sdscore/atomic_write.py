"""Atomic file writes: a temp file in the target's folder, then a rename over the target.

Readers (and a crashed run's resume) never see half a file; on failure the temp file is removed.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike, *, durable: bool = False) -> Iterator[Path]:
    """Yield a temp path beside ``path``; when the block succeeds it replaces ``path``.

    ``durable`` fsyncs the file before the rename (for outputs a long run must not lose).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{target.name[:40]}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    temp = Path(temp_name)
    try:
        yield temp
        if durable:
            with open(temp, "rb+") as written:
                os.fsync(written.fileno())
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 text atomically; returns the path."""
    with atomic_path(path) as temp:
        temp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike, data, *, indent: int | None = 2, **dump_options) -> Path:
    """Write JSON atomically (NaN refused unless allow_nan=True is passed); returns the path."""
    dump_options.setdefault("allow_nan", False)
    return write_text(path, json.dumps(data, indent=indent, **dump_options) + "\n")


def _umask() -> int:
    """The process umask (read by setting and restoring it: there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
