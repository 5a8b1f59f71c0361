"""Manifests on an object store (s3://, gs://): one local copy in the cache, read by the same readers.

A manifest object is copied once to `$SDSCORE_CACHE_DIR/remote-manifests/<version digest>/`
(default `~/.cache/sdscore`; the digest covers the URI, ETag and size, so a changed object is
copied again and an unchanged one never is, e.g. on `--resume`). A 'folder' URI (a prefix: a Kaldi
data directory, a HF dataset folder) brings its manifest files (tables, .json/.arrow/.parquet/
.jsonl files; audio stays on the store); a Lhotse SupervisionSet brings the RecordingSet beside
it. The table keeps the URI as its source, and its relative audio paths resolve under the URI's
prefix, so audio is read from the store where it lies, never copied with the manifest.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from sdscore import storage
from sdscore.corpus.embedded_audio import cache_dir
from sdscore.errors import ManifestError

#: Files of a manifest 'folder' worth copying: Kaldi tables and dataset files (not audio).
_KALDI_TABLES = ("wav.scp", "segments", "text", "utt2spk")
_DATASET_SUFFIXES = (".json", ".arrow", ".parquet", ".jsonl", ".ndjson")


@dataclass(frozen=True)
class RemoteCopy:
    """A manifest URI and its local copy: `local` is the file or folder to read; `local_root`
    mirrors `uri_root` (the folder of the object, or the folder URI itself)."""

    uri: str
    local: str
    local_root: str
    uri_root: str

    def to_uri(self, local_path: str) -> str:
        """The URI of a path inside the local copy (other paths as given)."""
        relative = os.path.relpath(os.path.abspath(local_path), self.local_root)
        if relative == ".":
            return self.uri_root
        if relative.startswith(".."):
            return local_path
        return storage.join(self.uri_root, relative.replace(os.sep, "/"))

    def rename(self, text: str) -> str:
        """Text (an error message) with the local copy's folder named by its URI instead."""
        return text.replace(self.local_root.rstrip(os.sep) + os.sep, self.uri_root.rstrip("/") + "/").replace(
            self.local_root, self.uri_root)


def fetch_manifest(uri: str) -> RemoteCopy:
    """The local copy of a manifest object or folder URI, made (or reused) now; ManifestError naming
    the URI when it is missing, denied or cannot be read whole."""
    try:
        if storage.exists(uri):
            return _fetch_object(uri)
        files = {name: info for name, info in storage.list_files(uri).items() if _is_manifest_file(name)}
    except storage.StorageError as error:
        raise ManifestError(str(error)) from None
    if not files:
        raise ManifestError(f"{uri}: no such file or folder")
    try:
        return _fetch_folder(uri, files)
    except storage.StorageError as error:
        raise ManifestError(str(error)) from None


def _is_manifest_file(name: str) -> bool:
    base = posixpath.basename(name)
    return (name in _KALDI_TABLES) or base.lower().endswith(_DATASET_SUFFIXES)


def _digest(*tokens: str) -> str:
    return hashlib.blake2b("\n".join(tokens).encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def _copy(info: storage.ObjectInfo, target: Path) -> None:
    """Download an object unless the cache holds it already (same size: the folder is per version)."""
    if target.is_file() and target.stat().st_size == info.size:
        return
    storage.download(info.uri, target, info)


def _fetch_object(uri: str) -> RemoteCopy:
    info = storage.stat(uri)
    objects = [info]
    name = storage.basename(uri)
    if "supervisions" in name:  # a Lhotse SupervisionSet reads the RecordingSet beside it
        recordings = storage.join(storage.parent(uri), name.replace("supervisions", "recordings"))
        if storage.exists(recordings):
            objects.append(storage.stat(recordings))
    root = cache_dir("remote-manifests") / _digest(*(item.token() for item in objects))
    for item in objects:
        _copy(item, root / storage.basename(item.uri))
    return RemoteCopy(uri, str(root / name), str(root), storage.parent(uri))


def _fetch_folder(uri: str, files: dict[str, storage.ObjectInfo]) -> RemoteCopy:
    folder = uri.rstrip("/")
    # a listing gives no ETags: a stat per file would cost a request each; name, size and mtime
    # identify a version of a folder of manifest files well enough
    root = cache_dir("remote-manifests") / _digest(folder, *(f"{name}|{info.size}|{info.mtime_ns}"
                                                            for name, info in sorted(files.items())))
    for name, info in files.items():
        if ".." in name.split("/") or name.startswith("/"):
            raise ManifestError(f"{folder}/{name}: an object name with '..' or a leading '/' is refused")
        _copy(info, root.joinpath(*name.split("/")))
    return RemoteCopy(uri, str(root), str(root), folder)
