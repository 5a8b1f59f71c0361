"""Rows done inside a window come back from Ray actors (runtime/executors/ray_data.py, a Ray queue): the
ray side of test_row_progress.py's process check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from progress_toy_scorer import ReportingScorer  # noqa: E402
from runtime_toy_scorer import write_arena_manifest  # noqa: E402

from sdscore.protocols.arena.spec import SPEC as ARENA  # noqa: E402
from sdscore.runtime.executors.ray_data import RayExecutor  # noqa: E402
from sdscore.runtime.manifest_windows import ManifestWindows  # noqa: E402
from sdscore.runtime.scorer import ScoringJob  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
              pytest.mark.xdist_group("ray")]  # Ray: one xdist worker (--dist loadgroup)


@pytest.fixture
def own_ray(monkeypatch):
    """Ray started by the run (its workers import the toy Scorer from tests/ through PYTHONPATH), shut down after."""
    if ray.is_initialized():
        ray.shutdown()
    saved = os.environ.get("PYTHONPATH")
    tests = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests, saved] if saved else [tests]))
    yield
    ray.shutdown()


def test_ray_actors_send_row_counts_back(own_ray, tmp_path):
    manifest = write_arena_manifest(tmp_path / "battles.parquet", n_rows=30, bad_every=9)
    windows = ManifestWindows(manifest, ARENA, str(tmp_path))
    todo = [(k, start, start + 10) for k, start in enumerate(range(0, 30, 10))]
    messages = []
    executor = RayExecutor(1, report_every=0)  # every count is sent: the test counts them
    results = dict(executor.run(ScoringJob(ARENA, ReportingScorer), windows, todo,
                                rows_done=lambda k, rows: messages.append((k, rows))))
    assert sorted(results) == [0, 1, 2] and sum(r.height for r in results.values()) == 30
    assert len(messages) == 30 > len(todo)  # one per row, all read before run() returned
    last = {}
    for k, rows in messages:
        assert rows > last.get(k, 0)
        last[k] = rows
    assert last == {0: 10, 1: 10, 2: 10}
