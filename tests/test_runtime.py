"""The generic runtime with a toy Scorer: windows, error rows, executors, resume, output checks,
provenance. Protocol scorers are tested end to end in test_runtime_protocols.py."""

from __future__ import annotations

import json

import polars as pl
import pytest
from runtime_toy_scorer import FailingScorer, GatedScorer, ShortScorer, ToyScorer, write_arena_manifest

from sdscore.errors import SdscoreError
from sdscore.protocols.arena.spec import SPEC as ARENA
from sdscore.runtime.provenance import read_provenance
from sdscore.runtime.run import score_manifest
from sdscore.runtime.scorer import ScoringJob


@pytest.fixture
def manifest(tmp_path):
    return write_arena_manifest(tmp_path / "battles.parquet", n_rows=50, bad_every=9)


def _expected(manifest_path) -> pl.DataFrame:
    """The toy scorer over the whole manifest at once, read the way the runtime reads it."""
    from sdscore.manifests import read_manifest

    return ToyScorer()(read_manifest(manifest_path, "arena", errors="collect"))


@pytest.mark.parametrize("window_rows", [1, 7, 50, 1000])
def test_windows_give_the_one_batch_result(manifest, tmp_path, window_rows):
    out = tmp_path / "out.parquet"
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=window_rows)
    results = pl.read_parquet(out)
    assert results.equals(_expected(manifest))
    assert (summary.rows, summary.failed) == (50, 5)
    assert summary.scored_shards == -(-50 // window_rows) and summary.resumed_shards == 0
    assert results.filter(pl.col("error").is_not_null())["value"].null_count() == 5
    assert "row 9" not in results["error"].drop_nulls()[0] and "winner" in results["error"].drop_nulls()[0]


def test_processes_executor_equals_local(manifest, tmp_path):
    score_manifest(ScoringJob(ARENA, ToyScorer, {"scale": 2.0}), manifest, tmp_path / "a.parquet", window_rows=6)
    score_manifest(ScoringJob(ARENA, ToyScorer, {"scale": 2.0}), manifest, tmp_path / "b.parquet",
                   executor="processes", workers=2, window_rows=6)
    assert pl.read_parquet(tmp_path / "b.parquet").equals(pl.read_parquet(tmp_path / "a.parquet"))


def test_a_scorer_that_cannot_load_reports_its_error(manifest, tmp_path):
    for executor, workers in (("local", 1), ("processes", 2)):
        with pytest.raises(RuntimeError, match=r"toy weights are missing \(scale=3\)"):
            score_manifest(ScoringJob(ARENA, FailingScorer, {"scale": 3}), manifest, tmp_path / "o.parquet",
                           executor=executor, workers=workers)
        assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "o.parquet.parts").exists()


def test_a_scorer_that_loses_rows_is_refused(manifest, tmp_path):
    with pytest.raises(SdscoreError, match=r"ShortScorer returned 9 result rows for 10 input rows \(rows 1..10\)"):
        score_manifest(ScoringJob(ARENA, ShortScorer), manifest, tmp_path / "o.parquet", window_rows=10)


def test_unknown_settings_are_refused_before_any_work():
    with pytest.raises(ValueError, match="ToyScorer: bad settings .*unexpected keyword argument 'sclae'"):
        ScoringJob(ARENA, ToyScorer, {"sclae": 2.0})


def test_a_job_takes_a_manifest_spec_not_a_protocol_name():
    with pytest.raises(TypeError, match=r"ScoringJob\.protocol must be a ManifestSpec \(a protocol package's "
                                        r"spec\.SPEC\), not 'arena'"):
        ScoringJob("arena", ToyScorer)


