"""Consistency protocol throughput: batched GE2E vs resemblyzer in one-thread processes; group_cosine vs a torch loop.

GE2E rows embed the same TTS utterances (flite and espeak-ng voices, 1-6 s, rendered into a temp
folder) from their files: ours is load_many + Ge2eEncoder.embed_waveforms (partial windows of many
files per LSTM call, the compiled core's LSTM on `workers` one-thread workers); the peer is
resemblyzer's documented loop ``[encoder.embed_utterance(preprocess_wav(p)) for p in paths]``.
The strongest peer on N cores is that loop in N one-thread worker processes, the files dealt out
evenly, every thread pool of each worker pinned to 1 (OMP/OPENBLAS/MKL_NUM_THREADS=1 set before
the workers start, torch.set_num_threads(1) and threadpoolctl's limit in each) — no thread ever
waits for another. The same loop in this process with every pool at 1 and ours on 1 worker are
the one-core pairing. All contenders run in the same interleaved rounds (bench/common.py); each
ratio is the median of the per-round ratios; the CPU model, date, load and each pool's threads
are printed. The CPU-work rows divide the same runs' embeddings by the CPU seconds they burned
(user + system, every thread of this process, or of all peer workers): on a loaded machine the
wall-clock ratio depends on how many threads each side has runnable, the work ratio much less.
The LSTM row is the core's LSTM vs torch.nn.LSTM on one thread (GFLOP/s by the thread's CPU
clock), beside the measured one-thread fp32 matmul rate of this machine.
The similarity row scores SpeakerSleuth-sized groups (5 turns, D = 256) with group_cosine vs the
per-group F.cosine_similarity loop a user would write; on CUDA also as GB/s vs the device copy.
"""

from __future__ import annotations

import sdscore  # noqa: F401  (first, as the CLI: its OpenMP wait policy must be set before torch loads)

import multiprocessing  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, interleaved_rounds, parser, pool_threads, rate_row, render_tts, report  # noqa: E402
from cotenant import load_note  # noqa: E402

from sdscore import _core, kernels  # noqa: E402
from sdscore.audio import load_many  # noqa: E402
from sdscore.features.speaker import SpeakerEmbedder  # noqa: E402
from sdscore.features.speaker.ge2e import LAYERS, MEL_CHANNELS, PARTIAL_FRAMES, Ge2eEncoder  # noqa: E402

