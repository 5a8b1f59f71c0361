"""Cut the audio slices a manifest window points at into files, before a Scorer sees the rows.

A manifest may give an audio column X slice columns X_offset / X_duration (sdscore.corpus.
slice_columns; Kaldi `segments` and Lhotse cuts do). Every protocol loads audio by path and caches
features by file content, so the runtime copies each slice (its frames, every channel, at the
file's own rate: nothing is resampled twice) into a float32 WAV in the run's staging folder and
points the row at it; the folder goes when the run ends. A bad slice (past the end, negative,
missing file) is its row's error; the other rows go on.

A Ray actor cuts its slices into a folder of its own in its node's temp folder (`slice_folder`),
named `sdscore-ray-slices-<host tag>-<pid>-<random>` after the host and process that made it
(`owned_folder`) and removed after each window. An actor killed mid-window (SIGKILL, the node's OOM
killer) cannot remove it, so each new actor first removes such leftovers (`remove_orphaned_folders`):
a folder is removed only if its name matches that pattern exactly with this host's tag, the pid in it
is not a live process on this host, it belongs to this user, and it holds nothing but slice files as
`slice_file` / `_cut` name them (no subfolder, no link, no other file). Anything else, a near-miss
name included, is never touched. A pid reused by another process since keeps its folder until that
process ends too (the safe way round). The host tag keeps hosts sharing a folder (NFS, containers
with their own host names sharing /tmp) off each other's folders; two hosts of one host name but
separate pid namespaces sharing one temp folder would not be: give them their own TMPDIR.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from sdscore import storage
from sdscore.audio.slices import write_slice
from sdscore.corpus.schemas import ManifestSpec
from sdscore.corpus.slice_columns import duration_column, offset_column
from sdscore.corpus.validate import ERROR_COLUMN
from sdscore.errors import AudioError
from sdscore.runtime.compute_budget import thread_pool_size

Slice = tuple[str, float | None, float | None]

log = logging.getLogger(__name__)

SLICE_FOLDER_PREFIX = "sdscore-ray-slices-"
# a slice (slice_file) or one being written (_cut: "<slice>.<pid>.<id>.tmp.wav")
_SLICE_NAME = re.compile(r"[0-9a-f]{24}\.wav(\.[0-9]+\.[0-9]+\.tmp\.wav)?")


def slice_file(slice_dir: str, path: str, offset: float | None, duration: float | None) -> str:
    """The staging file of one slice (named by its file, offset and duration)."""
    key = f"{path if storage.scheme(path) else os.path.abspath(path)}|{offset!r}|{duration!r}"
    return os.path.join(slice_dir, hashlib.blake2b(key.encode(), digest_size=12).hexdigest() + ".wav")


def host_tag() -> str:
    """This host's tag in the names of `owned_folder`s: 8 hex digits of its host name's hash."""
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()


def owned_folder(prefix: str, parent: str | os.PathLike | None = None) -> str:
    """A new, empty folder `<prefix><host tag>-<pid>-<random>` in `parent` (default: the system's temp
    folder), named after this host and process so that `remove_orphaned_folders` can tell when its
    owner is gone."""
    return tempfile.mkdtemp(prefix=f"{prefix}{host_tag()}-{os.getpid()}-", dir=parent)


def slice_folder(temp_dir: str | None = None) -> str:
    """A new, empty folder for this process's slices (a Ray actor's) in `temp_dir` (default: the system's
    temp folder)."""
    return owned_folder(SLICE_FOLDER_PREFIX, temp_dir)


def _pid_alive(pid: int) -> bool:
    """Whether `pid` is a live process on this host (another user's counts: PermissionError)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def slice_files(folder: str | os.PathLike) -> list[str] | None:
    """The slice files (`slice_file`, or being written by `_cut`) in `folder`, or None if it holds
    anything else (another file, a folder, a link)."""
    paths = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if not (_SLICE_NAME.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)):
                return None
            paths.append(entry.path)
    return paths


Contents = Callable[[str], "tuple[list[str], list[str]] | None"]


def remove_orphaned_folders(parent: str | os.PathLike, prefix: str, contents: Contents) -> list[str]:
    """Remove the `owned_folder`s of `prefix` in `parent` whose process is gone: the name matches
    exactly (this host's tag, a pid, mkdtemp's 8 characters), that pid is no live process here, the
    folder is this user's, and `contents(folder)` accounts for everything in it, as (files, subfolders
    deepest first) to remove, or None when it holds anything else (then the folder is left). A pid
    reused since keeps its folder until that process ends too. Returns the folders removed; never
    raises: a folder that cannot be read or removed is left, with a warning."""
    pattern = re.compile(re.escape(prefix) + re.escape(host_tag()) + r"-([1-9][0-9]{0,9})-[a-z0-9_]{8}")
    removed = []
    try:
        with os.scandir(parent) as entries:
            candidates = [(e.path, int(m.group(1))) for e in entries
                          if (m := pattern.fullmatch(e.name)) and e.is_dir(follow_symlinks=False)]
    except OSError as error:
        log.warning("%s: cannot list it for orphaned sdscore folders (%s)", parent, error)
        return removed
    for folder, pid in candidates:
        if pid == os.getpid() or _pid_alive(pid):
            continue
        try:
            if os.lstat(folder).st_uid != os.getuid():
                continue
            found = contents(folder)
            if found is None:
                continue
            files, subfolders = found
            for path in files:
                os.remove(path)
            for path in [*subfolders, folder]:
                os.rmdir(path)  # fails, leaving it, if anything appeared in it meanwhile
        except FileNotFoundError:  # another process removed it first
            continue
        except OSError as error:
            log.warning("%s: cannot remove this orphaned sdscore folder (%s)", folder, error)
            continue
        removed.append(folder)
    return removed


