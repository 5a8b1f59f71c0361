"""Embedding cache keyed by audio content hash, so re-scoring with another method costs nothing.

Keys are hex digests of the audio (file bytes or decoded samples) under a namespace naming the
embedder and its weights. Entries live in memory and, with a folder, on disk as one ``.npy`` per
key: ``<root>/<namespace>/<key[:2]>/<key>.npy``. Writes go to a temporary file in the same
folder, then ``os.replace``, so concurrent readers see a whole entry or none.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from sdscore.atomic_write import atomic_path

_CHUNK = 1 << 20


def hash_file(path: str | os.PathLike) -> str:
    """Blake2b-128 hex digest of a file's bytes (raises OSError if it cannot be read)."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def hash_samples(samples: np.ndarray, sample_rate: int) -> str:
    """Blake2b-128 hex digest of float32 samples [T] and their rate."""
    digest = hashlib.blake2b(np.ascontiguousarray(samples, dtype=np.float32).tobytes(), digest_size=16)
    digest.update(f"sr={sample_rate}".encode())
    return "s" + digest.hexdigest()


def combine_digests(digests: Iterable[str]) -> str:
    """Short (16 hex) digest of several digests, e.g. of a model's files."""
    return hashlib.blake2b("|".join(digests).encode(), digest_size=8).hexdigest()


class EmbeddingCache:
    """Embeddings [D] by key within one namespace; in memory, plus on disk when root is set."""

    def __init__(self, namespace: str, root: str | os.PathLike | None = None):
        if not namespace or any(c in namespace for c in "/\\"):
            raise ValueError(f"namespace must be a non-empty name without slashes, got {namespace!r}")
        self.namespace = namespace
        self.folder = None if root is None else Path(root) / namespace
        self._memory: dict[str, np.ndarray] = {}

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.npy"

    def get_many(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The cached entries among keys (a missing or unreadable file is a miss)."""
        found = {}
        for key in keys:
            if key in self._memory:
                found[key] = self._memory[key]
            elif self.folder is not None:
                try:
                    value = np.load(self._path(key), allow_pickle=False)
                except (OSError, ValueError):
                    continue
                self._memory[key] = value
                found[key] = value
        return found

    def put_many(self, entries: dict[str, np.ndarray]) -> None:
        """Store entries (float32 [D] each); disk writes are atomic."""
        for key, value in entries.items():
            value = np.asarray(value, dtype=np.float32)
            self._memory[key] = value
            if self.folder is None:
                continue
            path = self._path(key)
            with atomic_path(path) as temp, open(temp, "wb") as out:
                np.save(out, value, allow_pickle=False)

    def __len__(self) -> int:
        return len(self._memory)