def test_resume_refuses_changed_settings_and_manifest(manifest, tmp_path, monkeypatch):
    out = tmp_path / "out.parquet"
    calls = []
    real = ToyScorer.__call__

    def dies_on_third(self, rows):
        calls.append(rows.height)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, rows)

    monkeypatch.setattr(ToyScorer, "__call__", dies_on_third)
    with pytest.raises(KeyboardInterrupt):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=10)
    monkeypatch.setattr(ToyScorer, "__call__", real)
    assert sorted(p.name for p in (tmp_path / "out.parquet.parts").iterdir()) == [
        "part-000000.parquet", "part-000001.parquet", "run.json"]
    with pytest.raises(SdscoreError, match="pass --resume"):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out)
    with pytest.raises(SdscoreError, match=r"settings.scale \(1.0 then, 2.0 now\)"):
        score_manifest(ScoringJob(ARENA, ToyScorer, {"scale": 2.0}), manifest, out, resume=True)
    # the manifest edited elsewhere: a row changes (tests/test_hardening_results.py edits one in place)
    frame = pl.read_parquet(manifest).with_columns(pl.col("model_a").str.replace("model-1", "model-9"))
    edited = tmp_path / "edited" / "battles.parquet"
    edited.parent.mkdir()
    frame.write_parquet(edited)
    with pytest.raises(SdscoreError, match=r"manifest\.(content|path)"):
        score_manifest(ScoringJob(ARENA, ToyScorer), edited, out, resume=True)
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, resume=True, executor="processes",
                             workers=2)  # the executor is not part of the record
    assert (summary.resumed_shards, summary.scored_shards) == (2, 3)
    assert pl.read_parquet(out).equals(_expected(manifest))


def test_read_options_reach_the_reader_unread_and_a_resume_must_repeat_them(manifest, tmp_path, monkeypatch):
    """The runtime hands read_options to load_table as they are (it knows no format's options) and keeps them
    in the run record: an unfinished run resumes only with the same ones, and none leaves the record as before."""
    import sdscore.runtime.manifest_windows as manifest_windows

    real_load, seen = manifest_windows.load_table, []

    def load_table(path, **options):  # a reader with an option of its own
        seen.append(options)
        return real_load(path)

    monkeypatch.setattr(manifest_windows, "load_table", load_table)
    plain = tmp_path / "plain.parquet"
    score_manifest(ScoringJob(ARENA, ToyScorer), manifest, plain)
    assert seen == [{}] and "read_options" not in read_provenance(plain)
    out = tmp_path / "out.parquet"
    calls, real = [], ToyScorer.__call__

    def dies_on_second(self, rows):
        calls.append(rows.height)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, rows)

    monkeypatch.setattr(ToyScorer, "__call__", dies_on_second)
    with pytest.raises(KeyboardInterrupt):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, window_rows=10, read_options={"toy_group": "a"})
    monkeypatch.setattr(ToyScorer, "__call__", real)
    assert seen[-1] == {"toy_group": "a"}
    with pytest.raises(SdscoreError, match=r"read_options.toy_group \('a' then, 'b' now\)"):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, resume=True, read_options={"toy_group": "b"})
    with pytest.raises(SdscoreError, match=r"read_options \(\{'toy_group': 'a'\} then, None now\)"):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, resume=True)
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, resume=True, read_options={"toy_group": "a"})
    assert (summary.resumed_shards, summary.scored_shards) == (1, 4)
    assert read_provenance(out)["read_options"] == {"toy_group": "a"}
    assert pl.read_parquet(out).equals(pl.read_parquet(plain))


def test_output_path_is_checked_before_any_work(manifest, tmp_path):
    job = ScoringJob(ARENA, FailingScorer)  # would raise if it were ever built
    with pytest.raises(SdscoreError, match="is the manifest itself"):
        score_manifest(job, manifest, manifest)
    with pytest.raises(SdscoreError, match="results are written as Parquet; give --out a .parquet path"):
        score_manifest(job, manifest, tmp_path / "out.csv")
    (tmp_path / "folder.parquet").mkdir()
    with pytest.raises(SdscoreError, match="is a folder"):
        score_manifest(job, manifest, tmp_path / "folder.parquet")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    import os

    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(SdscoreError, match="cannot write there"):
            score_manifest(job, manifest, locked / "out.parquet")


def test_empty_manifest_gives_an_empty_output_with_columns(tmp_path):
    path = write_arena_manifest(tmp_path / "empty.parquet", n_rows=0)
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), path, tmp_path / "o.parquet")
    results = pl.read_parquet(tmp_path / "o.parquet")
    assert summary.rows == results.height == 0
    assert results.columns == ["battle_id", "value", "pair", "vector", "side", "note", "error"]


def test_other_formats_stream_through_a_staged_copy(manifest, tmp_path):
    jsonl = tmp_path / "battles.jsonl"
    pl.read_parquet(manifest).write_ndjson(jsonl)
    score_manifest(ScoringJob(ARENA, ToyScorer), jsonl, tmp_path / "o.parquet", window_rows=8)
    assert pl.read_parquet(tmp_path / "o.parquet").equals(_expected(manifest))
    assert not list(tmp_path.glob(".o.parquet.stage-*"))  # the staging copy is removed


