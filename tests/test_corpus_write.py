"""write_manifest: Parquet or JSONL by suffix, atomically (no half-written file is ever visible)."""

from __future__ import annotations

import os

import polars as pl
import pytest

from sdscore.corpus import write_manifest
from sdscore.errors import ManifestError
from sdscore.manifests import read_manifest

BATTLES = pl.DataFrame(
    {"battle_id": ["1", "2"], "model_a": ["a", "a"], "model_b": ["b", "c"], "winner": ["tie", "model_b"]}
)


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".ndjson", ".pq"])
def test_round_trip(tmp_path, suffix):
    path = write_manifest(BATTLES, tmp_path / f"battles{suffix}")
    assert path == tmp_path / f"battles{suffix}"
    assert read_manifest(path).select(BATTLES.columns).equals(BATTLES)
    assert os.listdir(tmp_path) == [path.name]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_lazy_frames_are_streamed(tmp_path, suffix):
    path = write_manifest(BATTLES.lazy(), tmp_path / f"battles{suffix}")
    assert read_manifest(path).height == 2


def test_creates_the_folder_and_replaces_an_old_file(tmp_path):
    path = tmp_path / "deep" / "er" / "battles.parquet"
    write_manifest(BATTLES.head(1), path)
    write_manifest(BATTLES, path)
    assert read_manifest(path).height == 2
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = write_manifest(BATTLES, tmp_path / "battles.jsonl")
    unwritable = pl.DataFrame({"x": [object()]}, schema={"x": pl.Object})
    with pytest.raises(pl.exceptions.ComputeError, match="cannot write 'Object' datatype"):
        write_manifest(unwritable, path)
    assert os.listdir(tmp_path) == ["battles.jsonl"]
    assert read_manifest(path).height == 2


def test_unknown_suffix(tmp_path):
    with pytest.raises(ManifestError, match=r"battles\.csv: cannot write a manifest as '\.csv'; use one of \.parquet"):
        write_manifest(BATTLES, tmp_path / "battles.csv")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
