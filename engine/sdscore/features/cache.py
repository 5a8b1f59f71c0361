"""One content-hash cache for everything sdscore computes once and reads back many times.

Blueprint feature rows, speaker embeddings and LLM judge replies are all expensive to compute and
fully determined by (content, settings). Each is stored under a key derived from the two digests,
so the same audio under another path is a hit and any change of settings (extractor options,
embedder weights, judge model or parameters) is a miss; nothing ever needs invalidating by hand.
Audio on an object store is keyed by its URI and version instead (`file_digest`): hashing its bytes
would mean downloading it twice.

Layout: ``<root>/<namespace>/<key[:2]>/<key>.json`` (JSON objects) or ``.npy`` (float32 arrays).
Every write goes to a temporary file in the entry's folder and is renamed over the entry
(``sdscore.atomic_write.atomic_path``), so several processes or Ray actors writing one key at once
are safe and readers see a whole entry or none. An unreadable or corrupt entry is a miss and the
next put overwrites it. An optional in-memory layer serves repeated reads without touching disk.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sdscore import storage
from sdscore.atomic_write import atomic_path
from sdscore.errors import AudioError

_CHUNK = 1 << 20  # hash files in 1 MiB reads
_DIGEST_SIZE = 16  # blake2b-128: 32 hex characters
_KEY = re.compile(r"[A-Za-z0-9_-]+")


def hash_file(path: str | os.PathLike) -> str:
    """Blake2b-128 hex digest of a file's bytes, read in 1 MiB chunks (OSError if unreadable).

    Only a regular file is read: a FIFO or a device (/dev/zero) would never end, so it is an
    OSError ("not a regular file"); the file is opened non-blocking, so even a FIFO with no writer
    is refused at once."""
    digest = hashlib.blake2b(digest_size=_DIGEST_SIZE)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_digest(path: str | os.PathLike) -> str:
    """The digest a file's cache entries are keyed by: the hash of its bytes (hash_file) for a local
    path or file:// URI; for an object on a store (s3://, gs://) "o" + a digest of its URI, ETag and
    size (or mtime when the store gives no ETag) from one HEAD request, so a miss downloads the
    object once (to decode it), not twice. The same bytes under two URIs are two entries. A clip
    embedded in a dataset file (`embedded://` reference) is keyed by its bytes, as a file. OSError
    (sdscore.storage.StorageError for objects) when it cannot be read."""
    from sdscore.audio.embedded_clips import embedded_digest, is_embedded

    text = os.fspath(path)
    if is_embedded(text):  # the clip's bytes: the same entries as a file holding them
        try:
            return embedded_digest(text, _DIGEST_SIZE)
        except AudioError as error:
            raise OSError(errno.ENOENT, str(error)) from None
    if storage.is_remote(text):
        token = storage.stat(text).token()
        return "o" + hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=_DIGEST_SIZE).hexdigest()
    return hash_file(storage.normalize(text))


def hash_samples(samples: np.ndarray, sample_rate: int) -> str:
    """Digest of decoded audio: float32 samples [T] and their rate ("s" + blake2b-128 hex).

    The "s" prefix keeps it apart from file digests of the same bytes.
    """
    digest = hashlib.blake2b(np.ascontiguousarray(samples, dtype=np.float32).tobytes(), digest_size=_DIGEST_SIZE)
    digest.update(f"sr={sample_rate}".encode())
    return "s" + digest.hexdigest()


def hash_settings(obj: Any) -> str:
    """Blake2b-128 hex digest of obj's canonical JSON (sorted keys, compact; non-JSON values as str).

    Equal settings give equal digests whatever the dict order, so it suits cache keys of requests
    and extractor options alike.
    """
    canonical = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.blake2b(canonical.encode("utf-8"), digest_size=_DIGEST_SIZE).hexdigest()


def combine_digests(digests: Iterable[str]) -> str:
    """Short (16 hex) digest of several digests in order, e.g. of a model's weight files."""
    return hashlib.blake2b("|".join(digests).encode(), digest_size=8).hexdigest()