def test_duplicate_ids_across_windows_are_row_errors(tmp_path):
    path = write_arena_manifest(tmp_path / "dup.parquet", n_rows=12, bad_every=100)
    frame = pl.read_parquet(path)
    frame = frame.with_columns(pl.when(pl.int_range(pl.len()) == 10).then(pl.lit("b0002"))
                               .otherwise(pl.col("battle_id")).alias("battle_id"))
    frame.write_parquet(path)
    score_manifest(ScoringJob(ARENA, ToyScorer), path, tmp_path / "o.parquet", window_rows=4)
    errors = pl.read_parquet(tmp_path / "o.parquet")["error"].to_list()
    assert [i for i, e in enumerate(errors) if e] == [10]
    assert "'b0002' repeats row 3" in errors[10]


def test_provenance_is_stored_in_the_output(manifest, tmp_path):
    score_manifest(ScoringJob(ARENA, ToyScorer, {"scale": 2.0}), manifest, tmp_path / "o.parquet")
    meta = read_provenance(tmp_path / "o.parquet")
    assert meta["protocol"] == "arena" and meta["scorer"] == "runtime_toy_scorer:ToyScorer"
    assert meta["settings"] == {"scale": 2.0}
    assert meta["rows"] == 50 and meta["failed_rows"] == 5 and meta["executor"]["name"] == "local"
    assert meta["manifest"]["rows"] == 50 and len(meta["manifest"]["keys"]) == 32
    assert {"sdscore_version", "started", "finished", "host"} <= set(meta)
    json.dumps(meta)


class _NullInFirstWindow(ToyScorer):
    """`note` is polars' Null type where a window has no text (as `pl.lit(None)` gives)."""

    def __call__(self, rows):
        out = super().__call__(rows).drop("note")
        first = rows["battle_id"][0] if rows.height else None
        note = pl.lit(None) if first == "b0000" else pl.lit("seen", pl.String)
        return out.with_columns(note.alias("note")).select("battle_id", "value", "note", "error")


def test_a_column_null_in_one_window_merges_with_its_type_from_others(manifest, tmp_path):
    score_manifest(ScoringJob(ARENA, _NullInFirstWindow), manifest, tmp_path / "o.parquet", window_rows=10)
    results = pl.read_parquet(tmp_path / "o.parquet")
    assert results.schema["note"] == pl.String
    assert results["note"].null_count() == 10


def test_sharded_output_shards_resume_and_merge(tmp_path):
    from sdscore.runtime.sharded_output import ShardedOutput

    out = tmp_path / "res.parquet"
    frame = pl.DataFrame({"x": list(range(10)), "error": [None] * 9 + ["bad"]}, schema={"x": pl.Int64, "error": pl.String})
    shards = ShardedOutput(out, 10, 4, {"model": "a"}, resume=False)
    assert shards.pending() == [0, 1, 2] and not shards.parts.exists()  # made with the first shard
    shards.write_shard(0, frame[0:4])
    with pytest.raises(SdscoreError, match="shard 1: 3 result rows for input rows 5..8"):
        shards.write_shard(1, frame[4:7])
    with pytest.raises(SdscoreError, match="pass --resume"):
        ShardedOutput(out, 10, 4, {"model": "a"}, resume=False)
    with pytest.raises(SdscoreError, match=r"model \('a' then, 'b' now\)"):
        ShardedOutput(out, 10, 4, {"model": "b"}, resume=True)
    again = ShardedOutput(out, 10, 4, {"model": "a"}, resume=True)
    assert again.pending() == [1, 2]
    with pytest.raises(SdscoreError, match="missing"):
        again.finish({})
    again.write_shard(1, frame[4:8])
    again.write_shard(2, frame[8:10])
    assert again.finish({"note": "x"}) == (10, 1)
    assert pl.read_parquet(out).equals(frame) and not again.parts.exists()
    assert read_provenance(out) == {"note": "x", "rows": 10, "failed_rows": 1}


def test_merging_never_deletes_a_file_it_did_not_write_in_the_parts_folder(tmp_path, caplog):
    from sdscore.runtime.sharded_output import ShardedOutput

    out = tmp_path / "res.parquet"
    frame = pl.DataFrame({"x": [1, 2, 3], "error": [None] * 3}, schema={"x": pl.Int64, "error": pl.String})
    shards = ShardedOutput(out, 3, 4, {"model": "a"}, resume=False)
    shards.write_shard(0, frame)
    (shards.parts / "notes.txt").write_text("mine")  # a user's file dropped into the folder mid-run
    with caplog.at_level("WARNING"):
        assert shards.finish({}) == (3, 0)
    assert sorted(p.name for p in shards.parts.iterdir()) == ["notes.txt"]
    assert "holds files this run did not write" in caplog.text
    assert pl.read_parquet(out).equals(frame)


