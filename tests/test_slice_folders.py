"""Folders named after their host and process (runtime/audio_slices.py): Ray actors' slice folders and
runs' staging folders; those left by a dead process (an actor killed mid-window, a killed run) are
removed by the next one, without touching anything else."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import polars as pl
from runtime_toy_scorer import ToyScorer, write_arena_manifest
from sdscore.protocols.arena.spec import SPEC as ARENA
from sdscore.runtime.audio_slices import (
    SLICE_FOLDER_PREFIX,
    host_tag,
    remove_orphaned_slice_folders,
    slice_file,
    slice_folder,
)
from sdscore.runtime.run import score_manifest
from sdscore.runtime.scorer import ScoringJob

HOST = host_tag()


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
    dead = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-ab1_cd2e", _slices())
    dead_empty = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-zzzzzzzz")  # killed before its first slice
    kept = [
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{live_pid}-ab1_cd2e", _slices()),  # its owner is running
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-ab1_cd2e.bak", _slices()),  # near-miss names
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-abc", _slices()),
        _folder(tmp_path, f"my-{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-ab1_cd2e", _slices()),
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}ab1_cd2e", _slices()),  # the old name, without a pid
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{dead_pid}-ab1_cd2e", _slices()),  # nor a host tag
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{'0' * 8 if HOST != '0' * 8 else '1' * 8}-{dead_pid}-ab1_cd2e",
                _slices()),  # another host's (a shared temp folder): its pids are not this host's
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-notes123", [*_slices(), "notes.txt"]),  # a foreign file
        _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-upper12A", _slices()),
    ]
    with_subfolder = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-subdir12", _slices())
    os.mkdir(os.path.join(with_subfolder, "keep"))
    with_link = _folder(tmp_path, f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-linked12")
    os.symlink(kept[7] + "/notes.txt", os.path.join(with_link, os.path.basename(slice_file("/x", "/a.wav", 0.5, 1.0))))
    (tmp_path / f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-afile123").write_text("a file, not a folder")
    before = {p: sorted(os.listdir(p)) for p in [*kept, with_subfolder, with_link]}

    removed = remove_orphaned_slice_folders(str(tmp_path))

    assert sorted(removed) == sorted([dead, dead_empty])
    assert not os.path.exists(dead) and not os.path.exists(dead_empty)
    assert {p: sorted(os.listdir(p)) for p in before} == before
    assert (tmp_path / f"{SLICE_FOLDER_PREFIX}{HOST}-{dead_pid}-afile123").read_text() == "a file, not a folder"
    assert remove_orphaned_slice_folders(str(tmp_path)) == []


def test_a_new_slice_folder_is_named_after_this_process_and_kept_while_it_runs(tmp_path):
    folder = slice_folder(str(tmp_path))
    name = os.path.basename(folder)
    assert name.startswith(f"{SLICE_FOLDER_PREFIX}{HOST}-{os.getpid()}-") and os.listdir(folder) == []
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
    assert "cannot list it for orphaned sdscore folders" in caplog.text


def test_a_killed_run_s_staging_folder_is_removed_by_the_next_run_on_that_output(tmp_path, dead_pid):
    """A run killed mid-way leaves its staging folder (a staged manifest copy and cut slices) beside the
    output; the next run on that output removes it, and never a folder holding anything else."""
    manifest = write_arena_manifest(tmp_path / "battles.parquet", n_rows=6)
    jsonl = tmp_path / "battles.jsonl"
    pl.read_parquet(manifest).write_ndjson(jsonl)
    left = _folder(tmp_path, f".o.parquet.stage-{HOST}-{dead_pid}-ab1_cd2e",
                   ["manifest.parquet", ".merged-x1y2z3_4.parquet"])
    os.mkdir(os.path.join(left, "slices"))
    for name in _slices():
        (tmp_path / left / "slices" / name).write_bytes(b"RIFF")
    foreign = _folder(tmp_path, f".o.parquet.stage-{HOST}-{dead_pid}-notes123", ["manifest.parquet", "notes.txt"])
    other_output = _folder(tmp_path, f".other.parquet.stage-{HOST}-{dead_pid}-ab1_cd2e", ["manifest.parquet"])

    score_manifest(ScoringJob(ARENA, ToyScorer), jsonl, tmp_path / "o.parquet", window_rows=4)

    assert pl.read_parquet(tmp_path / "o.parquet").height == 6
    assert not os.path.exists(left)
    assert sorted(os.listdir(foreign)) == ["manifest.parquet", "notes.txt"]
    assert os.listdir(other_output) == ["manifest.parquet"]
    assert sorted(p.name for p in tmp_path.glob(".*.stage-*")) == sorted(map(os.path.basename, [foreign, other_output]))
