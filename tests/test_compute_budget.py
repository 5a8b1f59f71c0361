"""The one compute budget (sdscore.runtime.compute_budget): where cores() comes from, how the
executors share it among their workers, and that no process pool starts inside a pool's worker."""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from runtime_toy_scorer import write_arena_manifest

from sdscore.runtime import compute_budget
from sdscore.runtime.compute_budget import (
    BudgetError,
    budget,
    cores,
    in_pool,
    library_threads,
    process_pool_size,
    share,
    thread_pool_size,
    torch_threads_within,
)

ENGINE = Path(__file__).resolve().parents[1] / "engine" / "sdscore"


@pytest.fixture
def machine(monkeypatch):
    """A machine of `n` cores (os.sched_getaffinity patched), no budget from the environment."""
    monkeypatch.delenv(compute_budget.CORES_ENV, raising=False)
    monkeypatch.delenv(compute_budget.POOL_MEMBER_ENV, raising=False)

    def of(n: int) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)

    return of


def test_cores_default_to_the_cpus_this_process_may_run_on(machine):
    machine(6)
    assert cores() == 6 and not in_pool()


def test_cores_fall_back_to_the_cpu_count_without_affinity(machine, monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    assert cores() == 5
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: one core
    assert cores() == 1


def test_the_environment_sets_the_budget(machine, monkeypatch):
    machine(8)
    monkeypatch.setenv("SDSCORE_CORES", " 3 ")
    assert cores() == 3
    monkeypatch.setenv("SDSCORE_CORES", "12")  # a parent's word is kept, even above the machine's
    assert cores() == 12


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_environment_budget_is_refused(machine, monkeypatch, value):
    monkeypatch.setenv("SDSCORE_CORES", value)
    with pytest.raises(BudgetError, match=rf"the environment variable SDSCORE_CORES must be a whole number of cores >= 1, got '{value}'"):
        cores()


def test_a_scope_overrides_the_environment_and_is_undone(machine, monkeypatch):
    machine(8)
    monkeypatch.setenv("SDSCORE_CORES", "4")
    with budget(2, pool_member=True) as n:
        assert (n, cores(), in_pool()) == (2, 2, True)
        with budget(1):  # pool membership is kept unless given
            assert (cores(), in_pool()) == (1, True)
        assert cores() == 2
    assert (cores(), in_pool()) == (4, False)
    with pytest.raises(BudgetError, match="the compute budget must be a whole number of cores >= 1, got 0"):
        with budget(0):
            pass
    assert cores() == 4


def test_pool_membership_comes_from_the_environment(machine, monkeypatch):
    machine(4)
    monkeypatch.setenv("SDSCORE_POOL_MEMBER", "1")
    assert in_pool() and process_pool_size(3) == 1 and process_pool_size() == 1
    assert thread_pool_size() == 4  # threads of a worker use its share; only process pools stop


def test_pool_sizes(machine):
    machine(4)
    assert (thread_pool_size(), thread_pool_size(items=2), thread_pool_size(items=0)) == (4, 2, 1)
    assert (thread_pool_size(6), process_pool_size(6, items=3), process_pool_size()) == (6, 3, 4)
    with pytest.raises(BudgetError, match="the number of threads must be a whole number of cores >= 1, got 0"):
        thread_pool_size(0)


def test_shares(machine):
    machine(4)
    assert (share(1), share(2), share(3), share(8), share(2, total=9)) == (4, 2, 1, 1, 4)
    with pytest.raises(BudgetError, match="the number of workers must be a whole number of cores >= 1, got 0"):
        share(0)


def test_library_threads_are_the_library_default_with_the_whole_machine(machine):
    machine(4)
    assert library_threads() == 0
    with budget(2):
        assert library_threads() == 2


def test_become_worker_sets_the_share_for_the_worker_and_its_children(machine, monkeypatch):
    machine(8)
    for name in compute_budget.THREAD_ENVS:
        monkeypatch.delenv(name, raising=False)
    compute_budget.become_worker(3)  # monkeypatch restores the environment afterwards
    assert (cores(), in_pool()) == (3, True)
    assert {name: os.environ[name] for name in compute_budget.THREAD_ENVS} == dict.fromkeys(compute_budget.THREAD_ENVS, "3")


def test_torch_threads_are_capped_for_a_block_and_given_back():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch_threads_within(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        with torch_threads_within(4):  # a lower setting of the caller's is kept
            assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_processes_executor_gives_each_worker_its_share(machine):
    from sdscore.runtime.executors.processes import ProcessExecutor

    machine(4)
    assert ProcessExecutor(2).threads == 2 and ProcessExecutor(3).threads == 1 and ProcessExecutor(8).threads == 1
    assert ProcessExecutor(2, threads=3).threads == 3  # an explicit choice is kept
    with budget(6):
        assert ProcessExecutor(2).threads == 3


def _arena():
    """The arena manifest spec (a protocol package's spec.SPEC; before that move, its name stood for it)."""
    try:
        from sdscore.protocols.arena.spec import SPEC
    except ImportError:
        return "arena"
    return SPEC


def _noise_batch(items: int = 3):
    from sdscore.audio import AudioBatch
    from sdscore.ragged import pack

    rng = np.random.default_rng(0)
    data, offsets = pack([rng.uniform(-0.3, 0.3, 8000 + 800 * i).astype(np.float32) for i in range(items)])
    return AudioBatch(data, offsets, [None] * items, 16000)


class BudgetScorer:
    """Reports, per row, the budget its worker sees and whether a 4-job ProcessExtractor started processes."""

    def __init__(self, jobs: int = 4):
        from sdscore.features.process_extractor import ProcessExtractor

        self.cores, self.in_pool = cores(), in_pool()
        self.extractor = ProcessExtractor("loudness", jobs)

    def __call__(self, rows: pl.DataFrame) -> pl.DataFrame:
        self.extractor.run(_noise_batch())
        return rows.select(
            "battle_id",
            pl.lit(self.cores).alias("cores"),
            pl.lit(self.in_pool).alias("in_pool"),
            pl.lit(self.extractor.jobs).alias("jobs"),
            pl.lit(len(multiprocessing.active_children())).alias("children"),
            pl.lit(os.environ.get("OMP_NUM_THREADS")).alias("omp"),
            pl.lit(sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None).alias("torch_threads"),
            "error",
        )

    def close(self) -> None:
        self.extractor.close()


def test_processes_workers_get_half_of_the_cores_and_start_no_pool(machine, tmp_path):
    from sdscore.runtime.run import score_manifest
    from sdscore.runtime.scorer import ScoringJob

    machine(6)  # not this machine's count: the workers can only learn 3 from their parent
    manifest = write_arena_manifest(tmp_path / "battles.parquet", n_rows=8, bad_every=100)
    score_manifest(ScoringJob(_arena(), BudgetScorer), manifest, tmp_path / "out.parquet",
                   executor="processes", workers=2, window_rows=2)
    seen = pl.read_parquet(tmp_path / "out.parquet")
    assert seen.height == 8
    assert seen.select("cores", "in_pool", "jobs", "children", "omp").unique().to_dicts() == [
        {"cores": 3, "in_pool": True, "jobs": 1, "children": 0, "omp": "3"}
    ]
    assert not in_pool() and cores() == 6  # the parent's own budget is untouched


def test_the_local_executor_has_the_whole_budget_and_caps_torch_to_it(machine, tmp_path):
    from sdscore.runtime.run import score_manifest
    from sdscore.runtime.scorer import ScoringJob

    torch = pytest.importorskip("torch")
    machine(4)
    manifest = write_arena_manifest(tmp_path / "battles.parquet", n_rows=4, bad_every=100)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        with budget(2):
            score_manifest(ScoringJob(_arena(), BudgetScorer, {"jobs": 1}), manifest, tmp_path / "out.parquet",
                           window_rows=2)
        assert torch.get_num_threads() == 3  # the caller's setting is back
    finally:
        torch.set_num_threads(before)
    seen = pl.read_parquet(tmp_path / "out.parquet")
    assert seen.select("cores", "in_pool", "torch_threads").unique().to_dicts() == [
        {"cores": 2, "in_pool": False, "torch_threads": 2}
    ]


def test_a_process_extractor_inside_a_pool_runs_in_process(machine):
    from sdscore.features.extract import extract
    from sdscore.features.process_extractor import ProcessExtractor

    machine(4)
    assert ProcessExtractor("loudness", jobs=3).jobs == 3  # outside a pool the jobs are kept
    before = set(multiprocessing.active_children())
    with budget(2, pool_member=True):
        ex = ProcessExtractor("loudness", jobs=3)
        got = extract([ex], _noise_batch())
    assert ex.jobs == 1 and ex._pool is None and set(multiprocessing.active_children()) == before
    assert got.equals(extract(["loudness"], _noise_batch()))


def test_feature_process_counts_default_to_the_budget(machine):
    from sdscore.features.blueprint import BlueprintBuilder

    machine(4)
    assert BlueprintBuilder(asr=None).jobs == 4
    assert BlueprintBuilder(asr=None, jobs=2).jobs == 2
    with budget(3):
        assert BlueprintBuilder(asr=None).jobs == 3
    with budget(3, pool_member=True):
        assert BlueprintBuilder(asr=None, jobs=2).jobs == 1


def test_thread_defaults_follow_the_budget(machine):
    from sdscore.features.pitch import YinPitch

    machine(4)
    with budget(3):
        assert YinPitch().num_threads == 3
    assert YinPitch(num_threads=2).num_threads == 2


def _machine_queries(tree: ast.AST) -> list[int]:
    """Lines that ask the OS for its CPUs: os.cpu_count / os.sched_getaffinity / multiprocessing.cpu_count,
    called or imported by name."""
    banned = {"cpu_count", "sched_getaffinity", "process_cpu_count"}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in banned:
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module in ("os", "multiprocessing") and any(
            alias.name in banned for alias in node.names
        ):
            lines.append(node.lineno)
    return lines


def test_the_query_finder_finds_each_form():
    source = ("import os, multiprocessing\nfrom os import sched_getaffinity\n"
              "a = os.cpu_count()\nb = multiprocessing.cpu_count()\nc = len(os.sched_getaffinity(0))\n")
    assert sorted(_machine_queries(ast.parse(source))) == [2, 3, 4, 5]


def test_only_the_compute_budget_asks_the_machine_for_its_cores():
    offenders = []
    for path in sorted(ENGINE.rglob("*.py")):
        if path.name == "compute_budget.py" and path.parent.name == "runtime":
            continue
        for line in _machine_queries(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            offenders.append(f"{path.relative_to(ENGINE.parent)}:{line}")
    assert offenders == [], "use sdscore.runtime.compute_budget.cores() instead"
