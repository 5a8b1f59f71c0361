"""Runtime scaling: rows/s and peak memory of score_manifest as the manifest grows, and per executor.

Every measurement is one `score_manifest` call in a fresh Python subprocess (this script re-run
with --child, in the environment this script was started with), which prints one JSON line: rows,
wall seconds, the Scorer's construction time (a timing wrapper on its __init__; local executor
only), its own peak RSS (ru_maxrss), RUSAGE_CHILDREN's ru_maxrss (on Linux the peak of the LARGEST
reaped child, not a sum) and, in section 3 (every executor), the peak PSS summed over the
whole process tree (driver, workers, Ray's daemons and actors; /proc sampled every 0.2 s, so a
shorter spike can be missed). Measurements are interleaved over rounds (3; --repeats; 1 with
--quick) and the median of each figure is reported.

1. Protocols on the synthetic tiny corpus (out/bench-corpus-tiny, built once) repeated 1x, 4x, 16x
   (copies get new ids, audio paths made absolute): reward (shipped compact model), consistency
   (embedder="ge2e") and judge (judge="rule"), local executor. consistency and judge run with a
   content-hash cache_dir (out/bench-scale-cache) warmed once beforehand, so their rows measure the
   runtime + cache hits, not embedding or feature extraction; one UNCACHED 1x row each shows the
   real cost (judge's only without --quick: about 20-30 s a run). reward has no cache: every row is
   scored. rows/s leave the Scorer's start-up (model load) out; "marginal" = added rows / added
   seconds between two sizes (fixed costs cancel: flat when time is linear in rows). peer = 1x.
2. EchoScorer (bench/scale_scorers.py, a trivial Scorer) over arena manifests of 10k, 100k and 1M
   rows (--quick: 10k, 100k), window_rows=8192, local: the runtime alone. peer = the smallest. The
   one per-row state the runtime keeps is the id frame (unique keys + first-row index); its size
   is a row of the table, so the RSS growth can be set against it.
3. Executors on the same inputs (reward 64x; echo 100k): processes x1/x2 and ray x1/x2 (--quick:
   x2 only) vs local; every output is compared with local's (same ids in order, same values, floats
   to 1e-5) and the bench stops on a difference. Ray's start-up (ray.init, done in the child before
   the run) is timed apart; its overhead vs local is a table in seconds.

4. `--nodes` (only this section): a local multi-node Ray cluster on this machine (ray.cluster_utils:
   a head and 0 or 1 worker node of ONE CPU each, one actor of one CPU per node; started and shut
   down inside the measuring process, its start timed apart). reward 256x on 1 node and on 2 nodes
   (scaling efficiency = rows/s on 2 / (2 x rows/s on 1); outputs checked equal to a local run),
   the same input locally on one core (SDSCORE_CORES=1: rows/s per CPU core, the cost model's
   figure), and EchoScorer over 100k and 1M arena rows on 2 nodes with the workers writing their
   shards: the driver's own RSS (VmRSS sampled every 0.05 s during score_manifest) above its
   baseline, against the run's id frame. Prints the cost model: CPU-core hours (and machines of
   --cost-cores cores for a day) for 10M pairs at the measured per-core rate.

Takes, after the one-time corpus build (about 20-60 s) and cache fill (about 40 s): about
9 minutes on 2 CPU cores; --quick (1 round, small sizes, fewer executors) about 1.5 minutes.
"""

from __future__ import annotations

import os

_ENV = dict(os.environ)  # children get this, before any import here (polars, ray) edits os.environ

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
from common import Row, parser, report  # noqa: E402

