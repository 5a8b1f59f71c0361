"""The `ray` executor (Ray Data, Scorers on an actor pool) against the in-process one.

Ray is started once for the module by the first run (the executor initialises it) and shut down at
the end; its workers import the toy Scorer from tests/ through PYTHONPATH, which a local Ray
instance hands on to its workers.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import polars as pl  # noqa: E402
from polars.testing import assert_frame_equal  # noqa: E402

from sdscore.errors import SdscoreError  # noqa: E402
from sdscore.protocols.arena.spec import SPEC as ARENA  # noqa: E402
from sdscore.runtime.executors import make_executor  # noqa: E402
from sdscore.runtime.executors.ray_data import ROW_COLUMN, SHARD_COLUMN, RayExecutor, _Reports, _Shards  # noqa: E402
from sdscore.runtime.provenance import read_provenance  # noqa: E402
from sdscore.runtime.run import score_manifest  # noqa: E402
from sdscore.runtime.scorer import ScoringJob  # noqa: E402
from sdscore.runtime.shard_sink import ShardSink  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from cluster_toy_scorers import CursedScorer  # noqa: E402
from runtime_toy_scorer import FailingScorer, ShortScorer, ToyScorer, write_arena_manifest  # noqa: E402

N_ROWS, BAD_EVERY = 50, 9
# Ray Data's own DataContext() sets options it has deprecated
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
              pytest.mark.xdist_group("ray")]  # Ray: one xdist worker (--dist loadgroup)


@pytest.fixture(scope="module")
def fresh_ray():
    """No Ray running before the module's first run; Ray shut down after its last."""
    if ray.is_initialized():
        ray.shutdown()
    saved = os.environ.get("PYTHONPATH")
    tests = str(Path(__file__).parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([tests, saved] if saved else [tests])
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> str:
    return write_arena_manifest(tmp_path_factory.mktemp("manifest") / "battles.parquet", N_ROWS, BAD_EVERY)


def _job(scorer=ToyScorer) -> ScoringJob:
    return ScoringJob(ARENA, scorer, {"scale": 2.0})


def test_ray_matches_local_row_for_row(fresh_ray, manifest, tmp_path):
    assert not ray.is_initialized()
    local = score_manifest(_job(), manifest, tmp_path / "local.parquet", executor="local", window_rows=7)
    summary = score_manifest(_job(), manifest, tmp_path / "ray.parquet", executor="ray", workers=2, window_rows=7)
    assert ray.is_initialized()

    expected, got = pl.read_parquet(local.out), pl.read_parquet(summary.out)
    assert got.height == N_ROWS and summary.rows == N_ROWS and summary.scored_shards == 8
    assert_frame_equal(got, expected)  # same ids in manifest order, values, dtypes and errors
    assert got["battle_id"].to_list() == [f"b{i:04d}" for i in range(N_ROWS)]
    assert got.schema["vector"] == pl.Array(pl.Float64, 2) and got.schema["note"] == pl.String
    bad = got.filter(pl.col("error").is_not_null())
    assert bad.height == summary.failed == N_ROWS // BAD_EVERY
    assert bad["value"].null_count() == bad.height and "winner" in bad["error"][0]
    executor = read_provenance(summary.out)["executor"]
    assert executor["name"] == "ray" and executor["workers"] == 2 and executor["num_cpus_per_actor"] == 0.5


def test_scorer_that_cannot_load_fails_with_its_message(fresh_ray, manifest, tmp_path):
    with pytest.raises(SdscoreError, match=r"FailingScorer could not be built.*toy weights are missing \(scale=2.0\)"):
        score_manifest(_job(FailingScorer), manifest, tmp_path / "out.parquet", executor="ray", workers=2, window_rows=7)


def test_short_results_are_refused(fresh_ray, manifest, tmp_path):
    with pytest.raises(SdscoreError, match=r"ShortScorer returned 6 result rows for 7 input rows"):
        score_manifest(_job(ShortScorer), manifest, tmp_path / "out.parquet", executor="ray", workers=1, window_rows=7)


def test_a_failed_run_keeps_its_committed_shards_and_deletes_its_attempts(fresh_ray, manifest, tmp_path):
    out = tmp_path / "out.parquet"
    with pytest.raises(SdscoreError, match=r"battle b0021 is cursed"):
        score_manifest(_job(CursedScorer), manifest, out, executor="ray", workers=2, window_rows=7)
    parts = out.with_name(out.name + ".parts")
    left = sorted(p.name for p in parts.iterdir()) if parts.exists() else []
    assert all(name == "run.json" or (name.startswith("part-") and name.count(".") == 1) for name in left), left
    assert "part-000003.parquet" not in left  # the cursed window (rows 22..28) was never committed


def test_empty_manifest_keeps_the_scorer_columns(fresh_ray, tmp_path):
    empty = write_arena_manifest(tmp_path / "empty.parquet", 0)
    local = score_manifest(_job(), empty, tmp_path / "local.parquet", executor="local")
    summary = score_manifest(_job(), empty, tmp_path / "ray.parquet", executor="ray", workers=2)
    assert summary.rows == 0
    assert_frame_equal(pl.read_parquet(summary.out), pl.read_parquet(local.out))


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SdscoreError, match=r"install sdscore\[ray\]"):
        next(iter(RayExecutor(1).run(_job(), None, [(0, 0, 5)])))


