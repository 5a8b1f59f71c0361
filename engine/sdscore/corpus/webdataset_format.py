"""WebDataset tar shards → naturalness items: one item per sample (the members sharing a key).

A member `dir/key.ext` belongs to sample `dir/key` with field `ext` (WebDataset's own split: the
key ends at the first dot of the file name). A sample holds audio and, optionally, a JSON object:
- audio: `wav`, `flac`, `mp3`, `ogg` or `opus` is the answer; `answer.<a>`, `question.<a>` and
  `dialogue.<a>` name the answer, question (`audio_path`) and two-channel dialogue explicitly;
- `json`: its keys that are naturalness columns are copied (`transcript_answer`, `system`, ...),
  and `text` / `transcript` fill `transcript_answer`; other keys are kept as extra columns.
The shard is streamed once with the tarfile module. Audio members are written to a cache folder
(``$SDSCORE_CACHE_DIR/webdataset/<shard digest>/``, default ``~/.cache/sdscore``), because the
protocols load audio by path and cache features by file content; a file already there with the
member's size is reused. A sample without audio, with unreadable JSON or an unsafe member name
is that row's error; a key that appears twice is a duplicate item_id (the validator's error).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
from pathlib import Path, PurePosixPath

import polars as pl

from sdscore.atomic_write import atomic_path
from sdscore.corpus.embedded_audio import CACHE_ENV, cache_dir  # noqa: F401 - CACHE_ENV: this reader's setting too
from sdscore.corpus.raw_table import PARSE_ERROR, RawTable, data_row_labels
from sdscore.corpus.schemas import NATURALNESS_ITEMS
from sdscore.errors import ManifestError

AUDIO_EXTENSIONS = ("wav", "flac", "mp3", "ogg", "opus")
#: audio field prefix → naturalness column
AUDIO_ROLES = {"": "answer_audio_path", "answer": "answer_audio_path", "question": "audio_path",
               "dialogue": "dialogue_path"}
TEXT_FIELDS = ("text", "transcript")
_SPLIT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")


def cache_root() -> Path:
    """Where extracted members go: $SDSCORE_CACHE_DIR/webdataset, else ~/.cache/sdscore/webdataset."""
    return cache_dir("webdataset")


def shard_cache_dir(path: str) -> Path:
    """The cache folder of one shard: keyed by its absolute path, size and modification time."""
    stat = os.stat(path)
    key = f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}"
    return cache_root() / hashlib.blake2b(key.encode(), digest_size=10).hexdigest()


def _audio_role(field: str) -> str | None:
    """The naturalness column of an audio field ('wav', 'answer.flac', ...), None if not audio."""
    prefix, _, ext = field.rpartition(".")
    if ext.lower() not in AUDIO_EXTENSIONS:
        return None
    return AUDIO_ROLES.get(prefix.lower())


def _safe(key: str) -> bool:
    parts = PurePosixPath(key).parts
    return bool(parts) and not key.startswith("/") and ".." not in parts and "\\" not in key


class _Sample:
    def __init__(self, key: str, member: int) -> None:
        self.key, self.member = key, member
        self.audio: dict[str, str] = {}
        self.meta: dict = {}
        self.problems: list[str] = []


def _extract(tar: tarfile.TarFile, info: tarfile.TarInfo, target: Path) -> None:
    if target.is_file() and target.stat().st_size == info.size:
        return
    handle = tar.extractfile(info)
    if handle is None:
        raise OSError(f"member {info.name!r} is not a regular file")
    with atomic_path(target) as temp, open(temp, "wb") as out:
        while chunk := handle.read(1 << 20):
            out.write(chunk)


def _read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, sample: _Sample, field: str, cache: Path) -> None:
    role = _audio_role(field)
    if role is not None:
        if role in sample.audio:
            sample.problems.append(f"two audio members for {role} ({Path(sample.audio[role]).name}, {field})")
            return
        target = cache / f"{sample.key}.{field}"
        try:
            _extract(tar, info, target)
        except OSError as error:
            sample.problems.append(f"cannot extract {info.name!r} ({error})")
            return
        sample.audio[role] = str(target)
    elif field.lower() == "json":
        handle = tar.extractfile(info)
        try:
            value = json.loads(handle.read() if handle else b"")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            sample.problems.append(f"{info.name}: not valid JSON ({error})")
            return
        if not isinstance(value, dict):
            sample.problems.append(f"{info.name}: holds {type(value).__name__}, expected a JSON object")
            return
        sample.meta = value


def _samples(path: str, source: str, cache: Path) -> list[_Sample]:
    samples: list[_Sample] = []
    try:
        with tarfile.open(path, mode="r|*") as tar:  # streamed: one pass, no index of members
            for number, info in enumerate(tar, start=1):
                if not info.isfile():
                    continue
                key, field = _split(info.name)
                if key is None:
                    continue  # WebDataset skips names without an extension too
                if not samples or samples[-1].key != key:
                    samples.append(_Sample(key, number))
                sample = samples[-1]
                if not _safe(key):
                    sample.problems.append(f"unsafe member name {info.name!r}")
                    continue
                _read_member(tar, info, sample, field, cache)
    except (tarfile.TarError, OSError, EOFError) as error:
        raise ManifestError(f"{source}: not a readable tar shard ({error})") from None
    return samples


def _split(name: str) -> tuple[str | None, str | None]:
    match = _SPLIT.match(name)
    return (match.group(1), match.group(2)) if match else (None, None)


def read_webdataset_shard(path: str, source: str, base_dir: str) -> RawTable:
    """Stream a WebDataset shard into naturalness items, extracting its audio to the cache."""
    cache = shard_cache_dir(path)
    samples = _samples(path, source, cache)
    known = set(NATURALNESS_ITEMS.names())
    extra = list(dict.fromkeys(k for s in samples for k in s.meta if k not in known and k not in TEXT_FIELDS))
    rows: list[dict] = []
    for sample in samples:
        row = {name: sample.meta.get(name) for name in known if name in sample.meta}
        for name in TEXT_FIELDS:
            if sample.meta.get(name) is not None and row.get("transcript_answer") is None:
                row["transcript_answer"] = sample.meta[name]
        row.update({name: sample.meta.get(name) for name in extra})
        row.update(sample.audio)
        row["item_id"] = sample.key
        problems = list(sample.problems)
        if "answer_audio_path" not in sample.audio and not problems:
            problems.append(f"no answer audio (a member {sample.key}.<{'|'.join(AUDIO_EXTENSIONS)}>)")
        row[PARSE_ERROR] = "; ".join(f"sample {sample.key!r} (member {sample.member}): {p}" for p in problems) or None
        rows.append(row)
    names = list(dict.fromkeys(["item_id", *(n for n in NATURALNESS_ITEMS.names() if any(n in r for r in rows)),
                                *extra, PARSE_ERROR]))
    frame = pl.DataFrame([{n: _text(r.get(n)) for n in names} for r in rows],
                         schema={n: pl.String for n in names}) if rows else pl.DataFrame(schema={n: pl.String for n in names})
    return RawTable(frame.lazy(), source, base_dir, data_row_labels, "naturalness", "WebDataset")


def _text(value):
    """Values as text (the validator types them): objects and lists as JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)