#: the thread-count variables of the BLAS/OpenMP pools a resemblyzer worker loads (numpy's
#: OpenBLAS, torch's OpenMP/MKL), pinned to 1 before the workers start
POOL_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def cpu_seconds() -> float:
    """CPU seconds (user + system) this process's threads have used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def in_process(fn):
    """fn(files) -> (its result, the CPU seconds of this process's threads during the call)."""
    def run(files):
        start = cpu_seconds()
        out = fn(files)
        return out, cpu_seconds() - start
    return run


@contextmanager
def one_thread_pools():
    """Every pool of this process at 1 thread (torch and, with threadpoolctl, BLAS/OpenMP) inside."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    try:
        if threadpool_limits is None:
            yield
        else:
            with threadpool_limits(1):
                yield
    finally:
        torch.set_num_threads(before)


# ---- the peer: resemblyzer's loop in one-thread worker processes -----------------------------------

_PEER: dict = {}


def _peer_start(ready) -> None:
    torch.set_num_threads(1)
    try:
        from threadpoolctl import threadpool_limits

        _PEER["limits"] = threadpool_limits(1)  # held for the worker's life
    except ImportError:
        pass
    warnings.filterwarnings("ignore")
    from resemblyzer import VoiceEncoder, preprocess_wav

    _PEER["encoder"], _PEER["preprocess"] = VoiceEncoder("cpu", verbose=False), preprocess_wav
    ready.wait()


def _peer_embed(files: list[str]) -> tuple[np.ndarray, float]:
    """The files' embeddings and the CPU seconds this worker spent on them."""
    start = cpu_seconds()
    out = np.stack([_PEER["encoder"].embed_utterance(_PEER["preprocess"](p)) for p in files])
    return out, cpu_seconds() - start


def _peer_threads(_: int) -> str:
    time.sleep(0.2)  # long enough that every worker takes one
    return f"pid {os.getpid()}: {pool_threads()}"


class PeerProcesses:
    """resemblyzer's loop in `processes` spawned one-thread workers; `run` deals the files out
    (file i to worker i mod N) and returns the embeddings in file order."""

    def __init__(self, processes: int):
        saved = {k: os.environ.get(k) for k in POOL_VARIABLES}
        os.environ.update({k: "1" for k in POOL_VARIABLES})  # read by the pools as the workers load them
        try:
            context = multiprocessing.get_context("spawn")
            ready = context.Barrier(processes + 1)
            self.processes = processes
            self.pool = context.Pool(processes, initializer=_peer_start, initargs=(ready,))
            ready.wait()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def threads(self) -> list[str]:
        return sorted(set(self.pool.map(_peer_threads, range(self.processes), chunksize=1)))

    def run(self, files: list[str]) -> tuple[np.ndarray, float]:
        """Embeddings in file order and the CPU seconds of all workers together."""
        parts = self.pool.map(_peer_embed, [files[w:: self.processes] for w in range(self.processes)], chunksize=1)
        out = np.empty((len(files), parts[0][0].shape[1]), dtype=np.float32)
        for w, (part, _) in enumerate(parts):
            out[w:: self.processes] = part
        return out, sum(cpu for _, cpu in parts)

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


def ge2e_rows(paths: list[str], rounds: int) -> list[Row]:
    """Embeddings per second of ours on N workers vs resemblyzer in N one-thread processes (the
    headline), ours on 1 worker vs resemblyzer's loop with every pool at 1, and the cache hit; all
    in the same interleaved rounds."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from resemblyzer import VoiceEncoder, preprocess_wav
    peer_encoder = VoiceEncoder("cpu", verbose=False)
    n = len(paths)
    cores = torch.get_num_threads()
    ours_n, ours_1 = Ge2eEncoder(workers=cores), Ge2eEncoder(workers=1)
    embedder = SpeakerEmbedder("ge2e")
    peers = PeerProcesses(cores)
    names = {"ours": f"ours, {cores} workers", "peer": f"resemblyzer x{cores} one-thread processes",
             "ours1": "ours, 1 worker", "peer1": "resemblyzer, every pool 1 thread"}
    outputs: dict[str, np.ndarray] = {}

    def peer_one_thread(files):
        with one_thread_pools():
            return np.stack([peer_encoder.embed_utterance(preprocess_wav(p)) for p in files])

    contenders = {  # each: files -> (embeddings, CPU seconds)
        names["ours"]: in_process(lambda files: ours_n.embed_waveforms(list(load_many(files)))[0]),
        names["peer"]: peers.run,
        names["ours1"]: in_process(lambda files: ours_1.embed_waveforms(list(load_many(files)))[0]),
        names["peer1"]: in_process(peer_one_thread),
    }
    cpu: dict[str, list[float]] = {name: [] for name in contenders}

    def record(name, result):
        outputs[name] = result[0]
        cpu[name].append(result[1])
    try:
        print(f"GE2E: {n} files; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')} "
              f"(machine, time and commit: the line under the table)")
        print(f"  ours: this process, {cores} forward workers of 1 thread each; pools {pool_threads()}")
        for line in peers.threads():
            print(f"  peer worker {line}")
        with one_thread_pools():
            print(f"  peer in this process ({names['peer1']}): pools {pool_threads()}")
        for fn in contenders.values():  # warm-up on 3 files: a whole-list warm-up doubles the slow loop's cost
            fn(paths[:3])
        embedder.embed_files(paths)  # fills the cache the last row reads
        runs = {name: (lambda name=name, fn=fn: record(name, fn(paths))) for name, fn in contenders.items()}
        runs["ours, cache hit"] = lambda: embedder.embed_files(paths)
        print(f"  before: {load_note()}")
        seconds = interleaved_rounds(runs, rounds, warm_up=False)
        print(f"  after: {load_note()}")
    finally:
        peers.close()
    agree = float(np.min(np.sum(outputs[names["ours"]] * outputs[names["peer"]], axis=1)))
    print(f"  min cosine(ours, resemblyzer) over the files: {agree:.5f}")
    median = {k: float(np.median(v)) for k, v in seconds.items()}
    print("GE2E seconds per run (median): " + ", ".join(f"{k} {v:.2f}" for k, v in median.items()))
    print("GE2E CPU seconds per run (median): " + ", ".join(f"{k} {np.median(v):.2f}" for k, v in cpu.items()))
    return [
        rate_row(f"GE2E embed {n} utterances: {names['ours']} vs {names['peer']}", "emb/s", n,
                 seconds[names["ours"]], seconds[names["peer"]]),
        rate_row(f"GE2E embed {n} utterances: {names['ours1']} vs {names['peer1']}", "emb/s", n,
                 seconds[names["ours1"]], seconds[names["peer1"]]),
        rate_row(f"GE2E re-score {n} utterances (cache hit) vs {names['peer']}", "emb/s", n,
                 seconds["ours, cache hit"], seconds[names["peer"]]),
        # the work itself: embeddings per CPU second, which a loaded machine changes least
        rate_row(f"GE2E CPU work, {n} utterances: {names['ours']} vs {names['peer']}", "emb/CPU-s", n,
                 cpu[names["ours"]], cpu[names["peer"]]),
        rate_row(f"GE2E CPU work, {n} utterances: {names['ours1']} vs {names['peer1']}", "emb/CPU-s", n,
                 cpu[names["ours1"]], cpu[names["peer1"]]),
    ]


def lstm_rows(rounds: int, batch: int = 64) -> list[Row]:
    """GFLOP/s of the core's LSTM vs torch.nn.LSTM on one thread (GE2E's 3 x 256 over 160 frames,
    `batch` partials), and of the one-thread fp32 matmul of this machine (torch, 1024^3) beside.
    All three run in this thread with every pool at 1, timed by this thread's CPU clock in
    interleaved rounds: on a loaded machine the wall clock also counts the time it was descheduled."""
    encoder = Ge2eEncoder(workers=1)
    lstm, layers = encoder.network.lstm, encoder._lstm_layers
    mels = torch.rand(batch, PARTIAL_FRAMES, MEL_CHANNELS, generator=torch.Generator().manual_seed(0)) * 3
    gates = 4 * lstm.hidden_size
    macs = PARTIAL_FRAMES * gates * (MEL_CHANNELS + lstm.hidden_size + (LAYERS - 1) * 2 * lstm.hidden_size)
    gflop = 2 * macs * batch / 1e9
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    runs = {"core": (gflop, lambda: _core.lstm_final_hidden(mels.numpy(), layers)),
            "torch": (gflop, lambda: lstm(mels)),
            "matmul": (8 * 2 * 1024**3 / 1e9, lambda: [torch.mm(a, b) for _ in range(8)])}
    rates: dict[str, list[float]] = {name: [] for name in runs}
    with one_thread_pools(), torch.no_grad():
        for _, fn in runs.values():
            fn()
        for _ in range(max(rounds, 3)):
            for name, (work, fn) in runs.items():
                start = time.thread_time()
                fn()
                rates[name].append(work / (time.thread_time() - start))
    core, peer, mm = (np.array(rates[k]) for k in ("core", "torch", "matmul"))
    print(f"GE2E LSTM: {2 * macs / 1e6:.1f} MFLOP per partial window ({_core.lstm_isa(lstm.hidden_size)}); "
          f"one-thread fp32 matmul (1024^3) {np.median(mm):.1f} GFLOP/s (thread CPU time): the core's LSTM "
          f"reaches {np.median(core / mm):.0%} of it, torch.nn.LSTM {np.median(peer / mm):.0%}")
    return [Row(f"GE2E LSTM, {batch} partials, 1 thread (thread CPU time): core vs torch.nn.LSTM", "GFLOP/s",
                float(np.median(core)), float(np.median(peer)), list(core / peer))]


def similarity_rows(quick: bool, rounds: int) -> list[Row]:
    """Turns per second of group_cosine vs the per-group loop; GB/s vs device copy on CUDA."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    groups, turns, dim = (2000 if quick else 20000), 5, 256
    generator = torch.Generator().manual_seed(0)
    emb = torch.randn(groups * turns, dim, generator=generator).to(device)
    reference = torch.randn(groups, dim, generator=generator).to(device)
    offsets = torch.arange(0, groups * turns + 1, turns, dtype=torch.int64, device=device)

    def peer():
        out = []
        for g in range(groups):
            x = emb[g * turns: (g + 1) * turns]
            sim = F.cosine_similarity(x[:, None], x[None], dim=-1)
            pairwise = (sim.sum(1) - sim.diagonal()) / (turns - 1)
            centroid = 1 - F.cosine_similarity(x, x.mean(0, keepdim=True))
            out.append((pairwise, centroid, F.cosine_similarity(x, reference[g: g + 1])))
        return out

    sync_fn = torch.cuda.synchronize if device.type == "cuda" else None
    runs = {"ours": lambda: kernels.group_cosine(emb, offsets, reference), "loop": peer}
    if device.type == "cuda":
        runs["copy"] = lambda: emb.clone()
    seconds = interleaved_rounds(runs, rounds, sync=sync_fn)
    n = groups * turns
    rows = [rate_row(f"group_cosine {groups}x{turns}x{dim} ({device.type}) vs per-group loop", "turns/s", n,
                     seconds["ours"], seconds["loop"])]
    if device.type == "cuda":  # bytes read per second, ours vs a device copy of emb (read + write)
        size = (emb.numel() + reference.numel()) * 4
        ours_rate = [size / s / 1e9 for s in seconds["ours"]]
        copy_rate = [2 * emb.numel() * 4 / s / 1e9 for s in seconds["copy"]]
        rows.append(Row("group_cosine input GB/s vs device copy", "GB/s", float(np.median(ours_rate)),
                        float(np.median(copy_rate)), [o / c for o, c in zip(ours_rate, copy_rate)]))
    return rows


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    rounds = args.repeats or 3
    with tempfile.TemporaryDirectory(prefix="sdscore-bench-") as folder:
        paths = render_tts(Path(folder), 30 if args.quick else 100, words=(2, 16), espeak_every=2, prefix="u")
        rows = ge2e_rows(paths, rounds) + lstm_rows(rounds) + similarity_rows(args.quick, rounds)
    report("consistency: GE2E embeddings and group similarity", rows, args.json,
           peers="resemblyzer in N spawned processes with every pool at 1 thread (listed per worker above), "
                 "or in this process with every pool at 1; torch.nn.LSTM and torch loops in this process")


if __name__ == "__main__":
    main()