CORPUS = REPO / "out" / "bench-corpus-tiny"
CACHE = REPO / "out" / "bench-scale-cache"
MULTIPLES = (1, 4, 16)
ARENA_ROWS = (10_000, 100_000, 1_000_000)
ECHO_WINDOW = 8192
EXEC_ECHO_ROWS = 100_000
#: the reward corpus repeated this often for the executor rows: enough work that worker start-up
#: (spawn, imports, a model copy each) is not the whole run
EXEC_REWARD_TIMES = 64
#: section 4 (--nodes): arena rows of the driver-memory runs on 2 nodes; pairs of the cost model
NODES_ECHO_ROWS = (100_000, 1_000_000)
#: section 4: the reward corpus repeated this often (long enough that the actors' start-up is a small part)
NODES_REWARD_TIMES = 256
COST_PAIRS = 10_000_000
#: protocol → (corpus file, id column, settings (cached), settings of the uncached row)
PROTOCOLS = {
    "reward": ("reward_pairs.parquet", "pair_id", {}, None),
    "consistency": ("consistency.parquet", "instance_id", {"embedder": "ge2e", "cache_dir": str(CACHE / "consistency")},
                    {"embedder": "ge2e"}),
    "judge": ("judge_items.parquet", "item_id", {"judge": "rule", "cache_dir": str(CACHE / "judge")},
              {"judge": "rule"}),
}
EXECUTORS = (("local", 1), ("processes", 1), ("processes", 2), ("ray", 1), ("ray", 2))
QUICK_EXECUTORS = (("local", 1), ("processes", 2), ("ray", 2))
KIB = 1024.0  # ru_maxrss and /proc figures are KiB


# --------------------------------------------------------------------------------------- child side


def tree_pss_kib(root: int) -> int:
    """PSS of `root` and all its descendants (KiB), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
        except OSError:
            pass
    return total


def own_rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)


class DriverSampler:
    """Peak VmRSS of this process alone (the driver), sampled on a thread every `interval` seconds."""

    def __init__(self, interval: float = 0.05):
        self.interval, self.baseline, self.peak = interval, own_rss_kib(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, own_rss_kib())
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class LocalCluster:
    """A head and `nodes - 1` worker nodes of one CPU each (ray.cluster_utils), this process the driver."""

    def __init__(self, nodes: int):
        import shutil

        import ray
        from ray.cluster_utils import Cluster

        self._ray, self._rmtree = ray, shutil.rmtree
        self.folder = tempfile.mkdtemp(prefix="sdscore-nodes-")  # short: Ray's socket paths are limited
        self.cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                                      "temp_dir": self.folder})
        try:
            for _ in range(nodes - 1):
                self.cluster.add_node(num_cpus=1)
            self.cluster.wait_for_nodes()
            ray.init(address=self.cluster.address, log_to_driver=False)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            self._ray.shutdown()
            self.cluster.shutdown()
        finally:
            self._rmtree(self.folder, ignore_errors=True)


class TreeSampler:
    """Peak PSS of this process tree, sampled on a thread every `interval` seconds."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.peak = interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, tree_pss_kib(os.getpid()))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_pss_kib(os.getpid()))


