"""What produced a results file: the run record that resume compares and the output's metadata.

The record names everything that changes scores: the protocol, the Scorer and its score-affecting
settings, a hash of the model folder's weights, and the manifest's fingerprint (a hash of the bytes
of every file that defines its rows, its row count and a digest of its key columns: an edited
manifest is refused whatever its size and modification time; a copied or touched one resumes). A resumed run must produce the same record, or it is refused with the
names of what differs. The merged output carries the record plus sdscore's version, the executor
and the start and end times as Parquet metadata (key `sdscore.run`, JSON; see `read_provenance`).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sdscore import storage
from sdscore.corpus.read import row_source_files

#: Parquet key-value metadata key of a results file's provenance (JSON).
METADATA_KEY = "sdscore.run"
#: Files at most this large are hashed whole; larger ones by size, head and tail (a 7B checkpoint
#: is ~15 GB: reading it all on every run would cost more than many windows of scoring).
_WHOLE_FILE = 64 << 20
_EDGE = 16 << 20


def weights_digest(model_dir: str | os.PathLike | None) -> str | None:
    """A digest of a model folder (or file): relative names, sizes and contents (head + tail of big files)."""
    if model_dir is None:
        return None
    root = Path(model_dir)
    if not root.exists():
        return None
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and "export" not in p.parts)
    digest = hashlib.blake2b(digest_size=16)
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(root) if path != root else path.name}|{size}|".encode())
        with open(path, "rb") as handle:
            if size <= _WHOLE_FILE:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            else:
                digest.update(handle.read(_EDGE))
                handle.seek(size - _EDGE)
                digest.update(handle.read(_EDGE))
    return digest.hexdigest()


def manifest_fingerprint(path: str | os.PathLike, keys_digest: str, n_rows: int,
                         local_copy: str | os.PathLike | None = None) -> dict[str, Any]:
    """The manifest's identity for resume: absolute path (a URI as given), a hash of its row files'
    bytes (see content_digest; of `local_copy` for a manifest on an object store), its key columns'
    digest and its row count."""
    text = os.fspath(path)
    local = os.fspath(local_copy) if local_copy is not None else text
    return {
        "path": text if storage.is_remote(text) else os.path.abspath(storage.normalize(text)),
        "content": content_digest(row_source_files(local), Path(local)),
        "keys": keys_digest,
        "rows": n_rows,
    }


def content_digest(files: list[Path], root: Path, chunk_bytes: int = 1 << 20) -> str:
    """blake2b of each file's name (relative to root's folder), size and bytes, streamed in 1-MiB
    chunks (~1 GB/s: a manifest is read whole anyway to stage it)."""
    digest = hashlib.blake2b(digest_size=16)
    base = root if root.is_dir() else root.parent
    buffer = bytearray(chunk_bytes)
    view = memoryview(buffer)
    for file in files:
        name = os.path.relpath(file, base)
        digest.update(f"{name}|{os.path.getsize(file)}|".encode("utf-8", "surrogateescape"))
        with open(file, "rb", buffering=0) as handle:
            while n := handle.readinto(buffer):
                digest.update(view[:n])
    return digest.hexdigest()


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_provenance(record: dict[str, Any], executor: dict[str, Any], started: str) -> dict:
    """The metadata stored in the merged output (ShardedOutput.finish adds rows and failed_rows)."""
    from sdscore import __version__

    return {
        "sdscore_version": __version__,
        **record,
        "executor": executor,
        "host": socket.gethostname(),
        "started": started,
        "finished": now(),
    }


def read_provenance(path: str | os.PathLike) -> dict[str, Any]:
    """The provenance stored in a results Parquet file ({} for other files and formats)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        raw = (pq.read_metadata(path).metadata or {}).get(METADATA_KEY.encode())
    except (pa.ArrowException, OSError):  # CSV/JSONL results, or another tool's file
        return {}
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