def test_options_and_description():
    executor = make_executor("ray", workers=3, ray_address="auto")
    assert executor.describe() == {
        "name": "ray", "workers": 3, "address": "auto", "num_cpus_per_actor": 0.5, "num_gpus_per_actor": 0.0,
        "rows_per_block": None, "threads_per_actor": 1,
    }
    assert RayExecutor(2, num_cpus_per_actor=4).describe()["threads_per_actor"] == 4
    for bad in ({"num_cpus_per_actor": 0}, {"num_gpus_per_actor": -1}, {"rows_per_block": 0}):
        with pytest.raises(ValueError):
            RayExecutor(1, **bad)
    with pytest.raises(SdscoreError, match="window_rows=4"):  # a block is one window
        next(iter(RayExecutor(1, rows_per_block=4).run(_job(), None, [(0, 0, 5)])))


def _rows(shard: int, rows: range) -> pa.Table:
    schema = pa.schema({"value": pa.float64(), SHARD_COLUMN: pa.int64(), ROW_COLUMN: pa.int64()})
    return pa.table({"value": [float(r) for r in rows], SHARD_COLUMN: [shard] * len(rows), ROW_COLUMN: list(rows)}, schema)


def test_shards_are_gathered_in_row_order_across_batches():
    shards = _Shards([(0, 0, 4), (1, 4, 6)])
    assert list(shards.add(pa.concat_tables([_rows(1, range(5, 6)), _rows(0, range(2, 4))]))) == []
    (k, frame), = shards.add(pa.concat_tables([_rows(0, range(0, 2)), _rows(1, range(4, 4))]))
    assert k == 0 and frame["value"].to_list() == [0.0, 1.0, 2.0, 3.0] and frame.columns == ["value"]
    assert shards.missing() == [1]
    (k, frame), = shards.add(_rows(1, range(4, 5)))
    assert k == 1 and frame["value"].to_list() == [4.0, 5.0] and shards.missing() == []


def test_lost_or_duplicated_rows_are_errors():
    with pytest.raises(SdscoreError, match="lost or duplicated"):
        list(_Shards([(0, 0, 3)]).add(pa.concat_tables([_rows(0, range(0, 2)), _rows(0, range(1, 2))])))
    shards = _Shards([(0, 0, 2)])
    list(shards.add(_rows(0, range(0, 2))))
    with pytest.raises(SdscoreError, match="duplicate"):
        list(shards.add(_rows(0, range(1, 2))))
    with pytest.raises(SdscoreError, match="not asked for"):
        list(_Shards([(0, 0, 2)]).add(_rows(3, range(6, 8))))


def test_each_window_is_reported_once_and_a_redone_windows_attempt_is_deleted(tmp_path):
    """Workers that write their own shards report (shard, rows, failed, attempt); a window redone after its
    actor died may be reported twice: the first report is kept, the later attempt deleted."""
    sink = ShardSink(str(tmp_path / "out.parquet.parts"), "ab12")
    frame = pl.DataFrame({"value": [1.0, 2.0], "error": [None, "bad"]})
    first, again = sink.write(0, frame), sink.write(0, frame)

    def report(*written) -> pa.Table:
        return pa.table({"shard": [w.shard for w in written], "rows": [w.rows for w in written],
                         "failed": [w.failed for w in written], "location": [w.location for w in written]})

    reports = _Reports([(0, 0, 2), (1, 2, 4)], sink)
    assert list(reports.add(report(first, again))) == [(0, first)] and reports.missing() == [1]
    assert os.path.exists(first.location) and not os.path.exists(again.location)
    with pytest.raises(SdscoreError, match="report of shard 5, which was not asked for"):
        list(reports.add(report(sink.write(5, frame))))


def test_ray_data_logs_follow_a_new_session_after_the_old_folder_is_gone():
    """A second Ray session in one process, after the first session's folder was removed: Ray Data's
    log handler still named the old folder's ray-data.log, and its first ERROR record during a run
    raised FileNotFoundError (seen after tests/test_ray_cluster.py tore its cluster's folder down)."""
    import logging
    import shutil
    import tempfile

    from sdscore.runtime.executors.ray_data import _quiet_ray_data

    if ray.is_initialized():
        ray.shutdown()
    data_logger = logging.getLogger("ray.data")
    # Ray's own folders (its sockets' paths must stay under 108 bytes: not under pytest's tmp_path)
    first, second = (Path(tempfile.mkdtemp(prefix="sdscore-logs-")) for _ in range(2))
    try:
        ray.init(num_cpus=1, include_dashboard=False, _temp_dir=str(first), log_to_driver=False)
        data_logger.error("a record in the first session")  # the handler opens first/…/ray-data.log
        for handler in data_logger.handlers:  # a closed file (as after a logging shutdown) is reopened by path
            inner = getattr(handler, "_handler", None)
            if inner is not None:
                inner.close()
        ray.shutdown()
        shutil.rmtree(first)
        ray.init(num_cpus=1, include_dashboard=False, _temp_dir=str(second), log_to_driver=False)
        with _quiet_ray_data(ray):
            data_logger.error("a record in the second session")
        logs = list(second.rglob("ray-data.log"))
        assert logs and "a record in the second session" in logs[0].read_text()
        assert not first.exists()
    finally:
        ray.shutdown()
        shutil.rmtree(first, ignore_errors=True)
        shutil.rmtree(second, ignore_errors=True)
