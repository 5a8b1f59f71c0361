"""Consistency protocol throughput: batched GE2E vs resemblyzer's per-utterance loop; group_cosine vs a torch loop.

GE2E rows embed the same TTS utterances (flite and espeak-ng voices, 1-6 s, rendered into a temp
folder) from their files: ours is load_many + Ge2eEncoder.embed_waveforms (partial windows of many
files per LSTM batch, single-threaded workers); the peer is resemblyzer's documented loop
``[encoder.embed_utterance(preprocess_wav(p)) for p in paths]``. Each runs on 1 torch thread and
on all cores, all four in the same interleaved rounds (bench/common.py); the headline row is the
best of ours against the best of resemblyzer's, then the same-threads pairings and a re-score
from the cache. Every ratio is the median of the per-round ratios.
The similarity row scores SpeakerSleuth-sized groups (5 turns, D = 256) with group_cosine vs the
per-group F.cosine_similarity loop a user would write; on CUDA also as GB/s vs the device copy.
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, interleaved_rounds, parser, rate_row, render_tts, report  # noqa: E402

from sdscore import kernels  # noqa: E402
from sdscore.audio import load_many  # noqa: E402
from sdscore.features.speaker import SpeakerEmbedder  # noqa: E402
from sdscore.features.speaker.ge2e import Ge2eEncoder  # noqa: E402



def with_threads(threads: int, fn: Callable[..., object]) -> Callable[..., object]:
    """fn run with torch's intra-op thread count set to `threads` (restored after)."""
    def run(*args):
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn(*args)
        finally:
            torch.set_num_threads(before)
    return run


def ge2e_rows(paths: list[str], rounds: int) -> list[Row]:
    """Embeddings per second of ours vs resemblyzer's loop, each on 1 thread and on all cores, in
    the same interleaved rounds: the headline is best vs best; the other pairings and the cache
    hit follow."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from resemblyzer import VoiceEncoder, preprocess_wav
    peer_encoder = VoiceEncoder("cpu", verbose=False)
    n = len(paths)
    cores = torch.get_num_threads()

    def peer(files):
        return [peer_encoder.embed_utterance(preprocess_wav(p)) for p in files]

    def ours_with(encoder: Ge2eEncoder):
        return lambda files: encoder.embed_waveforms(list(load_many(files)))

    embedder = SpeakerEmbedder("ge2e")
    contenders = {
        f"ours, {cores} threads": with_threads(cores, ours_with(Ge2eEncoder(workers=cores))),
        "ours, 1 thread": with_threads(1, ours_with(Ge2eEncoder(workers=1))),
        f"resemblyzer, {cores} threads": with_threads(cores, peer),
        "resemblyzer, 1 thread": with_threads(1, peer),
    }
    for fn in contenders.values():  # warm-up on 3 files: a whole-list warm-up doubles the slow loop's cost
        fn(paths[:3])
    embedder.embed_files(paths)  # fills the cache the last row reads
    runs = {name: (lambda fn=fn: fn(paths)) for name, fn in contenders.items()}
    runs["ours, cache hit"] = lambda: embedder.embed_files(paths)
    seconds = interleaved_rounds(runs, rounds, warm_up=False)
    median = {k: float(np.median(v)) for k, v in seconds.items()}
    ours_best = min((k for k in contenders if k.startswith("ours")), key=median.get)
    peer_best = min((k for k in contenders if k.startswith("resemblyzer")), key=median.get)
    print("GE2E seconds per run (median): " + ", ".join(f"{k} {v:.2f}" for k, v in median.items()))
    rows = [rate_row(f"GE2E embed {n} utterances: best vs best ({ours_best} vs {peer_best})", "emb/s", n,
                     seconds[ours_best], seconds[peer_best])]
    for threads in (f"{cores} threads", "1 thread"):
        rows.append(rate_row(f"GE2E embed {n} utterances ({threads} each)", "emb/s", n,
                             seconds[f"ours, {threads}"], seconds[f"resemblyzer, {threads}"]))
    rows.append(rate_row(f"GE2E re-score {n} utterances (cache hit) vs {peer_best}", "emb/s", n,
                         seconds["ours, cache hit"], seconds[peer_best]))
    return rows


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
        rows = ge2e_rows(paths, rounds) + similarity_rows(args.quick, rounds)
    report("consistency: GE2E embeddings and group similarity", rows, args.json)


if __name__ == "__main__":
    main()
