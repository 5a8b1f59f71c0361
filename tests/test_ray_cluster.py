"""The `ray` executor on a multi-node Ray cluster started here: a head and a worker node (one CPU each,
each its own Ray node and resources; ray.cluster_utils.Cluster, always shut down), the audio, manifest
and output on a local S3 server (tests/s3_server.py). One cluster serves the module; the node-kill
test runs last among the cluster tests, as it replaces the worker node.

- results equal the in-process run row for row, with slices cut by the actors on their own nodes and
  every node scoring;
- the shipped reward model over S3 (`--store-pooled`) equals local, the workers writing to the store;
- a worker node whose raylet is killed mid-run: the run still ends (or resumes) with every id once and
  the uninterrupted run's values;
- the driver writes no shard and its memory stays flat while workers write wide states.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import soundfile as sf

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")
pytest.importorskip("moto")

from polars.testing import assert_frame_equal  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from cluster_toy_scorers import GateScorer, WhereScorer, WideScorer  # noqa: E402
from runtime_toy_scorer import ToyScorer, write_arena_manifest  # noqa: E402
from s3_server import LocalS3  # noqa: E402

from sdscore.cli import main  # noqa: E402
from sdscore.errors import SdscoreError  # noqa: E402
from sdscore.protocols.arena.spec import SPEC as ARENA  # noqa: E402
from sdscore.runtime.run import score_manifest  # noqa: E402
from sdscore.runtime.scorer import ScoringJob  # noqa: E402
from sdscore.runtime.sharded_output import ShardedOutput  # noqa: E402

SR = 16000
N_ROWS, BAD_EVERY = 24, 9
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
              pytest.mark.xdist_group("ray")]  # Ray: one xdist worker (--dist loadgroup)
#: GCS marks a node dead after 3 missed health checks of 0.5 s (default: 5 of 3 s)
FAST_HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3, "health_check_timeout_ms": 500}


class TwoNodes:
    """A head and a worker node of one CPU each, this process connected as the driver."""

    def __init__(self):
        # Ray's own folder (its sockets' paths must stay under 108 bytes: not under pytest's tmp_path)
        self.root = tempfile.mkdtemp(prefix="sdscore-cluster-")
        self.cluster = None
        try:
            self.cluster = Cluster(initialize_head=True, head_node_args={
                "num_cpus": 1, "resources": {"head_node": 1}, "include_dashboard": False,
                "temp_dir": self.root, "_system_config": FAST_HEALTH})
            self.worker = self.add_worker("worker-1")
            scratch = os.path.join(self.root, "scratch")  # the actors' temporary folders (a killed one's stay)
            os.makedirs(scratch)
            ray.init(address=self.cluster.address, log_to_driver=False,
                     runtime_env={"env_vars": {"TMPDIR": scratch}})
        except BaseException:
            self.stop()
            raise

    def add_worker(self, name: str):
        node = self.cluster.add_node(num_cpus=1, resources={name: 1})
        self.cluster.wait_for_nodes()
        return node

    def kill_raylet(self, node) -> None:
        """SIGKILL the node's raylet (its workers go with it), then let the cluster forget the node."""
        raylet = node.all_processes["raylet"][0].process
        os.kill(raylet.pid, signal.SIGKILL)
        raylet.wait(timeout=60)
        self.cluster.remove_node(node, allow_graceful=False)

    def stop(self) -> None:
        try:
            ray.shutdown()
        finally:
            try:
                if self.cluster is not None:
                    self.cluster.shutdown()
            finally:
                shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """S3 on loopback, then the cluster, whose processes inherit the store's credentials and a
    PYTHONPATH holding the toy Scorers (set before the nodes start; restored after)."""
    if ray.is_initialized():
        ray.shutdown()
    s3 = LocalS3()
    saved = {name: os.environ.get(name) for name in
             ("PYTHONPATH", "SDSCORE_CACHE_DIR", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
              *s3.env())}
    root = tmp_path_factory.mktemp("cluster")
    nodes = None
    try:
        for name in ("AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
            os.environ.pop(name, None)
        os.environ.update(s3.env())
        os.environ["SDSCORE_CACHE_DIR"] = str(root / "cache")
        tests = str(Path(__file__).parent)
        os.environ["PYTHONPATH"] = os.pathsep.join([tests, saved["PYTHONPATH"]] if saved["PYTHONPATH"] else [tests])
        nodes = TwoNodes()
        nodes.s3 = s3
        yield nodes
    finally:
        try:
            if nodes is not None:
                nodes.stop()
        finally:
            s3.stop()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture(scope="module")
def sliced(cluster, tmp_path_factory) -> str:
    """An arena manifest whose `audio_a_path` is a 0.25-s slice of one 2-s recording on S3 (row i at
    i * 0.05 s); every BAD_EVERY-th row is invalid."""
    folder = tmp_path_factory.mktemp("sliced")
    t = np.arange(2 * SR) / SR
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * (150 * t + 40 * t**2))).astype(np.float32), SR, format="WAV")
    recording = cluster.s3.put("audio/recording.wav", buffer.getvalue())
    frame = pl.read_parquet(write_arena_manifest(folder / "plain.parquet", N_ROWS, BAD_EVERY))
    frame = frame.with_columns(pl.lit(recording).alias("audio_a_path"),
                               (pl.int_range(N_ROWS) * 0.05).alias("audio_a_path_offset"),
                               pl.lit(0.25).alias("audio_a_path_duration"))
    frame.write_parquet(folder / "battles.parquet")
    return str(folder / "battles.parquet")