def _only_slices(folder: str) -> tuple[list[str], list[str]] | None:
    files = slice_files(folder)
    return None if files is None else (files, [])


def remove_orphaned_slice_folders(temp_dir: str | None = None) -> list[str]:
    """Remove the slice folders (`slice_folder`) in `temp_dir` (default: the system's temp folder) of
    processes that are gone, holding only slice files (`remove_orphaned_folders`)."""
    return remove_orphaned_folders(temp_dir or tempfile.gettempdir(), SLICE_FOLDER_PREFIX, _only_slices)


def _cut(slice_dir: str, item: Slice) -> tuple[str | None, str | None]:
    path, offset, duration = item
    target = slice_file(slice_dir, path, offset, duration)
    if os.path.isfile(target):
        return target, None
    temp = f"{target}.{os.getpid()}.{id(item)}.tmp.wav"
    try:
        write_slice(path, 0.0 if offset is None else offset, duration, temp)
        os.replace(temp, target)
    except AudioError as error:
        return None, str(error)
    except OSError as error:
        return None, f"{path}: cannot write its slice ({error.strerror or error})"
    finally:
        if os.path.exists(temp):
            os.remove(temp)
    return target, None


def _is_slice(offset, duration) -> bool:
    return duration is not None or (offset is not None and offset != 0.0)


def cut_slices(frame: pl.DataFrame, spec: ManifestSpec, slice_dir: str, num_threads: int | None = None) -> pl.DataFrame:
    """Point the audio columns that have slice columns at files holding those slices; a slice that
    cannot be cut sets its row's `error`. Columns without slice columns are untouched. The slices
    are cut on `num_threads` threads (default: the compute budget's cores())."""
    columns = [c for c in spec.audio_columns
               if c in frame.columns and (offset_column(c) in frame.columns or duration_column(c) in frame.columns)]
    if not columns or frame.height == 0:
        return frame
    errors = frame[ERROR_COLUMN].to_list() if ERROR_COLUMN in frame.columns else [None] * frame.height
    wanted: dict[Slice, None] = {}
    plans: dict[str, list] = {}
    for column in columns:
        paths = frame[column].to_list()
        offsets = _companion(frame, offset_column(column))
        durations = _companion(frame, duration_column(column))
        plan = []
        for row, (path, offset, duration) in enumerate(zip(paths, offsets, durations)):
            if errors[row] is not None or path is None:
                plan.append(None)
                continue
            if isinstance(path, list):
                offset = offset if offset is not None else [None] * len(path)
                duration = duration if duration is not None else [None] * len(path)
                if not (len(offset) == len(duration) == len(path)):
                    errors[row] = (f"column '{column}': {len(path)} paths but {len(offset)} offsets and "
                                   f"{len(duration)} durations")
                    plan.append(None)
                    continue
                items = [(p, o, d) if p is not None and _is_slice(o, d) else None for p, o, d in zip(path, offset, duration)]
            else:
                items = (path, offset, duration) if _is_slice(offset, duration) else None
            for item in items if isinstance(items, list) else [items]:
                if item is not None:
                    wanted[item] = None
            plan.append(items)
        plans[column] = plan
    if not wanted:
        return frame.with_columns(pl.Series(ERROR_COLUMN, errors, pl.String)) if ERROR_COLUMN in frame.columns else frame
    os.makedirs(slice_dir, exist_ok=True)
    todo = list(wanted)
    with ThreadPoolExecutor(thread_pool_size(num_threads, len(todo))) as pool:  # libsndfile drops the GIL
        done = dict(zip(todo, pool.map(lambda item: _cut(slice_dir, item), todo)))
    replaced = []
    for column, plan in plans.items():
        values = frame[column].to_list()
        for row, items in enumerate(plan):
            if items is None or errors[row] is not None:
                continue
            if isinstance(items, list):
                new = list(values[row])
                for i, item in enumerate(items):
                    if item is not None:
                        target, error = done[item]
                        if error is not None:
                            errors[row] = errors[row] or f"column '{column}', turn {i}: {error}"
                        new[i] = target
                values[row] = new
            else:
                target, error = done[items]
                if error is not None:
                    errors[row] = f"column '{column}': {error}"
                values[row] = target
        replaced.append(pl.Series(column, values, frame.schema[column]))
    return frame.with_columns(*replaced, pl.Series(ERROR_COLUMN, errors, pl.String))


def _companion(frame: pl.DataFrame, name: str) -> list:
    """A slice column's values (None per row when the column is absent)."""
    return frame[name].to_list() if name in frame.columns else [None] * frame.height
