"""The one compute budget (sdscore.runtime.compute_budget): where cores() comes from, how the
executors share it among their workers, and that no process pool starts inside a pool's worker."""

from __future__ import annotations

import ast
import multiprocessing
import os
import re
import subprocess
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
    blas_threads_within,
)

ENGINE = Path(__file__).resolve().parents[1] / "engine" / "sdscore"


@pytest.fixture
def machine(monkeypatch):
    """A machine of `n` cores (os.sched_getaffinity patched) and a cgroup CPU quota of `quota`
    cores (default none), no budget from the environment."""
    monkeypatch.delenv(compute_budget.CORES_ENV, raising=False)
    monkeypatch.delenv(compute_budget.POOL_MEMBER_ENV, raising=False)
    monkeypatch.setattr(compute_budget, "quota_cores", lambda: None)

    def of(n: int, quota: int | None = None) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)
        monkeypatch.setattr(compute_budget, "quota_cores", lambda: quota)

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
    for name in (*compute_budget.THREAD_ENVS, compute_budget.CORES_ENV, compute_budget.POOL_MEMBER_ENV):
        monkeypatch.setenv(name, "")  # registers the variable, so monkeypatch restores it (or its absence)
        monkeypatch.delenv(name)      # afterwards: become_worker sets every one of them
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    try:
        compute_budget.become_worker(3)
        assert (cores(), in_pool()) == (3, True)
        assert {name: os.environ[name] for name in compute_budget.THREAD_ENVS} == dict.fromkeys(compute_budget.THREAD_ENVS, "3")
    finally:
        torch.set_num_threads(threads)


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


def test_blas_threads_are_capped_for_a_block_and_given_back():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    assert blas_threads(), "numpy's BLAS is loaded"
    with threadpool_limits(limits=2, user_api="blas"):
        with blas_threads_within(1):
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {2}
        with threadpool_limits(limits=1, user_api="blas"), blas_threads_within(2):  # a lower setting is kept
            assert set(blas_threads()) == {1}
    with pytest.raises(BudgetError, match="the number of BLAS threads must be a whole number of cores >= 1, got 0"):
        with blas_threads_within(0):
            pass


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


# ---- the cgroup CPU quota (sdscore.runtime.cgroup_quota) --------------------------------------------