def cache_key(content_digest: str, settings_digest: str) -> str:
    """The key of one content under one set of settings (blake2b-128 hex)."""
    return hashlib.blake2b(f"{content_digest}:{settings_digest}".encode(), digest_size=_DIGEST_SIZE).hexdigest()


class ContentCache:
    """Entries by key within one namespace: JSON objects or float32 arrays, on disk and/or in memory.

    root=None keeps entries in memory only. ``memory=False`` skips the in-memory layer, so every
    read goes to disk (for caches other processes fill meanwhile, or that would grow large).
    """

    def __init__(self, root: str | os.PathLike | None, namespace: str, *, memory: bool = True):
        if not isinstance(namespace, str) or not namespace or any(c in namespace for c in "/\\"):
            raise ValueError(f"namespace must be a non-empty name without slashes, got {namespace!r}")
        if root is None and not memory:
            raise ValueError("a cache without a root folder must keep entries in memory")
        self.namespace = namespace
        self.folder = None if root is None else Path(root) / namespace
        self._memory: dict[tuple[str, str], Any] | None = {} if memory else None

    def __repr__(self) -> str:
        where = "memory" if self.folder is None else str(self.folder)
        return f"ContentCache({where!r})"

    def __len__(self) -> int:
        """Entries held in memory."""
        return len(self._memory or {})

    def path(self, key: str, suffix: str) -> Path | None:
        """Where key's entry lives on disk (None when memory only); ValueError for a key unfit as a file name."""
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(f"cache key must be letters, digits, '-' or '_', got {key!r}")
        return None if self.folder is None else self.folder / key[:2] / f"{key}.{suffix}"

    def _get(self, key: str, suffix: str, load) -> Any:
        path = self.path(key, suffix)
        if self._memory is not None and (key, suffix) in self._memory:
            return self._memory[(key, suffix)]
        if path is None:
            return None
        try:
            value = load(path)
        except (OSError, ValueError, EOFError):
            return None  # missing, truncated or foreign: a miss, overwritten by the next put
        if value is not None and self._memory is not None:
            self._memory[(key, suffix)] = value
        return value

    def get_json(self, key: str) -> dict[str, Any] | None:
        """The JSON object stored under key, or None (callers should not mutate it)."""
        return self._get(key, "json", _load_json)

    def put_json(self, key: str, value: Mapping[str, Any]) -> None:
        """Store a JSON object under key; the disk write is atomic (NaN is kept: Python reads it back)."""
        text = json.dumps(dict(value), ensure_ascii=False, sort_keys=True)
        path = self.path(key, "json")
        if path is not None:
            with atomic_path(path) as temp:
                temp.write_text(text + "\n", encoding="utf-8")
        if self._memory is not None:
            self._memory[(key, "json")] = json.loads(text)

    def get_array(self, key: str) -> np.ndarray | None:
        """The float32 array stored under key, or None."""
        return self._get(key, "npy", _load_array)

    def put_array(self, key: str, value: np.ndarray) -> None:
        """Store an array under key as float32 ``.npy``; the disk write is atomic."""
        value = np.array(value, dtype=np.float32)  # a copy: later changes to the caller's array stay out
        path = self.path(key, "npy")
        if path is not None:
            with atomic_path(path) as temp, open(temp, "wb") as out:
                np.save(out, value, allow_pickle=False)
        if self._memory is not None:
            self._memory[(key, "npy")] = value

    def get_arrays(self, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored arrays among keys, by key (misses left out)."""
        found = {}
        for key in keys:
            value = self.get_array(key)
            if value is not None:
                found[key] = value
        return found

    def put_arrays(self, entries: Mapping[str, np.ndarray]) -> None:
        """Store several arrays (see put_array)."""
        for key, value in entries.items():
            self.put_array(key, value)


def _load_json(path: Path) -> dict[str, Any] | None:
    value = json.loads(path.read_text(encoding="utf-8"))
    return value if isinstance(value, dict) else None


def _load_array(path: Path) -> np.ndarray | None:
    value = np.load(path, allow_pickle=False)
    return value if isinstance(value, np.ndarray) and value.dtype == np.float32 else None