def _ray(job, manifest, out, cluster, **options):
    return score_manifest(job, manifest, out, executor="ray", workers=2, ray_address=cluster.cluster.address,
                          executor_options={"num_cpus_per_actor": 1}, **options)


def test_two_nodes_equal_local_with_slices_cut_where_scored(cluster, sliced, tmp_path):
    local = pl.read_parquet(score_manifest(ScoringJob(ARENA, WhereScorer, {"scale": 2.0}), sliced,
                                           tmp_path / "local.parquet", window_rows=4).out)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    job = ScoringJob(ARENA, WhereScorer, {"scale": 2.0, "barrier": str(barrier)})
    summary = _ray(job, sliced, tmp_path / "ray.parquet", cluster, window_rows=2)
    got = pl.read_parquet(summary.out)
    where = ["slice_folder", "node"]
    assert_frame_equal(got.drop(where), local.drop(where))  # ids in manifest order, values, dtypes, errors
    assert got.height == N_ROWS and got["slice_rms"].drop_nulls().len() == N_ROWS - N_ROWS // BAD_EVERY
    assert got["node"].n_unique() == 2  # one actor (1 CPU) per node
    staging = str(tmp_path)  # the driver cut the local run's slices beside its output, the actors their own
    assert all(folder.startswith(staging) for folder in local["slice_folder"].drop_nulls())
    scratch = os.path.join(cluster.root, "scratch")  # the actors' temporary folder (TMPDIR) on their nodes
    assert all(folder.startswith(scratch) for folder in got["slice_folder"].drop_nulls())
    assert not os.listdir(scratch)  # each window's slices removed after it
    assert not Path(str(summary.out) + ".parts").exists()


