"""Co-tenancy: ours vs the peers quiet and with a busy co-tenant process on one of the cores.

Users run on shared nodes: other processes keep some cores busy. This bench runs each comparison in
interleaved rounds (bench/cotenant.py): every round times every contender once quiet (the
co-tenant stopped) and once contended (the co-tenant, a Python spin loop pinned to this process's
last core, running), and reports per contender the quiet and contended rates (median over rounds),
the fraction of its quiet speed it keeps under contention ("kept", the median of the per-round
contended/quiet ratios) and the CPU milliseconds this process burns per unit of work. The goal:
ours keeps at least as much of its speed as the peer does.

- reward: the compact demo model; ours is RewardScorer.score_pairs (batched, torch's threads), the
  peers the one-by-one loop (bench/reward.py's peer (b): one forward per episode) on the same
  threads in this process, and the same loop in N one-thread worker processes (N = torch's
  threads; the strongest CPU peer on a shared machine: no thread waits for another). Ours in the
  same one-thread processes (what the `processes` executor runs) is a row too.
- span attention: the compiled core's span_attention vs torch's masked SDPA on the compact reward
  model's shapes (bench/kernels.py), both on torch's threads (the core's parallel loop runs on
  torch's OpenMP team).

`import sdscore` (first, as the CLI does) sets OMP_WAIT_POLICY=PASSIVE unless it is set: run
`OMP_WAIT_POLICY=ACTIVE python bench/cotenancy.py` to see the spinning default of libgomp. The load
of the machine (load average, CPU pressure) is printed before and after each table: "quiet" means
without our co-tenant, not an idle machine.
"""

from __future__ import annotations

import os

_USER_WAIT_POLICY = os.environ.get("OMP_WAIT_POLICY")  # before sdscore sets its default

import sdscore  # noqa: E402,F401  (first: its OpenMP wait policy must be set before torch loads)

import multiprocessing  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reward as bench_reward  # noqa: E402
from common import cpu_model, measured_line, parser, render_tts  # noqa: E402
from cotenant import Cotenant, contended_rounds, cotenancy_rows, load_note, report_cotenancy, verdict  # noqa: E402

from sdscore import kernels  # noqa: E402
from sdscore.runtime.compute_budget import affinity_cores, cores, quota_cores  # noqa: E402
from sdscore.runtime.reward.episode_scorer import RewardScorer  # noqa: E402


def setting_note() -> str:
    policy = os.environ.get("OMP_WAIT_POLICY")
    source = "set by the user" if _USER_WAIT_POLICY is not None else "sdscore's default"
    return (f"{cpu_model()}; cores(): {cores()} (affinity {affinity_cores()}, cgroup quota {quota_cores()}); "
            f"torch threads {torch.get_num_threads()}; OMP_WAIT_POLICY={policy} ({source}); "
            f"GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT', 'unset')}")


# ---- reward: batched vs the one-by-one loop, in this process and in one-thread processes -----------

_WORKER: dict = {}


def _worker_start(ready) -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    _WORKER["model"] = bench_reward.compact_model()
    _WORKER["scorer"] = RewardScorer(_WORKER["model"], device="cpu", max_batch=16)
    ready.wait()


def _worker_run(batched: bool, pairs) -> np.ndarray:
    if batched:
        return bench_reward.ours(_WORKER["scorer"], pairs)
    return bench_reward.peer_loop(_WORKER["model"], pairs)


class InProcesses:
    """The one-by-one loop (or ours, batched) in `processes` spawned one-thread workers, each with
    its own compact model; `run` splits the pairs evenly and returns the scores in order."""

    def __init__(self, processes: int):
        context = multiprocessing.get_context("spawn")
        ready = context.Barrier(processes + 1)
        self.processes = processes
        self.pool = context.Pool(processes, initializer=_worker_start, initargs=(ready,))
        ready.wait()

    def run(self, pairs, batched: bool = False) -> np.ndarray:
        chunks = [c for c in np.array_split(np.arange(len(pairs)), self.processes) if len(c)]
        work = [(batched, [pairs[i] for i in c]) for c in chunks]
        return np.concatenate(self.pool.starmap(_worker_run, work, chunksize=1))

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


