"""Rows counted as they finish inside a window (runtime/row_progress.py): a Scorer's own progress turned
into rows, throttled messages from workers, the run's count, and the executors that carry them. No test
here depends on timing: clocks are fake, and the one cross-process check waits on a file, not a clock."""

from __future__ import annotations

import polars as pl
import pytest
from progress_toy_scorer import GatedReportingScorer, ReportingScorer
from runtime_toy_scorer import ToyScorer, write_arena_manifest

from sdscore.protocols.arena.spec import SPEC as ARENA
from sdscore.runtime.executors.processes import ProcessExecutor
from sdscore.runtime.manifest_windows import ManifestWindows
from sdscore.runtime.row_progress import RunRows, Throttled, WindowRows, takes_progress
from sdscore.runtime.run import score_manifest
from sdscore.runtime.scorer import ScoringJob


@pytest.fixture
def manifest(tmp_path):
    return write_arena_manifest(tmp_path / "battles.parquet", n_rows=50, bad_every=9)


def test_window_rows_turns_a_scorers_units_into_rows_that_only_grow():
    sent = []
    progress = WindowRows(3, 10, lambda k, rows: sent.append((k, rows)))
    for done, total in [(0, 4), (1, 4), (1, 4), (2, 4), (1, 4), (7, 4), (0, 0)]:
        progress("stage", done, total)
    assert sent == [(3, 2), (3, 5), (3, 10)]  # 1/4 of 10 rows is 2; never back, never past the window


def test_throttled_sends_at_most_one_count_per_interval():
    now = [0.0]
    sent = []
    throttled = Throttled(lambda k, rows: sent.append((k, rows)), every=1.0, clock=lambda: now[0])
    for t, rows in [(0.0, 1), (0.4, 2), (0.99, 3), (1.0, 4), (1.5, 5), (3.0, 6)]:
        now[0] = t
        throttled(0, rows)
    assert sent == [(0, 1), (0, 4), (0, 6)] and throttled.sent == 3


def test_run_rows_adds_windows_in_flight_to_finished_ones_and_drops_late_counts():
    calls = []
    counter = RunRows(lambda stage, done, total, failed=None: calls.append((done, failed)), "score toy", 30, 10)
    counter.report()
    counter.rows_done(1, 4)
    counter.rows_done(2, 3)
    counter.rows_done(1, 2)  # older than what window 1 said
    counter.window_finished(1, 10, failed=2)
    counter.rows_done(1, 9)  # window 1 is finished: its late count changes nothing
    counter.window_finished(2, 10, failed=0)
    assert calls == [(10, 0), (14, 0), (17, 0), (23, 2), (30, 2)]


def test_run_rows_calls_a_three_argument_progress_without_failed():
    calls = []
    counter = RunRows(lambda stage, done, total: calls.append((stage, done, total)), "score toy", 5, 0)
    counter.rows_done(0, 2)
    counter.window_finished(0, 5, failed=1)
    assert calls == [("score toy", 2, 5), ("score toy", 5, 5)]


def test_a_scorer_takes_progress_only_by_its_keyword():
    assert takes_progress(ReportingScorer()) and not takes_progress(ToyScorer())


def test_rows_move_before_the_window_ends_in_process(manifest, tmp_path):
    calls = []
    score_manifest(ScoringJob(ARENA, ReportingScorer), manifest, tmp_path / "out.parquet", window_rows=20,
                   progress=lambda stage, done, total, failed: calls.append((stage, done, total, failed)))
    done = [d for _, d, _, _ in calls]
    assert done == sorted(done) and done[0] == 0
    assert set(done) == set(range(51))  # every row moved the count, not only the three windows' ends
    assert calls[-1] == ("score arena", 50, 50, 5)  # the rows the manifest reader refused
    assert pl.read_parquet(tmp_path / "out.parquet").equals(
        score_manifest_reference(manifest, tmp_path))


def score_manifest_reference(manifest, tmp_path) -> pl.DataFrame:
    """The same run with the plain ToyScorer (per-window progress only): reporting changes no result."""
    calls = []
    score_manifest(ScoringJob(ARENA, ToyScorer), manifest, tmp_path / "plain.parquet", window_rows=20,
                   progress=lambda stage, done, total: calls.append(done))
    assert calls == [0, 20, 40, 50]  # a Scorer that does not report still moves the count per window
    return pl.read_parquet(tmp_path / "plain.parquet")


class _StopsAtRow40(ReportingScorer):
    stop = True  # the first run stops at row 40, the resumed one goes on

    def __call__(self, rows, progress=None):
        if self.stop and "b0040" in rows["battle_id"].to_list():
            raise RuntimeError("interrupted")
        return super().__call__(rows, progress)


def test_a_resumed_run_starts_from_its_kept_rows(manifest, tmp_path, monkeypatch):
    out = tmp_path / "out.parquet"
    with pytest.raises(RuntimeError, match="interrupted"):
        score_manifest(ScoringJob(ARENA, _StopsAtRow40), manifest, out, window_rows=20)
    monkeypatch.setattr(_StopsAtRow40, "stop", False)
    calls = []
    summary = score_manifest(ScoringJob(ARENA, _StopsAtRow40), manifest, out, window_rows=20, resume=True,
                             progress=lambda stage, done, total, failed: calls.append((done, failed)))
    assert summary.resumed_shards == 2
    assert calls[0] == (40, 0) and calls[-1] == (50, 1)  # failed counts this run's rows (row 45 of the last window)
    assert sorted({done for done, _ in calls}) == list(range(40, 51))


def test_process_workers_send_row_counts_back(manifest, tmp_path):
    messages = []
    windows = ManifestWindows(manifest, ARENA, str(tmp_path))
    todo = [(k, start, min(start + 10, 50)) for k, start in enumerate(range(0, 50, 10))]
    executor = ProcessExecutor(2, threads=1, report_every=0)  # every count is sent: the test counts them
    results = dict(executor.run(ScoringJob(ARENA, ReportingScorer), windows, todo,
                                rows_done=lambda k, rows: messages.append((k, rows))))
    assert sorted(results) == [0, 1, 2, 3, 4] and sum(r.height for r in results.values()) == 50
    assert len(messages) == 50 > len(todo)  # one per row, all read before run() returned
    last = {}
    for k, rows in messages:
        assert rows > last.get(k, 0)
        last[k] = rows
    assert last == {k: 10 for k in range(5)}


def test_the_parent_sees_rows_of_a_window_still_being_scored(manifest, tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    monkeypatch.setenv("SDSCORE_PROGRESS_GATE", str(gate))
    seen = []

    def progress(stage, done, total, failed):
        seen.append((done, failed))
        if done > 0:  # window 0 waits on this file halfway: these rows are in flight
            gate.touch()

    summary = score_manifest(ScoringJob(ARENA, GatedReportingScorer), manifest, tmp_path / "out.parquet",
                             executor=ProcessExecutor(2, threads=1, report_every=0), window_rows=10,
                             progress=progress)
    assert gate.exists() and (summary.rows, summary.failed) == (50, 5)
    assert seen[0] == (0, 0) and seen[-1] == (50, 5)
    assert any(done % 10 for done, _ in seen)  # a count between window ends reached the parent
