"""Shards written by workers and committed by the driver (runtime/shard_sink.py, ShardedOutput's
commit_shard / abandon): attempts renamed onto the shard's name, second attempts and a stopped run's
attempts deleted, reports that do not fit refused. The Ray side is tests/test_ray_cluster.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import polars as pl
import pytest

from fifo_guard import unblocking
from sdscore.errors import SdscoreError
from sdscore.runtime.shard_sink import ShardSink, WrittenShard, is_attempt
from sdscore.runtime.sharded_output import RUN_FILE, ShardedOutput

RECORD = {"protocol": "toy"}


def _rows(start: int, stop: int, bad: int | None = None) -> pl.DataFrame:
    return pl.DataFrame({"id": [f"r{i}" for i in range(start, stop)], "value": [float(i) for i in range(start, stop)],
                         "error": ["bad row" if i == bad else None for i in range(start, stop)]},
                        schema={"id": pl.String, "value": pl.Float64, "error": pl.String})


def _output(tmp_path: Path, resume: bool = False) -> ShardedOutput:
    return ShardedOutput(tmp_path / "out.parquet", 5, 3, RECORD, resume)


def test_attempts_are_committed_by_rename_and_merged(tmp_path):
    output = _output(tmp_path)
    sink = output.sink()
    first = sink.write(0, _rows(0, 3, bad=1))
    assert first == WrittenShard(0, 3, 1, first.location) and is_attempt(Path(first.location).name, output.run_token)
    assert output.pending() == [0, 1] and not (output.parts / RUN_FILE).exists()  # written, not yet a shard
    output.commit_shard(0, first)
    redone = sink.write(1, _rows(3, 5))
    second = sink.write(1, _rows(3, 5))  # the same window again (its first actor died after writing)
    output.commit_shard(1, redone)
    sink.discard(second)
    assert output.pending() == [] and not Path(first.location).exists() and not Path(second.location).exists()
    assert output.finish({}) == (5, 1)
    assert pl.read_parquet(tmp_path / "out.parquet").equals(pl.concat([_rows(0, 3, bad=1), _rows(3, 5)]))
    assert not output.parts.exists()


def test_a_stopped_run_leaves_nothing_and_stale_attempts_go_with_the_finished_run(tmp_path):
    output = _output(tmp_path)
    output.sink().write(0, _rows(0, 3))
    output.abandon()  # nothing committed: the folder goes with this run's attempts
    assert not output.parts.exists()

    killed = _output(tmp_path)  # a run killed before its first commit leaves an attempt behind
    stale = killed.sink().write(0, _rows(0, 3))
    again = _output(tmp_path)  # no --resume needed: there is no shard to resume
    again.commit_shard(0, again.sink().write(0, _rows(0, 3)))
    again.write_shard(1, _rows(3, 5))
    again.abandon()  # keeps the committed shards and the other run's attempt
    assert Path(stale.location).exists() and again.pending() == []
    resumed = _output(tmp_path, resume=True)
    assert resumed.finish({}) == (5, 0)
    assert not Path(stale.location).exists() and not resumed.parts.exists()


def test_reports_that_do_not_fit_are_refused(tmp_path):
    output = _output(tmp_path)
    sink = output.sink()
    short = sink.write(0, _rows(0, 2))
    with pytest.raises(SdscoreError, match=r"shard 0: a worker wrote 2 result rows for input rows 1\.\.3"):
        output.commit_shard(0, short)
    elsewhere = WrittenShard(0, 3, 0, str(tmp_path / "part-000000.parquet"))
    with pytest.raises(SdscoreError, match=r"shard 0: a worker reported .*part-000000\.parquet', which is not an attempt"):
        output.commit_shard(0, elsewhere)
    other = sink.write(1, _rows(3, 5))
    with pytest.raises(SdscoreError, match=r"which is not an attempt of that shard"):
        output.commit_shard(0, WrittenShard(0, 3, 0, other.location))
    gone = sink.write(0, _rows(0, 3))
    Path(gone.location).unlink()
    with pytest.raises(SdscoreError, match=r"part-000000\.parquet: could not commit the shard of rows 1\.\.3 "
                                           r"\(No such file or directory.*rerun with --resume"):
        output.commit_shard(0, gone)


def test_a_worker_that_cannot_write_says_where(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    sink = ShardSink(str(tmp_path / "file" / "out.parquet.parts"), "ab12")
    with pytest.raises(SdscoreError, match=r"out\.parquet\.parts/part-000002\.ab12-[0-9a-f]+\.attempt\.parquet: "
                                           r"could not write the results of shard 2 \(Not a directory\)"):
        sink.write(2, _rows(0, 3))


def test_a_file_named_like_an_attempt_that_no_run_wrote_is_never_deleted(tmp_path):
    """Clean-up deletes only attempts of runs listed in the parts folder: a user's file that merely has an
    attempt's name survives, in a parts folder sdscore did not make (refused) and in one it did."""
    parts = tmp_path / "out.parquet.parts"
    parts.mkdir()
    foreign = parts / "part-000000.abcd-ef.attempt.parquet"
    foreign.write_text("mine")
    with pytest.raises(SdscoreError, match=r"out\.parquet\.parts: holds 'part-000000\.abcd-ef\.attempt\.parquet', "
                                           r"which no run of sdscore wrote there \(there is no run\.json\)"):
        _output(tmp_path)
    with pytest.raises(SdscoreError, match=r"which no run of sdscore wrote there"):
        _output(tmp_path, resume=True)
    foreign.rename(tmp_path / "kept.parquet")

    output = _output(tmp_path)
    output.commit_shard(0, output.sink().write(0, _rows(0, 3)))
    planted = parts / "part-000001.0bad-cafe.attempt.parquet"  # dropped into the run's folder mid-run
    planted.write_text("mine too")
    output.sink().write(1, _rows(3, 5))  # this run's own attempt, never reported
    output.abandon()
    assert planted.read_text() == "mine too" and sorted(p.name for p in parts.iterdir()) == [
        "part-000000.parquet", planted.name, RUN_FILE]
    resumed = _output(tmp_path, resume=True)
    resumed.write_shard(1, _rows(3, 5))
    assert resumed.finish({}) == (5, 0)
    assert planted.read_text() == "mine too" and sorted(p.name for p in parts.iterdir()) == [planted.name]


def test_a_run_that_cannot_list_itself_says_where_before_any_worker_writes(tmp_path):
    output = _output(tmp_path)
    output.parts.mkdir()
    (output.parts / "attempt-runs.json").mkdir()  # a folder where the list of runs goes
    with pytest.raises(SdscoreError, match=r"attempt-runs\.json: could not list this run before its workers write"):
        output.sink()
    (output.parts / "attempt-runs.json").rmdir()
    os.mkfifo(output.parts / "attempt-runs.json")  # a FIFO: never read (it would block), never replaced
    with unblocking(output.parts / "attempt-runs.json"):  # a read blocked on the FIFO fails instead of hanging
        again = _output(tmp_path)
        with pytest.raises(SdscoreError, match=r"attempt-runs\.json: could not list this run .*not a regular file"):
            again.sink()
    assert stat.S_ISFIFO(os.stat(output.parts / "attempt-runs.json").st_mode)


def test_a_file_where_the_parts_folder_goes_is_refused_and_kept(tmp_path):
    (tmp_path / "out.parquet.parts").write_text("mine")
    for resume in (False, True):
        with pytest.raises(SdscoreError, match=r"out\.parquet\.parts: is a file, not the parts folder of a run"):
            _output(tmp_path, resume=resume)
    assert (tmp_path / "out.parquet.parts").read_text() == "mine"