def child(spec: dict) -> dict:
    """Run one score_manifest as `spec` says; the measurements as a dict (printed as JSON)."""
    from sdscore.protocols import registry
    from sdscore.runtime.run import score_manifest
    from sdscore.runtime.scorer import ScoringJob

    if spec["job"] == "echo":
        from sdscore.manifests import manifest_spec
        from scale_scorers import EchoScorer

        job = ScoringJob(manifest_spec("arena"), EchoScorer, {})
    else:
        job = registry.protocol(spec["job"]).scoring_job(**spec["settings"])
    startup: list[float] = []
    calls: list[float] = []
    if spec["executor"] == "local":  # time the Scorer's construction (model load) and calls in this process
        import functools

        init, call = job.scorer.__init__, job.scorer.__call__

        @functools.wraps(init)  # keeps the signature the ScoringJob binds settings against
        def timed_init(self, *args, **kwargs):
            began = time.perf_counter()
            init(self, *args, **kwargs)
            startup.append(time.perf_counter() - began)

        @functools.wraps(call)
        def timed_call(self, rows):
            began = time.perf_counter()
            try:
                return call(self, rows)
            finally:
                calls.append(time.perf_counter() - began)

        job.scorer.__init__, job.scorer.__call__ = timed_init, timed_call
    if spec.get("nodes"):
        return nodes_child(spec, job)
    ray_init = None
    if spec["executor"] == "ray":  # start Ray as the executor would (same CPUs), so start-up is timed apart
        import ray

        from sdscore.runtime.executors import make_executor

        began = time.perf_counter()
        make_executor("ray", workers=spec["workers"])._start_ray(ray)
        ray_init = time.perf_counter() - began
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / KIB
    sampler = TreeSampler() if spec.get("sample") else None
    if sampler:
        sampler.__enter__()
    try:
        summary = score_manifest(job, spec["manifest"], spec["out"], executor=spec["executor"],
                                 workers=spec["workers"], window_rows=spec.get("window_rows"))
    finally:
        if sampler:
            sampler.__exit__()
    return {
        "rows": summary.rows,
        "failed": summary.failed,
        "seconds": summary.seconds,
        "startup": startup[0] if startup else None,
        "calls": sum(calls) if startup else None,
        "ray_init": ray_init,
        "baseline_mib": baseline,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / KIB,
        "children_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / KIB,
        "tree_mib": sampler.peak / KIB if sampler else None,
    }


def nodes_child(spec: dict, job) -> dict:
    """Section 4's measurement: score_manifest on a local cluster of spec["nodes"] one-CPU nodes."""
    from sdscore.runtime.run import score_manifest

    began = time.perf_counter()
    cluster = LocalCluster(spec["nodes"])
    ray_init = time.perf_counter() - began
    try:
        import ray.data  # noqa: F401 - imported before the baseline: the driver's growth is the run's, not imports'

        from sdscore.runtime.executors import ray_data  # noqa: F401

        sampler = DriverSampler()
        try:
            summary = score_manifest(job, spec["manifest"], spec["out"], executor="ray", workers=spec["nodes"],
                                     ray_address=cluster.cluster.address, window_rows=spec.get("window_rows"),
                                     executor_options={"num_cpus_per_actor": 1})
        finally:
            sampler.stop()
    finally:
        cluster.close()
    return {"rows": summary.rows, "failed": summary.failed, "seconds": summary.seconds, "ray_init": ray_init,
            "driver_base_mib": sampler.baseline / KIB, "driver_peak_mib": sampler.peak / KIB}


# -------------------------------------------------------------------------------------- parent side


def measure(spec: dict, expect_rows: int) -> dict:
    """One measurement in a fresh subprocess; stops the bench on a crash, a row count or a failed row."""
    env = {**_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(BENCH), _ENV.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          capture_output=True, text=True, env=env, timeout=900)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"measurement {spec} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
                         f"{done.stderr[-3000:]}")
    result = json.loads(lines[-1])
    if result["rows"] != expect_rows or result["failed"]:
        raise SystemExit(f"measurement {spec}: {result['rows']} rows ({result['failed']} failed), "
                         f"expected {expect_rows} good rows")
    return result


