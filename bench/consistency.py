"""Consistency protocol throughput: batched GE2E vs resemblyzer's per-utterance loop; group_cosine vs a torch loop.

GE2E rows embed the same TTS utterances (flite and espeak-ng voices, 1-6 s, rendered into a temp
folder) from their files: ours is load_many + Ge2eEncoder.embed_waveforms (partial windows of many
files per LSTM batch, single-threaded workers); the peer is resemblyzer's documented loop
``[encoder.embed_utterance(preprocess_wav(p)) for p in paths]``, both with torch's default threads.
A second row runs both on one thread (the batching alone), a third re-scores from the cache.
The similarity row scores SpeakerSleuth-sized groups (5 turns, D = 256) with group_cosine vs the
per-group F.cosine_similarity loop a user would write; on CUDA also as GB/s vs the device copy.
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, best_seconds, parser, render_tts, report  # noqa: E402

from sdscore import kernels  # noqa: E402
from sdscore.audio import load_many  # noqa: E402
from sdscore.features.speaker import SpeakerEmbedder  # noqa: E402
from sdscore.features.speaker.ge2e import Ge2eEncoder  # noqa: E402



def warm_then_best(run: Callable[[list[str]], object], paths: list[str], repeats: int) -> float:
    """Best seconds of run(paths) after one warm-up call on 3 files (lazy imports, first forwards).

    best_seconds would warm up on the whole list, which doubles the cost of the slow peer loop.
    """
    run(paths[:3])
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run(paths)
        best = min(best, time.perf_counter() - start)
    return best


def ge2e_rows(paths: list[str], repeats: int) -> list[Row]:
    """Embeddings per second of ours vs resemblyzer's loop, default threads, one thread, cached."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from resemblyzer import VoiceEncoder, preprocess_wav
    peer_encoder = VoiceEncoder("cpu", verbose=False)
    n = len(paths)

    def peer(files):
        return [peer_encoder.embed_utterance(preprocess_wav(p)) for p in files]

    def ours_with(encoder: Ge2eEncoder):
        return lambda files: encoder.embed_waveforms(list(load_many(files)))

    ours_seconds = warm_then_best(ours_with(Ge2eEncoder()), paths, repeats)
    peer_seconds = warm_then_best(peer, paths, repeats)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single_ours = warm_then_best(ours_with(Ge2eEncoder(workers=1)), paths, repeats)
        single_peer = warm_then_best(peer, paths, repeats)
    finally:
        torch.set_num_threads(threads)
    embedder = SpeakerEmbedder("ge2e")
    embedder.embed_files(paths)
    cached = best_seconds(lambda: embedder.embed_files(paths), repeats)
    return [
        Row(f"GE2E embed {n} utterances ({threads} threads)", "emb/s", n / ours_seconds, n / peer_seconds),
        Row(f"GE2E embed {n} utterances (1 thread)", "emb/s", n / single_ours, n / single_peer),
        Row(f"GE2E re-score {n} utterances (cache hit)", "emb/s", n / cached, n / peer_seconds),
    ]


def similarity_rows(quick: bool, repeats: int) -> list[Row]:
    """Turns per second of group_cosine vs the per-group loop; GB/s vs device copy on CUDA."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    groups, turns, dim = (2000 if quick else 20000), 5, 256
    generator = torch.Generator().manual_seed(0)
    emb = torch.randn(groups * turns, dim, generator=generator).to(device)
    reference = torch.randn(groups, dim, generator=generator).to(device)
    offsets = torch.arange(0, groups * turns + 1, turns, dtype=torch.int64, device=device)

    def sync(fn):
        return fn if device.type != "cuda" else lambda: (fn(), torch.cuda.synchronize())

    def peer():
        out = []
        for g in range(groups):
            x = emb[g * turns: (g + 1) * turns]
            sim = F.cosine_similarity(x[:, None], x[None], dim=-1)
            pairwise = (sim.sum(1) - sim.diagonal()) / (turns - 1)
            centroid = 1 - F.cosine_similarity(x, x.mean(0, keepdim=True))
            out.append((pairwise, centroid, F.cosine_similarity(x, reference[g: g + 1])))
        return out

    ours = best_seconds(sync(lambda: kernels.group_cosine(emb, offsets, reference)), max(repeats, 5))
    loop = best_seconds(sync(peer), repeats)
    n = groups * turns
    rows = [Row(f"group_cosine {groups}x{turns}x{dim} ({device.type})", "turns/s", n / ours, n / loop)]
    if device.type == "cuda":
        size = (emb.numel() + reference.numel()) * 4
        copy = best_seconds(sync(lambda: emb.clone()), 20)
        rows.append(Row("group_cosine input GB/s vs device copy", "GB/s", size / ours / 1e9, 2 * emb.numel() * 4 / copy / 1e9))
    return rows


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    repeats = args.repeats or 1
    with tempfile.TemporaryDirectory(prefix="sdscore-bench-") as folder:
        paths = render_tts(Path(folder), 30 if args.quick else 100, words=(2, 16), espeak_every=2, prefix="u")
        rows = ge2e_rows(paths, repeats) + similarity_rows(args.quick, repeats)
    report("consistency: GE2E embeddings and group similarity", rows, args.json)


if __name__ == "__main__":
    main()