def test_a_manifest_without_required_columns_stops_before_the_scorer_loads(tmp_path):
    from sdscore.errors import ManifestError

    path = tmp_path / "m.parquet"
    pl.DataFrame({"battle_id": ["a"], "model_a": ["x"]}).write_parquet(path)
    with pytest.raises(ManifestError, match="missing required columns 'model_b', 'winner' for protocol 'arena'"):
        score_manifest(ScoringJob(ARENA, FailingScorer), path, tmp_path / "o.parquet")


def test_a_second_run_on_the_same_output_is_refused_and_a_dead_holder_never_blocks(manifest, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "o.parquet"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom sdscore.runtime.output_lock import OutputLock\n"
         "with OutputLock(sys.argv[1]):\n    print('locked', flush=True)\n    time.sleep(60)\n", str(out)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(SdscoreError, match=rf"another run is writing this output \(pid {holder.pid} on .*started"):
            score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out)
        with pytest.raises(SdscoreError, match="another run is writing this output"):
            score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out, resume=True)
    finally:
        holder.kill()  # SIGKILL: the lock file stays, the kernel drops the lock
        holder.wait()
    assert (tmp_path / "o.parquet.lock").exists()
    score_manifest(ScoringJob(ARENA, ToyScorer), manifest, out)
    assert pl.read_parquet(out).height == 50 and not (tmp_path / "o.parquet.lock").exists()


def test_workers_choose_the_processes_executor_and_local_refuses_them(manifest, tmp_path):
    summary = score_manifest(ScoringJob(ARENA, ToyScorer), manifest, tmp_path / "o.parquet", workers=2)
    assert read_provenance(summary.out)["executor"]["name"] == "processes"
    with pytest.raises(ValueError, match="the local executor runs in this process: workers must be 1, got 2"):
        score_manifest(ScoringJob(ARENA, ToyScorer), manifest, tmp_path / "p.parquet", executor="local", workers=2)


def test_kill_9_midway_then_resume_equals_an_uninterrupted_run(manifest, tmp_path):
    """A run in another process scores two windows and stays in the third until SIGKILL (no cleanup
    runs, its lock file stays): --resume keeps both shards and gives the uninterrupted run's rows."""
    import os
    import subprocess
    import sys
    import time

    out, parts = tmp_path / "o.parquet", tmp_path / "o.parquet.parts"
    env = {**os.environ, "SDSCORE_TOY_GATE": str(tmp_path / "never"), "SDSCORE_TOY_GATE_WINDOWS": "2",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom runtime_toy_scorer import GatedScorer\n"
         "from sdscore.protocols.arena.spec import SPEC\nfrom sdscore.runtime.run import score_manifest\n"
         "from sdscore.runtime.scorer import ScoringJob\n"
         "score_manifest(ScoringJob(SPEC, GatedScorer), sys.argv[1], sys.argv[2], window_rows=6)\n",
         str(manifest), str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    hang_guard = time.monotonic() + 300  # a run that never writes fails here instead of hanging the suite
    try:
        while len(list(parts.glob("part-*.parquet"))) < 2:
            assert process.poll() is None, f"the run ended (rc {process.returncode}): {process.stderr.read()}"
            assert time.monotonic() < hang_guard, "no second shard in 300 s"
            time.sleep(0.05)
    finally:
        process.kill()  # SIGKILL: no cleanup runs
        process.wait()
    assert not out.exists() and len(list(parts.glob("part-*.parquet"))) == 2
    assert (tmp_path / "o.parquet.lock").exists()
    summary = score_manifest(ScoringJob(ARENA, GatedScorer), manifest, out, window_rows=6, resume=True)
    assert summary.resumed_shards == 2 and not parts.exists()
    score_manifest(ScoringJob(ARENA, ToyScorer), manifest, tmp_path / "full.parquet", window_rows=6)
    assert pl.read_parquet(out).equals(pl.read_parquet(tmp_path / "full.parquet"))
    assert pl.read_parquet(out).equals(_expected(manifest))