def test_reward_on_s3_with_pooled_states_equals_local(cluster, tmp_path):
    from sdscore.corpus import write_manifest
    from sdscore.corpus.schemas import REWARD_PAIRS

    s3, rng, rows = cluster.s3, np.random.default_rng(3), []
    for i in range(6):
        sides = {}
        for side in ("chosen", "rejected"):
            turns = []
            for t in range(2):
                buffer = io.BytesIO()
                tone = np.sin(2 * np.pi * rng.uniform(150, 400) * np.arange(int(rng.uniform(0.3, 0.6) * SR)) / SR)
                sf.write(buffer, (0.2 * tone).astype(np.float32), SR, format="WAV", subtype="FLOAT")
                name = f"{i}-{side}-{t}.wav"
                s3.put(f"reward/{name}", buffer.getvalue())
                turns.append({"role": ("user", "assistant")[t], "text": f"turn {t} of {side} {i}", "audio_path": name})
            sides[side] = turns
        rows.append({"pair_id": f"p{i}", "criterion": "modality", "subset": "wild", "category": "c", "source": "s",
                     "margin": None, **sides})
    write_manifest(pl.DataFrame(rows, schema=REWARD_PAIRS), tmp_path / "pairs.parquet")
    manifest = s3.put_file("reward/pairs.parquet", tmp_path / "pairs.parquet")
    args = ["score", "reward", manifest, "--store-pooled", "--window-rows", "2"]
    assert main([*args, "--out", str(tmp_path / "local.parquet")]) == 0
    out = s3.uri("reward/out.parquet")
    assert main([*args, "--out", out, "--ray", cluster.cluster.address, "--workers", "2", "--ray-cpus", "1"]) == 0
    got, local = pl.read_parquet(io.BytesIO(s3.get("reward/out.parquet"))), pl.read_parquet(tmp_path / "local.parquet")
    assert_frame_equal(got, local, check_exact=False, rel_tol=0, abs_tol=1e-6)
    assert got["pair_id"].to_list() == [f"p{i}" for i in range(6)] and got["error"].null_count() == 6
    assert s3.keys("reward/out.parquet") == ["reward/out.parquet"]  # no shard, attempt or lock left


def test_object_store_attempts_are_moved_onto_their_shards_or_say_why(cluster, tmp_path):
    """The commit on a store (no Ray needed): a worker's attempt object moved onto the shard's name by the
    store; a missing attempt or an unwritable bucket is one error naming the object."""
    from sdscore.runtime.object_output import ObjectShardedOutput
    from sdscore.runtime.shard_sink import ShardSink

    s3 = cluster.s3

    def objects() -> list[str]:  # (not pyarrow's empty "folder" markers)
        return [key for key in s3.keys("commit/") if not key.endswith("/")]

    output = ObjectShardedOutput(s3.uri("commit/out.parquet"), 4, 2, {"protocol": "toy"}, False, staging_dir=tmp_path)
    frame = pl.DataFrame({"id": ["a", "b"], "error": [None, "bad"]}, schema={"id": pl.String, "error": pl.String})
    sink = output.sink()
    first = sink.write(0, frame)
    runs = "commit/out.parquet.parts/attempt-runs.json"  # the run listed before its workers write
    assert first.failed == 1 and objects() == sorted([runs, first.location.split("/", 3)[3]])
    output.commit_shard(0, first)
    assert objects() == [runs, "commit/out.parquet.parts/part-000000.parquet", "commit/out.parquet.parts/run.json"]
    gone = sink.write(1, frame)
    s3.client.delete_object(Bucket=gone.location.split("/")[2], Key=gone.location.split("/", 3)[3])
    with pytest.raises(SdscoreError, match=r"out\.parquet\.parts/part-000001\.parquet: could not commit the shard "
                                           r"of rows 3\.\.4 .*rerun with --resume"):
        output.commit_shard(1, gone)
    sink.write(1, frame)  # an attempt never reported
    output.abandon()  # this run's uncommitted attempt and its listing go; the committed shard and the record stay
    assert objects() == ["commit/out.parquet.parts/part-000000.parquet", "commit/out.parquet.parts/run.json"]
    with pytest.raises(SdscoreError, match=r"s3://no-such-bucket/out\.parquet\.parts/part-000002\.ab12-[0-9a-f]+"
                                           r"\.attempt\.parquet: could not write the results of shard 2"):
        ShardSink("s3://no-such-bucket/out.parquet.parts", "ab12").write(2, frame)


