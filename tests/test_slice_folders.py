"""Ray actors' slice folders (runtime/audio_slices.py): named after their process, and those left by a
dead process (an actor killed mid-window) removed by the next one, without touching anything else."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from sdscore.runtime.audio_slices import (
    SLICE_FOLDER_PREFIX,
    remove_orphaned_slice_folders,
    slice_file,
    slice_folder,
)


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture()
def live_pid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def _folder(temp, name: str, files=()) -> str:
    folder = temp / name
    folder.mkdir()
    for file in files:
        (folder / file).write_bytes(b"RIFF")
    return str(folder)


def _slices() -> list[str]:
    """Names of slice files as the cutter writes them: two slices and one half-written."""
    done = [os.path.basename(slice_file("/x", f"/audio/{i}.wav", 1.0, 2.0)) for i in range(2)]
    return [*done, f"{done[0]}.1234.140000000000.tmp.wav"]


def test_only_the_dead_process_s_folder_of_slice_files_is_removed(tmp_path, dead_pid, live_pid):
    dead = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-ab1_cd2e", _slices())
    dead_empty = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-zzzzzzzz")  # killed before its first slice
    kept = [
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{live_pid}-ab1_cd2e", _slices()),  # its owner is running
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-ab1_cd2e.bak", _slices()),  # near-miss names
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-abc", _slices()),
        _folder(tmp_path, f"my-{SLICE_FOLDER_PREFIX}{dead_pid}-ab1_cd2e", _slices()),
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}ab1_cd2e", _slices()),  # the old name, without a pid
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-notes123", [*_slices(), "notes.txt"]),  # a foreign file
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-upper12A", _slices()),
    ]
    with_subfolder = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-subdir12", _slices())
    os.mkdir(os.path.join(with_subfolder, "keep"))
    with_link = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-linked12")
    os.symlink(kept[5] + "/notes.txt", os.path.join(with_link, os.path.basename(slice_file("/x", "/a.wav", 0.5, 1.0))))
    (tmp_path / f"{SLICE_FOLDER_PREFIX}{dead_pid}-afile123").write_text("a file, not a folder")
    before = {p: sorted(os.listdir(p)) for p in [*kept, with_subfolder, with_link]}

    removed = remove_orphaned_slice_folders(str(tmp_path))

    assert sorted(removed) == sorted([dead, dead_empty])
    assert not os.path.exists(dead) and not os.path.exists(dead_empty)
    assert {p: sorted(os.listdir(p)) for p in before} == before
    assert (tmp_path / f"{SLICE_FOLDER_PREFIX}{dead_pid}-afile123").read_text() == "a file, not a folder"
    assert remove_orphaned_slice_folders(str(tmp_path)) == []


def test_a_new_slice_folder_is_named_after_this_process_and_kept_while_it_runs(tmp_path):
    folder = slice_folder(str(tmp_path))
    name = os.path.basename(folder)
    assert name.startswith(f"{SLICE_FOLDER_PREFIX}{os.getpid()}-") and os.listdir(folder) == []
    assert remove_orphaned_slice_folders(str(tmp_path)) == []
    assert os.path.isdir(folder)


def test_a_slice_folder_whose_process_died_is_removed(tmp_path):
    """The real round trip: a process makes its folder, cuts a slice name into it and is killed."""
    code = ("import os, sys; from sdscore.runtime.audio_slices import slice_folder, slice_file; "
            "d = slice_folder(sys.argv[1]); open(slice_file(d, '/a.wav', 1.0, 2.0), 'wb').close(); "
            "print(d, flush=True); os.kill(os.getpid(), 9)")
    child = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert child.returncode == -9, child.stderr
    folder = child.stdout.strip()
    assert len(os.listdir(folder)) == 1
    assert remove_orphaned_slice_folders(str(tmp_path)) == [folder]
    assert not os.path.exists(folder)


def test_a_temp_folder_that_cannot_be_listed_is_a_warning_not_an_error(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="sdscore.runtime.audio_slices"):
        assert remove_orphaned_slice_folders(str(tmp_path / "missing")) == []
    assert "cannot list it for orphaned slice folders" in caplog.text
