"""The output-path policy: what any sdscore command may write, checked before any work.

Every command builds one `OutputPlan` from its inputs, registers each output it will write
(`plan.file(...)`, `plan.folder(...)`, `plan.reserve(...)` for side files such as OUT.parquet.parts)
and only then starts. The rules:

- An output path may not be empty, the current folder or one of its ancestors, or the home folder.
- An output may not be an input, hold an input (a folder above one), or be another output of the
  same run. Paths are compared after resolving symlinks, and existing files by (st_dev, st_ino),
  so a symlink or a hard link to the input is the input.
- An existing file is replaced only with ``overwrite`` (``--overwrite``); the new one is written
  under a temp name in the same folder and renamed over it (atomic_write.py). A symbolic link is
  never replaced (the rename would swap the link for a file behind its owner's back).
- A folder output is built in a hidden temp folder beside it and renamed into place
  (`staged_folder`). It then holds a marker file, `.sdscore-output.json`, naming sdscore, the
  command and every file written there. An existing folder is replaced only when it is empty, or
  when ``overwrite`` is given AND its marker lists every file in it: a folder that holds any file
  sdscore did not write there (or has no marker) is never replaced, even with ``overwrite``.
- Folders that commands fill in place and reuse as a cache (`sdscore synth`, `sdscore demo`) are
  claimed with the same marker (`claim_folder`): new, empty, or marked by the same command. Those
  commands only add or rewrite their own named files; they never delete.

Errors are OutputPathError (an SdscoreError): one line naming the path and the option.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sdscore.atomic_write import write_json
from sdscore.errors import SdscoreError

MARKER = ".sdscore-output.json"
_WRITTEN_BY = "sdscore"


class OutputPathError(SdscoreError):
    """An output path the policy refuses; the message names the path and the option."""


def _text(path: str | os.PathLike | None) -> str:
    return "" if path is None else os.fspath(path)


def _resolved(path: str | os.PathLike) -> Path:
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path)))).resolve()


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _protected_folders() -> list[Path]:
    cwd = Path.cwd().resolve()
    protected = [cwd, *cwd.parents]
    try:
        protected.append(Path.home().resolve())
    except (RuntimeError, KeyError):
        pass
    return protected


def read_marker(folder: str | os.PathLike) -> dict | None:
    """The marker of a folder sdscore wrote (None when there is none or it is not sdscore's)."""
    try:
        marker = json.loads((Path(folder) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("written_by") != _WRITTEN_BY:
        return None
    return marker


def _entries(folder: Path) -> list[str]:
    """Every file, link and empty folder under `folder` (relative, '/'-separated), marker excluded."""
    found = []
    for root, dirs, files in os.walk(folder):
        rel_root = Path(root).relative_to(folder)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            found.append((rel_root / name).as_posix())
        if not dirs and not files and Path(root) != folder:
            found.append(rel_root.as_posix() + "/")
    return sorted(e for e in found if e != MARKER)


def foreign_entries(folder: str | os.PathLike) -> list[str]:
    """What is in `folder` that sdscore's marker does not list (everything, when it has no marker)."""
    folder = Path(folder)
    marker = read_marker(folder)
    listed = set(marker.get("files", [])) if marker else set()
    return [e for e in _entries(folder) if e not in listed and not e.endswith("/")]


def _is_empty_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def check_replaceable_folder(path: str | os.PathLike, overwrite: bool, option: str = "output") -> None:
    """Refuse to replace `path` unless it is missing, an empty folder, or (with overwrite) a folder
    whose marker lists every file in it."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        raise OutputPathError(f"{path}: {option} exists and is not a folder; give {option} a new folder path")
    if _is_empty_folder(path):
        return
    if read_marker(path) is None:
        raise OutputPathError(f"{path}: {option} is a folder that sdscore did not write (no {MARKER}); "
                              f"give {option} a new or empty folder")
    foreign = foreign_entries(path)
    if foreign:
        raise OutputPathError(f"{path}: {option} holds {len(foreign)} file(s) sdscore did not write there "
                              f"(e.g. {foreign[0]}); it is never replaced, even with --overwrite")
    if not overwrite:
        raise OutputPathError(f"{path}: {option} exists (an earlier sdscore output); pass --overwrite to replace it")


class OutputPlan:
    """The outputs of one run, checked against its inputs and each other before any work."""

    def __init__(self, inputs: Iterable[str | os.PathLike | None] = (), *, overwrite: bool = False,
                 command: str = "sdscore"):
        self.overwrite = overwrite
        self.command = command
        self._inputs: list[tuple[Path, os.stat_result | None, str]] = []
        self._outputs: list[tuple[Path, str]] = []
        for path in inputs:
            self.add_input(path)

    def add_input(self, path: str | os.PathLike | None) -> None:
        if path is None or _text(path) == "":
            return
        resolved = _resolved(path)
        self._inputs.append((resolved, _stat(resolved), os.fspath(path)))

    # -- checks shared by files and folders ------------------------------------------------------
    def _common(self, path: str | os.PathLike | None, option: str) -> tuple[Path, Path]:
        text = _text(path)
        if text.strip() == "":
            raise OutputPathError(f"{option}: empty path; give {option} a file or folder path")
        raw = Path(text)
        resolved = _resolved(text)
        if resolved in _protected_folders():
            raise OutputPathError(f"{text}: {option} is the current folder, one above it or the home folder; "
                                  f"give {option} a path of its own")
        stat = _stat(resolved)
        for source, source_stat, shown in self._inputs:
            same = resolved == source or (stat is not None and source_stat is not None
                                          and os.path.samestat(stat, source_stat))
            if same:
                raise OutputPathError(f"{text}: {option} is the input {shown}; write it elsewhere")
            if resolved in source.parents:
                raise OutputPathError(f"{text}: {option} is a folder that holds the input {shown}; write it elsewhere")
        for other, other_option in self._outputs:
            if resolved == other:
                raise OutputPathError(f"{text}: {option} is the same path as {other_option}; give each output "
                                      f"its own path")
            if resolved in other.parents or other in resolved.parents:
                inner, outer = (other_option, option) if resolved in other.parents else (option, other_option)
                raise OutputPathError(f"{text}: {option} and {other_option} nest ({inner} would be inside "
                                      f"{outer}); give each output its own path")
        return raw, resolved

    def reserve(self, path: str | os.PathLike, option: str) -> Path:
        """A side path the run writes (e.g. OUT.parquet.parts): no other output may take it."""
        raw, resolved = self._common(path, option)
        self._outputs.append((resolved, option))
        return raw

    def file(self, path: str | os.PathLike | None, option: str) -> Path:
        """A file output: not a folder; an existing file only with overwrite."""
        raw, resolved = self._common(path, option)
        if os.path.isdir(raw):
            raise OutputPathError(f"{raw}: {option} is a folder; give {option} a file path")
        if os.path.islink(raw):
            raise OutputPathError(f"{raw}: {option} is a symbolic link; it is never replaced, even with --overwrite "
                                  f"(give the path it points to, or another path)")
        if os.path.lexists(raw) and not self.overwrite:
            raise OutputPathError(f"{raw}: {option} exists; pass --overwrite to replace it, or choose another path")
        if os.path.lexists(raw) and not os.path.isfile(raw):
            raise OutputPathError(f"{raw}: {option} exists and is not a regular file; it is never replaced")
        self._check_parent(raw, option)
        self._outputs.append((resolved, option))
        return raw

    def folder(self, path: str | os.PathLike | None, option: str) -> Path:
        """A folder output written whole (staged_folder): see the module doc."""
        raw, resolved = self._common(path, option)
        check_replaceable_folder(raw, self.overwrite, option)
        self._check_parent(raw, option)
        self._outputs.append((resolved, option))
        return raw

    def reused_folder(self, path: str | os.PathLike | None, option: str) -> Path:
        """A folder filled in place and reused by the same command (claim_folder)."""
        raw, resolved = self._common(path, option)
        check_claimable_folder(raw, self.command, option)
        self._check_parent(raw, option)
        self._outputs.append((resolved, option))
        return raw

    @staticmethod
    def _check_parent(path: Path, option: str) -> None:
        probe = path.parent if str(path.parent) else Path(".")
        while not os.path.lexists(probe) and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
            raise OutputPathError(f"{path}: {option} cannot be written there ({probe} is not a writable folder)")


def _write_marker(folder: Path, command: str, files: list[str] | None) -> None:
    marker = {"written_by": _WRITTEN_BY, "command": command}
    if files is not None:
        marker["files"] = files
    write_json(folder / MARKER, marker)


@contextmanager
def staged_folder(destination: str | os.PathLike, *, overwrite: bool = False,
                  command: str = "sdscore") -> Iterator[Path]:
    """Yield an empty temp folder beside `destination`; when the block succeeds it becomes
    `destination` (with a marker listing its files). An existing destination is replaced only as
    check_replaceable_folder allows (checked again here, after the work); on failure nothing changes."""
    destination = Path(destination)
    check_replaceable_folder(destination, overwrite)
    parent = destination.parent if str(destination.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{destination.name[:40]}.", suffix=".sdscore-tmp", dir=parent))
    try:
        yield stage
        _write_marker(stage, command, _entries(stage))
        install_folder(stage, destination, overwrite=overwrite)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def install_folder(stage: Path, destination: Path, *, overwrite: bool) -> None:
    """Rename the finished `stage` to `destination`, moving a replaceable old one aside first."""
    check_replaceable_folder(destination, overwrite)
    old = None
    if os.path.lexists(destination):
        old = Path(tempfile.mkdtemp(prefix=f".{destination.name[:40]}.", suffix=".sdscore-old",
                                    dir=destination.parent))
        old.rmdir()
        os.replace(destination, old)
    try:
        os.replace(stage, destination)
    except BaseException:
        if old is not None:
            os.replace(old, destination)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def check_claimable_folder(path: str | os.PathLike, command: str, option: str = "output") -> None:
    """A folder `command` may fill in place: missing, empty, or marked by the same command."""
    path = Path(path)
    if not os.path.lexists(path) or _is_empty_folder(path):
        return
    if path.is_symlink() or not path.is_dir():
        raise OutputPathError(f"{path}: {option} exists and is not a folder; give {option} a new folder path")
    marker = read_marker(path)
    if marker is None:
        raise OutputPathError(f"{path}: {option} is a folder that sdscore did not write (no {MARKER}); "
                              f"give {option} a new or empty folder")
    if marker.get("command") != command:
        raise OutputPathError(f"{path}: {option} was written by `{marker.get('command')}`, not `{command}`; "
                              f"give {option} another folder")


def claim_folder(path: str | os.PathLike, command: str, option: str = "output") -> Path:
    """Create (or reuse) a folder `command` fills in place, and mark it as that command's."""
    path = Path(path)
    check_claimable_folder(path, command, option)
    path.mkdir(parents=True, exist_ok=True)
    if read_marker(path) is None:
        _write_marker(path, command, None)
    return path


def seal_folder(path: str | os.PathLike, command: str) -> Path:
    """Mark a folder a command has just filled in place (e.g. a plot folder) with the list of its files."""
    path = Path(path)
    _write_marker(path, command, _entries(path))
    return path


__all__ = ["MARKER", "OutputPathError", "OutputPlan", "check_claimable_folder", "check_replaceable_folder",
           "claim_folder", "foreign_entries", "install_folder", "read_marker", "seal_folder", "staged_folder"]


def plan_from_args(args, command: str, extra_inputs: tuple[str, ...] = ("model",)) -> "OutputPlan":
    """An OutputPlan for a parsed command line (an argparse Namespace): its inputs are every Path (or
    list of Paths) among the arguments, and the text options named in extra_inputs when they name an
    existing path (`score reward --model DIR`); `--overwrite` from the arguments."""
    inputs = [Path(v) for name in extra_inputs if isinstance(v := getattr(args, name, None), str) and v
              and Path(v).exists()]
    for value in vars(args).values():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, Path):
                inputs.append(item)
    return OutputPlan(inputs, overwrite=bool(getattr(args, "overwrite", False)), command=command)