def reward_table(cotenant: Cotenant, n_pairs: int, rounds: int, as_json: bool) -> None:
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="sdscore-bench-") as folder:
        paths = render_tts(Path(folder), bench_reward.CLIPS_PER_PAIR * n_pairs, words=(3, 14), espeak_every=3, prefix="r")
        pairs = bench_reward.make_pairs(bench_reward.at_16k(paths), n_pairs)
        model = bench_reward.compact_model()
        scorer = RewardScorer(model, device="cpu", max_batch=16)
        threads = torch.get_num_threads()
        outputs: dict[str, np.ndarray] = {}
        ours, loop = f"ours, batched ({threads} threads)", f"one-by-one loop ({threads} threads)"
        runs = {ours: lambda: outputs.__setitem__(ours, bench_reward.ours(scorer, pairs)),
                loop: lambda: outputs.__setitem__(loop, bench_reward.peer_loop(model, pairs))}
        procs, other = None, ()
        if threads > 1:
            procs = InProcesses(threads)
            other = (f"one-by-one loop x{threads} one-thread processes", f"ours, batched, x{threads} one-thread processes")
            runs[other[0]] = lambda: outputs.__setitem__(other[0], procs.run(pairs))
            runs[other[1]] = lambda: outputs.__setitem__(other[1], procs.run(pairs, batched=True))
        print(f"\nreward, before: {load_note()}")
        try:
            seconds = contended_rounds(runs, rounds, cotenant)
        finally:
            if procs is not None:
                procs.close()
        print(f"reward, after: {load_note()}")
        for name, scores in outputs.items():
            if name != loop:
                print(f"{name}: max |score - loop score| = {float(np.max(np.abs(scores - outputs[loop]))):.2e}")
    rows = cotenancy_rows(seconds, n_pairs, "pairs/s", other_processes=other)
    report_cotenancy(f"reward, compact demo model, {n_pairs} pairs; co-tenant on core {cotenant.core}; "
                     f"{max(rounds, 3)} interleaved rounds", rows, as_json)
    for peer in (loop, *other[:1]):
        print(verdict(rows, ours, peer))
    if other:
        print(f"(ours split evenly over {threads} one-thread processes: " + verdict(rows, other[1], other[0]) + ")")


# ---- span attention vs masked SDPA ------------------------------------------------------------------

def attention_table(cotenant: Cotenant, quick: bool, rounds: int, as_json: bool) -> None:
    g = torch.Generator().manual_seed(0)
    for heads, size in ((4, 16),) if quick else ((4, 16), (4, 32)):
        lengths = torch.randint(70, 237, (16,), generator=g)
        n = int(lengths.max())
        qkv = torch.randn(16, n, 3, heads, size, generator=g)
        starts = torch.zeros_like(lengths)
        keep = torch.arange(n)[None] < lengths[:, None]
        gflop = 4 * size * heads * float((lengths.double() ** 2).sum()) / 1e9

        def sdpa():
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :]).transpose(1, 2)

        ours = lambda: kernels.span_attention(qkv, starts, lengths, impl="core")  # noqa: E731
        calls = calls_per_round(ours, sdpa)
        threads = torch.get_num_threads()
        names = (f"span_attention ({threads} threads)", f"masked SDPA ({threads} threads)")
        runs = {names[0]: lambda: [ours() for _ in range(calls)], names[1]: lambda: [sdpa() for _ in range(calls)]}
        print(f"\nattention D={size}, before: {load_note()}")
        seconds = contended_rounds(runs, rounds, cotenant, warm_up=False)
        print(f"attention D={size}, after: {load_note()}")
        rows = cotenancy_rows(seconds, calls * gflop, "GFLOP/s")
        report_cotenancy(f"span attention vs masked SDPA, B=16 L<={n} H={heads} D={size}, {calls} calls a round; "
                         f"co-tenant on core {cotenant.core}; {max(rounds, 3)} interleaved rounds", rows, as_json)
        print(verdict(rows, *names))


def calls_per_round(*fns) -> int:
    """Calls of each function a round makes: about 0.2 s of the slower one when quiet, 5 to 200."""
    import time

    slowest = 0.0
    for fn in fns:
        for _ in range(2):
            fn()
        start = time.perf_counter()
        for _ in range(3):
            fn()
        slowest = max(slowest, (time.perf_counter() - start) / 3)
    return max(5, min(200, int(0.2 / max(slowest, 1e-9))))


def main() -> None:
    cli = parser(__doc__.splitlines()[0])
    cli.add_argument("--only", choices=("reward", "attention"), help="run one of the two comparisons")
    cli.add_argument("--core", type=int, default=None, help="the core the co-tenant is pinned to (default: the last)")
    args = cli.parse_args()
    rounds = args.repeats or (3 if args.quick else 5)
    print(setting_note())
    print(measured_line())
    with Cotenant(args.core) as cotenant:
        if args.only in (None, "reward"):
            reward_table(cotenant, 12 if args.quick else 48, rounds, args.json)
        if args.only in (None, "attention"):
            attention_table(cotenant, args.quick, rounds, args.json)


if __name__ == "__main__":
    main()