def _cgroup(tmp_path, membership: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A fake cgroup root under tmp_path with `files` (relative path: text) and a membership file."""
    root = tmp_path / "cgroup"
    root.mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "self-cgroup").write_text(membership)
    return root, tmp_path / "self-cgroup"


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("200000 100000\n", 2), ("150000 100000\n", 2), ("50000 100000\n", 1), ("100000 100000", 1),
    ("max 100000\n", None), ("max\n", None),
])
def test_a_v2_quota_is_ceil_quota_over_period(tmp_path, cpu_max, expected):
    from sdscore.runtime.cgroup_quota import quota_cores

    root, membership = _cgroup(tmp_path, "0::/\n", {"cpu.max": cpu_max})
    assert quota_cores(root, membership) == expected


def test_the_tightest_quota_on_the_path_up_to_the_root_counts(tmp_path):
    from sdscore.runtime.cgroup_quota import quota_cores

    root, membership = _cgroup(tmp_path, "0::/kubepods/pod1/box\n", {
        "kubepods/pod1/box/cpu.max": "400000 100000\n", "kubepods/pod1/cpu.max": "300000 100000\n",
        "kubepods/cpu.max": "max 100000\n"})
    assert quota_cores(root, membership) == 3


def test_a_host_path_missing_from_the_containers_mount_finds_the_mounts_own_quota(tmp_path):
    """Without a cgroup namespace /proc/self/cgroup names the host's path; the container's mount is its own cgroup."""
    from sdscore.runtime.cgroup_quota import quota_cores

    root, membership = _cgroup(tmp_path, "0::/system.slice/docker-abc.scope\n", {"cpu.max": "100000 100000\n"})
    assert quota_cores(root, membership) == 1


@pytest.mark.parametrize(("mount", "quota", "period", "expected"), [
    ("cpu,cpuacct", "250000\n", "100000\n", 3), ("cpu,cpuacct", "-1\n", "100000\n", None),
    ("cpu", "50000\n", "100000\n", 1),
])
def test_a_v1_quota_is_read_from_the_cpu_controller(tmp_path, mount, quota, period, expected):
    from sdscore.runtime.cgroup_quota import quota_cores

    root, membership = _cgroup(tmp_path, "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n", {
        f"{mount}/docker/abc/cpu.cfs_quota_us": quota, f"{mount}/docker/abc/cpu.cfs_period_us": period,
        "memory/docker/abc/cpu.cfs_quota_us": "100000\n", "memory/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert quota_cores(root, membership) == expected


def test_a_hybrid_machine_takes_v1_quota_and_the_tighter_of_both(tmp_path):
    from sdscore.runtime.cgroup_quota import quota_cores

    files = {"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}
    root, membership = _cgroup(tmp_path, "1:cpu:/\n0::/\n", files)  # no cpu.max on the v1 tmpfs root
    assert quota_cores(root, membership) == 4
    (root / "cpu.max").write_text("200000 100000\n")
    assert quota_cores(root, membership) == 2


def test_no_cgroups_is_no_quota(tmp_path):
    from sdscore.runtime.cgroup_quota import quota_cores

    assert quota_cores(tmp_path / "nowhere", tmp_path / "no-self-cgroup") is None
    root, membership = _cgroup(tmp_path, "0::/\n", {})
    assert quota_cores(root, membership) is None  # a v2 root cgroup has no cpu.max
    (tmp_path / "garbled").write_text("no colons here\n\n")
    assert quota_cores(root, tmp_path / "garbled") is None


@pytest.mark.parametrize(("content", "problem"), [
    (b"lots 100000\n", r"the quota 'lots' is not a whole number"),
    (b"100000 0\n", r"the period 0 is not positive"),
    (b"0 100000\n", r"the quota is 0"),
    (b"-5 100000\n", r"the quota -5 is negative"),
    (b"\n", r"expected 'QUOTA PERIOD', got ''"),
    (b"1 2 3\n", r"expected 'QUOTA PERIOD', got '1 2 3'"),
    (b"200000\n", r"expected 'QUOTA PERIOD', got '200000'"),
    (b"max soon\n", r"the period 'soon' is not a whole number"),
    (b"\xff\xfe", r"'ascii' codec can't decode"),
    (None, r"\[Errno 21\] Is a directory"),  # a folder where the file should be
])
def test_a_malformed_v2_quota_is_ignored_with_a_warning(tmp_path, content, problem):
    from sdscore.runtime.cgroup_quota import quota_cores

    root, membership = _cgroup(tmp_path, "0::/\n", {})
    if content is None:
        (root / "cpu.max").mkdir()
    else:
        (root / "cpu.max").write_bytes(content)
    with pytest.warns(RuntimeWarning, match=rf"sdscore: ignoring the CPU quota in {re.escape(str(root))}/cpu\.max: {problem}"):
        assert quota_cores(root, membership) is None


@pytest.mark.parametrize(("quota", "period", "problem"), [
    ("abc\n", "100000\n", r"the quota 'abc' is not a whole number"),
    ("100000\n", "0\n", r"the period 0 is not positive"),
    ("100000\n", None, r"a quota of 100000 but no .*cpu\.cfs_period_us"),
])
def test_a_malformed_v1_quota_is_ignored_with_a_warning_and_the_next_one_up_counts(tmp_path, quota, period, problem):
    from sdscore.runtime.cgroup_quota import quota_cores

    files = {"cpu/box/cpu.cfs_quota_us": quota, "cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}
    if period is not None:
        files["cpu/box/cpu.cfs_period_us"] = period
    root, membership = _cgroup(tmp_path, "3:cpu:/box\n", files)
    with pytest.warns(RuntimeWarning, match=rf"ignoring the CPU quota in {re.escape(str(root / 'cpu' / 'box'))}/cpu\.cfs_quota_us: {problem}"):
        assert quota_cores(root, membership) == 3


def test_an_unreadable_membership_file_is_no_quota_with_a_warning(tmp_path):
    from sdscore.runtime.cgroup_quota import quota_cores

    (tmp_path / "self-cgroup").mkdir()
    with pytest.warns(RuntimeWarning, match=r"sdscore: no CPU quota read: cannot read .*self-cgroup \(\[Errno 21\] Is a directory"):
        assert quota_cores(tmp_path, tmp_path / "self-cgroup") is None


def test_the_quota_caps_the_machines_cores_and_the_budget(machine, monkeypatch):
    machine(8, quota=3)
    assert (compute_budget.machine_cores(), cores()) == (3, 3)
    assert library_threads() == 3  # a library would size its pool to the 8 cores it sees
    machine(2, quota=6)  # the affinity is tighter
    assert cores() == 2 and library_threads() == 0
    machine(8, quota=3)
    monkeypatch.setenv("SDSCORE_CORES", "5")  # a parent's (or the user's) word is kept
    assert cores() == 5


def test_the_quota_is_read_once_per_process(monkeypatch):
    from sdscore.runtime import cgroup_quota

    reads = []
    monkeypatch.setattr(cgroup_quota, "quota_cores", lambda: reads.append(1) or 2)
    compute_budget.quota_cores.cache_clear()
    try:
        assert [compute_budget.quota_cores() for _ in range(3)] == [2, 2, 2] and len(reads) == 1
        assert compute_budget.machine_cores() == min(2, compute_budget.affinity_cores())
    finally:
        compute_budget.quota_cores.cache_clear()  # the real quota is read again next time


# ---- OpenMP waiting: set by `import sdscore`, before torch loads libgomp ---------------------------

_WAITING_PROBE = "import os, sdscore, torch; torch.ones(4).sum(); print(os.environ['OMP_WAIT_POLICY'])"


def _openmp_settings(env: dict[str, str]) -> subprocess.CompletedProcess:
    """A fresh interpreter that imports sdscore then torch, with libgomp printing its settings."""
    pytest.importorskip("torch")
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    return subprocess.run([sys.executable, "-c", _WAITING_PROBE], env={**clean, "OMP_DISPLAY_ENV": "VERBOSE", **env},
                          capture_output=True, text=True, timeout=120, check=True)


def test_importing_sdscore_makes_torchs_openmp_threads_wait_passively():
    done = _openmp_settings({})
    assert done.stdout.strip() == "PASSIVE"
    if "OMP_WAIT_POLICY" not in done.stderr:
        pytest.skip("torch's OpenMP runtime does not print its settings (not libgomp)")
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in done.stderr and "GOMP_SPINCOUNT = '0'" in done.stderr  # no spinning


def test_a_users_own_wait_policy_is_kept():
    done = _openmp_settings({"OMP_WAIT_POLICY": "ACTIVE"})
    assert done.stdout.strip() == "ACTIVE"
    if "OMP_WAIT_POLICY" not in done.stderr:
        pytest.skip("torch's OpenMP runtime does not print its settings (not libgomp)")
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in done.stderr and "GOMP_SPINCOUNT = '0'" not in done.stderr