def _rss() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_workers_write_wide_states_and_the_driver_stays_flat(cluster, tmp_path, monkeypatch):
    """While the windows are scored the driver holds no result (it writes no shard, and its memory does not
    grow with the states); the merge afterwards streams one shard at a time, as for any executor."""
    width, n_rows, window = 65536, 96, 8  # 256 KiB of state per row, 24 MiB in all
    manifest = write_arena_manifest(tmp_path / "wide.parquet", n_rows, BAD_EVERY)
    job = ScoringJob(ARENA, WideScorer, {"scale": 1.0, "width": width})
    _ray(job, write_arena_manifest(tmp_path / "warm.parquet", 16), tmp_path / "warm.out.parquet", cluster,
         window_rows=window)  # imports and Ray Data's own start-up before the baseline

    def refuse(*_):
        raise AssertionError("the driver wrote a shard")

    merge, done, peak = ShardedOutput.finish, threading.Event(), [0]

    def finish(self, provenance):
        done.set()  # the scoring pass is over
        return merge(self, provenance)

    monkeypatch.setattr(ShardedOutput, "write_shard", refuse)
    monkeypatch.setattr(ShardedOutput, "finish", finish)

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.01)

    baseline = _rss()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        summary = _ray(job, manifest, tmp_path / "wide.out.parquet", cluster, window_rows=window)
    finally:
        done.set()
        sampler.join()
    states = width * 4 * n_rows
    got = pl.read_parquet(summary.out, columns=["battle_id", "state"])
    assert got["battle_id"].to_list() == [f"b{i:04d}" for i in range(n_rows)] and got["state"][5][7] == 5 + 7
    grew = peak[0] - baseline
    assert grew < states / 3, f"the driver grew {grew / 2**20:.1f} MiB while workers wrote {states / 2**20:.0f} MiB"


def test_a_worker_node_killed_mid_run_still_gives_every_id_once(cluster, tmp_path):
    """Both actors stop in their first window until the test opens the gate; the worker node's raylet is
    killed there, a fresh node joins, the gate opens: the lost windows are redone on the restarted actor."""
    manifest = write_arena_manifest(tmp_path / "battles.parquet", N_ROWS, BAD_EVERY)
    gate = tmp_path / "gate"
    gate.mkdir()
    job = ScoringJob(ARENA, GateScorer, {"scale": 2.0, "gate": str(gate)})
    out = tmp_path / "killed.parquet"
    outcome = {}

    def run():
        try:
            outcome["summary"] = _ray(job, manifest, out, cluster, window_rows=4)
        except BaseException as error:  # noqa: BLE001 - the test decides
            outcome["error"] = error

    runner = threading.Thread(target=run)
    runner.start()
    worker_node = cluster.worker.node_id
    deadline = time.monotonic() + 300  # a guard against a hang, not a timing check
    while not any(marker.name.startswith(f"at-{worker_node}") for marker in gate.iterdir()):
        assert runner.is_alive() and time.monotonic() < deadline, outcome
        time.sleep(0.05)
    cluster.kill_raylet(cluster.worker)
    cluster.worker = cluster.add_worker("worker-2")
    (gate / "open").touch()
    runner.join(timeout=300)
    assert not runner.is_alive()
    if "error" in outcome:  # the run stopped: --resume finishes it
        assert isinstance(outcome["error"], SdscoreError), outcome["error"]
        outcome["summary"] = _ray(job, manifest, out, cluster, window_rows=4, resume=True)
    got = pl.read_parquet(out)
    expected = pl.read_parquet(score_manifest(ScoringJob(ARENA, ToyScorer, {"scale": 2.0}), manifest,
                                              tmp_path / "local.parquet", window_rows=4).out)
    assert got["battle_id"].n_unique() == got.height == N_ROWS
    assert_frame_equal(got, expected)
    assert not Path(str(out) + ".parts").exists()  # every attempt committed or deleted