def rounds(specs: dict[str, tuple[dict, int]], n_rounds: int, keep: bool = False) -> dict[str, dict]:
    """Every spec measured once per round, rounds interleaved; per spec the median of each figure.

    Outputs are removed after each run, except (keep=True) the first round's."""
    runs: dict[str, list[dict]] = {name: [] for name in specs}
    for r in range(n_rounds):
        for name, (spec, n) in specs.items():
            kept = keep and r == 0
            out = spec["out"] if kept else str(Path(spec["out"]).with_suffix(f".r{r}.parquet"))
            runs[name].append(measure({**spec, "out": out}, n))
            if not kept:
                Path(out).unlink(missing_ok=True)
            print(f"  round {r + 1}/{n_rounds} {name}: {runs[name][-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
    return {name: {key: None if results[0][key] is None else statistics.median(v[key] for v in results)
                   for key in results[0]} for name, results in runs.items()}


def ensure_corpus() -> None:
    """The tiny synthetic corpus, built once into out/bench-corpus-tiny."""
    if all((CORPUS / f).is_file() for f, *_ in PROTOCOLS.values()):
        return
    from sdscore.synth import build_corpus

    print(f"building the tiny synthetic corpus into {CORPUS} (once) ...", file=sys.stderr, flush=True)
    build_corpus(CORPUS, seed=0, size="tiny")


def warm_cache(protocol: str, spec: dict, n: int) -> None:
    """Fill the protocol's cache_dir with the corpus (untimed; skipped when a marker says it is done)."""
    source = (CORPUS / PROTOCOLS[protocol][0]).stat()
    key = json.dumps([protocol, spec["settings"], source.st_size, source.st_mtime_ns])
    marker = CACHE / f"{protocol}.warmed"
    if marker.is_file() and marker.read_text() == key:
        return
    print(f"filling the {protocol} cache (once) ...", file=sys.stderr, flush=True)
    measure({**spec, "out": str(Path(spec["out"]).with_suffix(".warm.parquet"))}, n)
    marker.write_text(key)


def repeated_manifest(protocol: str, times: int, folder: Path) -> tuple[Path, int]:
    """The corpus manifest repeated `times` (copy c > 0 gets ids "<id>~r<c>"), audio paths absolute."""
    import polars as pl

    from sdscore.manifests import resolve_audio_paths

    name, id_column, *_ = PROTOCOLS[protocol]
    base = resolve_audio_paths(pl.read_parquet(CORPUS / name), protocol, str(CORPUS))
    copies = [base if c == 0 else base.with_columns(pl.col(id_column) + f"~r{c}") for c in range(times)]
    path = folder / f"{protocol}-x{times}.parquet"
    pl.concat(copies).write_parquet(path)
    return path, base.height * times


def id_frame_mib(path: str | Path) -> float:
    """What the runtime keeps per manifest row: the unique-key frame (as text) and the first-row index."""
    import polars as pl

    from sdscore.corpus.validate import manifest_first_rows
    from sdscore.manifests import manifest_spec

    keys = pl.scan_parquet(path).select(pl.col("battle_id").cast(pl.String)).collect()
    return (keys.estimated_size() + manifest_first_rows(keys, manifest_spec("arena")).estimated_size()) / 2**20


def rate(m: dict, n: int, steady: bool = False) -> float:
    return n / (m["seconds"] - (m["startup"] or 0.0) if steady else m["seconds"])


def marginal(a: dict, na: int, b: dict, nb: int, steady: bool) -> float:
    """Rows added over seconds added between two sizes (inf when the larger was not slower)."""
    dt = b["seconds"] - a["seconds"] - (((b["startup"] or 0.0) - (a["startup"] or 0.0)) if steady else 0.0)
    return (nb - na) / dt if dt > 0 else float("inf")


def size_rows(label: str, got: list[tuple[str, dict, int]], steady: bool) -> list[Row]:
    """Per size: rows/s, marginal rows/s (from the previous size) and peak RSS; peer = the first size's
    figure (for a marginal rate: the first size's rows/s, so ratio > 1 = added rows cost less than the average
    row of the smallest run, i.e. a fixed per-run cost dominates it)."""
    rows = []
    (_, first, n1) = got[0]
    kind = "rows/s, Scorer start-up left out" if steady else "rows/s end-to-end"
    for i, (size, m, n) in enumerate(got):
        name = f"{label} {size} ({n:,} rows)"
        rows.append(Row(f"{name}: {kind}", "rows/s", rate(m, n, steady), rate(first, n1, steady)))
        if i:
            psize, pm, pn = got[i - 1]
            rows.append(Row(f"{name}: marginal rows/s ({psize} -> {size})", "rows/s",
                            marginal(pm, pn, m, n, steady), rate(first, n1, steady)))
        rows.append(Row(f"{name}: peak RSS", "MiB", m["rss_mib"], first["rss_mib"]))
    return rows


def protocol_rows(folder: Path, multiples: tuple[int, ...], n_rounds: int,
                  uncached: tuple[str, ...]) -> tuple[list[Row], list[str]]:
    """Section 1: rows and notes."""
    specs: dict[str, tuple[dict, int]] = {}
    for protocol, (_, _, cached, _) in PROTOCOLS.items():
        for times in multiples:
            path, n = repeated_manifest(protocol, times, folder)
            specs[f"{protocol} {times}x"] = ({"job": protocol, "settings": cached, "manifest": str(path),
                                              "out": str(folder / f"out-{protocol}-x{times}.parquet"),
                                              "executor": "local", "workers": 1}, n)
    for protocol in uncached:
        spec, n = specs[f"{protocol} 1x"]
        specs[f"{protocol} 1x uncached"] = ({**spec, "settings": PROTOCOLS[protocol][3],
                                             "out": str(folder / f"out-{protocol}-uncached.parquet")}, n)
    for protocol in ("consistency", "judge"):
        warm_cache(protocol, *specs[f"{protocol} 1x"])
    got = rounds(specs, n_rounds)
    rows, notes = [], []
    for protocol in PROTOCOLS:
        sized = [(f"{t}x", got[f"{protocol} {t}x"], specs[f"{protocol} {t}x"][1]) for t in multiples]
        rows += size_rows(protocol, sized, steady=True)
        one, n1 = sized[0][1], sized[0][2]
        if protocol in uncached:
            m = got[f"{protocol} 1x uncached"]
            rows += [
                Row(f"{protocol} 1x UNCACHED: rows/s, start-up left out (peer: cached 1x)", "rows/s",
                    rate(m, n1, True), rate(one, n1, True)),
                Row(f"{protocol} 1x UNCACHED: peak RSS (peer: cached 1x)", "MiB", m["rss_mib"], one["rss_mib"]),
            ]
        notes.append(f"{protocol}: RSS after imports and job setup {one['baseline_mib']:.0f} MiB; per size, seconds "
                     f"end-to-end = Scorer start-up + inside Scorer calls + runtime: " + ", ".join(
                         f"{s} {m['seconds']:.2f} = {m['startup']:.2f} + {m['calls']:.2f} + "
                         f"{m['seconds'] - m['startup'] - m['calls']:.2f}" for s, m, _ in sized))
    return rows, notes


def echo_rows(folder: Path, sizes: tuple[int, ...], n_rounds: int) -> list[Row]:
    """Section 2: the trivial Scorer over growing arena manifests."""
    from scale_scorers import write_arena_manifest

    specs = {f"{n:,}": ({"job": "echo", "manifest": write_arena_manifest(folder / f"arena-{n}.parquet", n),
                         "out": str(folder / f"out-echo-{n}.parquet"), "executor": "local", "workers": 1,
                         "window_rows": ECHO_WINDOW}, n) for n in sizes}
    got = rounds(specs, n_rounds)
    rows = size_rows("echo", [(name, got[name], n) for name, (_, n) in specs.items()], steady=False)
    first, last = specs[f"{sizes[0]:,}"][0]["manifest"], specs[f"{sizes[-1]:,}"][0]["manifest"]
    small, large = id_frame_mib(first), id_frame_mib(last)
    grown = got[f"{sizes[-1]:,}"]["rss_mib"] - got[f"{sizes[0]:,}"]["rss_mib"]
    rows += [
        Row(f"echo: id frame (keys + first-row index) at {sizes[-1]:,} rows (peer: {sizes[0]:,})", "MiB", large, small),
        Row(f"echo: peak RSS growth {sizes[0]:,} -> {sizes[-1]:,} rows (peer: id frame growth)", "MiB", grown,
            large - small),
    ]
    return rows


def same_results(name: str, ours: str, local: str) -> str:
    """'ok ...' when ours equals local's output (ids in order exactly, floats to 1e-5); SystemExit if not."""
    import polars as pl
    from polars.testing import assert_frame_equal

    a, b = pl.read_parquet(ours), pl.read_parquet(local)
    try:
        assert_frame_equal(a, b, check_exact=False, rel_tol=1e-5, abs_tol=1e-6)
    except AssertionError as error:
        raise SystemExit(f"{name}: output differs from the local executor's: {error}") from None
    floats = [c for c, t in a.schema.items() if t.is_float()]
    worst = max((float((a[c] - b[c]).abs().max() or 0.0) for c in floats), default=0.0)
    return f"= local, max |diff| {worst:.0e}" if worst else "= local"


def executor_rows(folder: Path, n_rounds: int,
                  executors: tuple[tuple[str, int], ...]) -> tuple[list[Row], list[Row], list[Row]]:
    """Section 3: rows/s (with the output check), memory and Ray's overhead, per input and executor."""
    from scale_scorers import write_arena_manifest

    echo = write_arena_manifest(folder / f"arena-exec-{EXEC_ECHO_ROWS}.parquet", EXEC_ECHO_ROWS)
    reward, n_reward = repeated_manifest("reward", EXEC_REWARD_TIMES, folder)
    inputs = {
        f"reward {EXEC_REWARD_TIMES}x": ({"job": "reward", "settings": {}, "manifest": str(reward)}, n_reward),
        f"echo {EXEC_ECHO_ROWS // 1000}k": ({"job": "echo", "window_rows": ECHO_WINDOW, "manifest": echo},
                                            EXEC_ECHO_ROWS),
    }
    specs = {f"{label}: {ex} x{w}": ({**job, "executor": ex, "workers": w, "sample": True,
                                      "out": str(folder / f"exec-{label.split()[0]}-{ex}-{w}.parquet")}, n)
             for label, (job, n) in inputs.items() for ex, w in executors}
    got = rounds(specs, n_rounds, keep=True)
    speed, memory, overhead = [], [], []
    for label, (_, n) in inputs.items():
        local_key = f"{label}: local x1"
        local = got[local_key]
        for ex, w in executors:
            key = f"{label}: {ex} x{w}"
            m = got[key]
            check = "" if ex == "local" else f" [{same_results(key, specs[key][0]['out'], specs[local_key][0]['out'])}]"
            speed.append(Row(f"{key}{check}", "rows/s", rate(m, n), rate(local, n)))
            memory.append(Row(f"{key}: peak PSS of the process tree (sampled)", "MiB", m["tree_mib"],
                              local["tree_mib"]))
            if ex == "local":
                memory.append(Row(f"{key}: ru_maxrss", "MiB", m["rss_mib"], local["rss_mib"]))
            elif ex == "processes":
                memory.append(Row(f"{key}: driver + {w} x largest worker (ru_maxrss)", "MiB",
                                  m["rss_mib"] + w * m["children_mib"], local["rss_mib"]))
            else:
                overhead += [
                    Row(f"{key}: ray.init (start-up)", "s", m["ray_init"], local["seconds"]),
                    Row(f"{key}: run - local run", "s", m["seconds"] - local["seconds"], local["seconds"]),
                    Row(f"{key}: start-up + run - local run", "s", m["ray_init"] + m["seconds"] - local["seconds"],
                        local["seconds"]),
                ]
    return speed, memory, overhead


def nodes_rows(folder: Path, n_rounds: int, cost_cores: int) -> tuple[list[Row], list[str]]:
    """Section 4: 1 vs 2 one-CPU Ray nodes, the driver's RSS on 2 nodes, and the cost model's figures."""
    from scale_scorers import write_arena_manifest

    reward, n_reward = repeated_manifest("reward", NODES_REWARD_TIMES, folder)
    base = {"job": "reward", "settings": {}, "manifest": str(reward)}
    label = f"reward {NODES_REWARD_TIMES}x"
    specs = {
        f"{label}: local, 1 core": ({**base, "executor": "local", "workers": 1, "cores": 1,
                                     "out": str(folder / "nodes-local.parquet")}, n_reward),
        f"{label}: ray, 1 node": ({**base, "executor": "ray", "nodes": 1, "out": str(folder / "nodes-1.parquet")},
                                  n_reward),
        f"{label}: ray, 2 nodes": ({**base, "executor": "ray", "nodes": 2, "out": str(folder / "nodes-2.parquet")},
                                   n_reward),
    }
    for n in NODES_ECHO_ROWS:
        manifest = write_arena_manifest(folder / f"arena-nodes-{n}.parquet", n)
        specs[f"echo {n // 1000}k: ray, 2 nodes"] = ({"job": "echo", "window_rows": ECHO_WINDOW, "manifest": manifest,
                                                      "executor": "ray", "nodes": 2,
                                                      "out": str(folder / f"nodes-echo-{n}.parquet")}, n)
    got = rounds(specs, n_rounds, keep=True)
    local_key = f"{label}: local, 1 core"
    local, one, two = got[local_key], got[f"{label}: ray, 1 node"], got[f"{label}: ray, 2 nodes"]
    rows = []
    for key in (f"{label}: ray, 1 node", f"{label}: ray, 2 nodes"):
        check = same_results(key, specs[key][0]["out"], specs[local_key][0]["out"])
        rows.append(Row(f"{key} [{check}]", "rows/s", rate(got[key], n_reward), rate(local, n_reward)))
    rows.append(Row(f"{label}: 2 nodes vs 2 x 1 node (scaling efficiency)", "rows/s",
                    rate(two, n_reward), 2 * rate(one, n_reward)))
    for n in NODES_ECHO_ROWS:
        m = got[f"echo {n // 1000}k: ray, 2 nodes"]
        rows.append(Row(f"echo {n // 1000}k: ray, 2 nodes: driver VmRSS peak - baseline (peer: id frame)", "MiB",
                        m["driver_peak_mib"] - m["driver_base_mib"], id_frame_mib(specs[f"echo {n // 1000}k: ray, 2 nodes"][0]["manifest"])))
        first = got[f"echo {NODES_ECHO_ROWS[0] // 1000}k: ray, 2 nodes"]
        rows.append(Row(f"echo {n // 1000}k: ray, 2 nodes (peer: {NODES_ECHO_ROWS[0] // 1000}k)", "rows/s",
                        rate(m, n), rate(first, NODES_ECHO_ROWS[0])))
    per_core = rate(local, n_reward)
    core_hours = COST_PAIRS / per_core / 3600
    notes = [
        f"cluster start-up (head + worker node, median): {two['ray_init']:.1f} s; 1 node: {one['ray_init']:.1f} s",
        f"cost model (reward, shipped compact model, CPU): {per_core:.1f} pairs/s per core -> "
        f"{core_hours:,.0f} core-hours for {COST_PAIRS:,} pairs; at the 2-node efficiency "
        f"{rate(two, n_reward) / (2 * rate(one, n_reward)):.0%} per added node, "
        f"{core_hours / cost_cores:,.2f} hours on one machine of {cost_cores} cores, "
        f"{core_hours / 24 / cost_cores:,.2f} machine-days (ideal; divide by the efficiency for the actual count)",
    ]
    return rows, notes


def ray_missing() -> str | None:
    """Why the ray rows cannot run (None when they can), checked in a subprocess: importing ray here
    would change os.environ for the children."""
    probe = "import ray.data; from sdscore.runtime.executors.ray_data import RayExecutor"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_ENV)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["import failed"])[-1]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: one measurement (a JSON spec)
    p.add_argument("--nodes", action="store_true", help="only section 4: 1 vs 2 one-CPU Ray nodes on this machine")
    p.add_argument("--cost-cores", type=int, default=32, help="cores per machine in section 4's cost model")
    args = p.parse_args()
    if args.child:
        spec = json.loads(args.child)
        if spec.get("cores"):
            os.environ["SDSCORE_CORES"] = str(spec["cores"])
        print(json.dumps(child(spec)), flush=True)
        return
    began = time.perf_counter()
    if args.nodes:
        missing = ray_missing()
        if missing:
            raise SystemExit(f"--nodes needs Ray Data: {missing}")
        n_rounds = args.repeats or (1 if args.quick else 3)
        ensure_corpus()
        with tempfile.TemporaryDirectory(prefix="sdscore-scale-") as tmp:
            rows, notes = nodes_rows(Path(tmp), n_rounds, args.cost_cores)
        report(f"multi-node Ray on this machine: one-CPU nodes (ray.cluster_utils), one 1-CPU actor per node, "
               f"workers writing their shards; reward rows/s peer = local on 1 core; efficiency peer = 2 x the "
               f"1-node rate; driver RSS peer = the id frame (MiB); median of {n_rounds} interleaved round(s), "
               f"cluster start-up out", rows, args.json, peers="the local executor on 1 core in this process")
        print("\n" + "\n".join(notes))
        print(f"\ntotal {time.perf_counter() - began:.0f} s")
        return
    n_rounds = args.repeats or (1 if args.quick else 3)
    multiples = MULTIPLES[:2] if args.quick else MULTIPLES
    arena_rows = ARENA_ROWS[:2] if args.quick else ARENA_ROWS
    uncached = ("consistency",) if args.quick else ("consistency", "judge")
    missing = ray_missing()
    if missing:
        print(f"ray rows left out: {missing}", file=sys.stderr)
    executors = tuple(e for e in (QUICK_EXECUTORS if args.quick else EXECUTORS) if e[0] != "ray" or not missing)
    ensure_corpus()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sdscore-scale-") as tmp:
        folder = Path(tmp)
        rows, notes = protocol_rows(folder, multiples, n_rounds, uncached)
        echo = echo_rows(folder, arena_rows, n_rounds)
        speed, memory, overhead = executor_rows(folder, n_rounds, executors)
    how = f"median of {n_rounds} interleaved round(s), a fresh process per measurement"
    print("\n" + "\n".join(notes))
    sizes = "/".join(f"{t}x" for t in multiples)
    report(f"protocols, tiny synthetic corpus {sizes}, local executor: consistency and judge read a "
           f"WARM content-hash cache, so their rows measure the runtime + cache, not embedding/extraction "
           f"(UNCACHED rows: the real cost); marginal = added rows / added seconds between two sizes (inf: the "
           f"larger run was not slower, per-row cost under the run-to-run noise); peer = 1x rows/s or RSS; {how}",
           rows, False)
    report(f"runtime alone: EchoScorer over arena manifests, window_rows={ECHO_WINDOW}, local; "
           f"peer = {arena_rows[0]:,} rows; {how}", echo, False)
    report(f"executors vs local on the same input: rows/s of score_manifest (worker/actor start-up in, "
           f"ray.init out); [= local]: output checked equal to local's; peer = local; {how}", speed, False)
    report("executor memory: tree PSS = driver + workers (+ Ray's daemons and actors), /proc sampled every "
           "0.2 s (peer: local's); RUSAGE_CHILDREN's ru_maxrss is the largest worker's peak, not a sum, so "
           "driver + workers x largest worker bounds the total RSS (peer: local ru_maxrss)", memory, False)
    if overhead:
        report("ray overhead vs local, seconds of wall time (ratio = overhead / local run seconds); "
               "peer = local score_manifest seconds", overhead, False)
    print(f"\ntotal {time.perf_counter() - began:.0f} s")
    if args.json:
        from dataclasses import asdict

        everything = rows + echo + speed + memory + overhead
        print(json.dumps({"rows": [{**asdict(r), "ratio": round(r.ratio, 4)} for r in everything]}))


if __name__ == "__main__":
    main()
