"""Input GB/s of the pooling and similarity ops of sdscore.kernels vs the torch a user would write;
GFLOP/s of the CPU span attention vs torch SDPA.

GB/s is the size of the op's input tensors divided by its time (the same bytes for ours and peer).

Peers, on the same tensors in the same run: eager one-liners for pooling (masked sum / count,
an index for the last token, masked softmax then a weighted sum, a per-row loop for packed
input) and per-group Python loops over F.cosine_similarity for the similarity ops. On CUDA ours
is the Triton kernel and each row also reports ours as a fraction of the measured device copy
bandwidth; on CPU ours is the torch reference.

span_attention (compiled core, CPU float32) is timed against torch's scaled_dot_product_attention
with a key mask over the same padded batch (the compact reward model's shapes: 16 rows of 70-236
positions, 4 heads of 16); FLOP/s counts the attended span's work, 4·n²·D per row and head, for both.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, best_seconds, interleaved_rounds, parser, rate_row, report  # noqa: E402

from sdscore import kernels  # noqa: E402


def timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Best seconds of fn, waiting for the device to finish each call.

    Three warm-up calls first (until the allocator has settled, first calls pay page faults);
    calls under a millisecond or so get more repeats (about 0.25 s worth, at most 200) so that a
    busy machine still yields an undisturbed best.
    """
    call = fn if device.type != "cuda" else lambda: (fn(), torch.cuda.synchronize())
    start = time.perf_counter()
    for _ in range(3):
        call()
    per_call = (time.perf_counter() - start) / 3
    return best_seconds(call, max(repeats, min(200, int(0.25 / per_call))))


def paired_row(name: str, unit: str, work: float, ours: Callable[[], object], peer: Callable[[], object],
               device: torch.device, rounds: int) -> Row:
    """A Row of `work` per call (e.g. GB read) per second, ours vs peer, from interleaved rounds: each
    round runs n calls of ours, then n of the peer (n: about 0.1 s of the slower one, at most 200,
    after three warm-up calls each), and the ratio is the median of the rounds' ratios."""
    calls = {k: (fn if device.type != "cuda" else (lambda fn=fn: (fn(), torch.cuda.synchronize())))
             for k, fn in (("ours", ours), ("peer", peer))}
    slowest = 0.0
    for call in calls.values():
        start = time.perf_counter()
        for _ in range(3):
            call()
        slowest = max(slowest, (time.perf_counter() - start) / 3)
    n = max(1, min(200, int(0.1 / max(slowest, 1e-9))))
    runs = {k: (lambda call=call: [call() for _ in range(n)]) for k, call in calls.items()}
    seconds = interleaved_rounds(runs, rounds, warm_up=False)
    return rate_row(name, unit, work, [t / n for t in seconds["ours"]], [t / n for t in seconds["peer"]])


def copy_bandwidth(device: torch.device, repeats: int) -> float:
    """Device copy GB/s, counting bytes read plus bytes written, on a 1 GiB buffer."""
    src = torch.empty(1 << 28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() * 4 / timed(lambda: dst.copy_(src), device, repeats) / 1e9


def nbytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def pooling_rows(device: torch.device, quick: bool) -> list[tuple[str, int, Callable, Callable]]:
    """(name, bytes read, ours, peer) for the three pooling ops on a right-padded batch."""
    cuda = device.type == "cuda"
    batch, length, width = (32, 2048, 3584) if cuda else (16, 256 if quick else 1024, 1024)
    dtype = torch.bfloat16 if cuda else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(batch, length, width, dtype=dtype, device=device, generator=gen)
    lengths = torch.randint(1, length + 1, (batch,), device=device, generator=gen)
    mask = torch.arange(length, device=device)[None, :] < lengths[:, None]
    weight = torch.randn(width, dtype=dtype, device=device, generator=gen) / width**0.5
    offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
    values = hidden[mask]
    read = nbytes(hidden, mask)
    size = f"B={batch} L={length} H={width} {str(dtype).removeprefix('torch.')}"

    def mean_peer():
        m = mask.to(hidden.dtype)
        return (hidden * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1)

    def attention_peer():
        scores = (hidden @ weight).masked_fill(~mask, float("-inf"))
        return (torch.softmax(scores.float(), 1).to(hidden.dtype)[..., None] * hidden).sum(1)

    bounds = offsets.tolist()
    return [
        (f"masked_mean, {size}", read, lambda: kernels.masked_mean(hidden, mask), mean_peer),
        (
            f"masked_mean packed vs row loop, {size}",
            nbytes(values, offsets),
            lambda: kernels.masked_mean(values, offsets=offsets),
            lambda: torch.stack([values[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:])]),
        ),
        (
            f"last_token, {size}",
            nbytes(mask) + batch * width * hidden.element_size(),
            lambda: kernels.last_token(hidden, mask),
            lambda: hidden[torch.arange(batch, device=device), mask.sum(1) - 1],
        ),
        (
            f"attention_pool, {size}",
            read + nbytes(weight),
            lambda: kernels.attention_pool(hidden, mask, weight),
            attention_peer,
        ),
    ]


def similarity_rows(device: torch.device, quick: bool) -> list[tuple[str, int, Callable, Callable]]:
    """(name, bytes read, ours, peer) for group_cosine and score_candidates on speaker-sized groups."""
    groups = 500 if quick else 4000
    dim = 256  # resemblyzer
    gen = torch.Generator(device=device).manual_seed(1)
    sizes = torch.randint(1, 21, (groups,), device=device, generator=gen)
    offsets = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])
    emb = torch.randn(int(offsets[-1]), dim, device=device, generator=gen)
    reference = torch.randn(groups, dim, device=device, generator=gen)
    cand_group = torch.arange(groups, device=device).repeat_interleave(3)
    cand = torch.randn(len(cand_group), dim, device=device, generator=gen)
    bounds = offsets.tolist()
    spans = list(zip(bounds[:-1], bounds[1:]))
    size = f"G={groups} N={emb.shape[0]} D={dim} float32"

    def group_peer():
        out = []
        for g, (a, b) in enumerate(spans):
            x = emb[a:b]
            sim = F.cosine_similarity(x[:, None], x[None], dim=-1)
            n = b - a
            pairwise = (sim.sum(1) - sim.diagonal()) / (n - 1) if n > 1 else torch.ones(1, device=device)
            centroid = 1 - F.cosine_similarity(x, x.mean(0, keepdim=True))
            out.append((pairwise, centroid, F.cosine_similarity(x, reference[g : g + 1])))
        return out

    def candidate_peer():
        out = []
        for c, g in zip(cand, cand_group.tolist()):
            x = emb[spans[g][0] : spans[g][1]]
            out.append((
                F.cosine_similarity(c[None], x).mean(),
                1 - F.cosine_similarity(c, x.mean(0), dim=0),
                F.cosine_similarity(c, reference[g], dim=0),
            ))
        return out

    return [
        (
            f"group_cosine vs per-group loop, {size}",
            nbytes(emb, offsets, reference),
            lambda: kernels.group_cosine(emb, offsets, reference),
            group_peer,
        ),
        (
            f"score_candidates vs per-candidate loop, M={len(cand)}",
            nbytes(cand, cand_group, emb, offsets, reference),
            lambda: kernels.score_candidates(cand, cand_group, emb, offsets, reference),
            candidate_peer,
        ),
    ]


def attention_rows(quick: bool, rounds: int) -> list[Row]:
    """span_attention vs masked SDPA on CPU, at the reward model's head sizes."""
    g = torch.Generator().manual_seed(0)
    rows = []
    for heads, size in ((4, 16), (4, 32)) if not quick else ((4, 16),):
        lengths = torch.randint(70, 237, (16,), generator=g)
        n = int(lengths.max())
        qkv = torch.randn(16, n, 3, heads, size, generator=g)
        starts = torch.zeros_like(lengths)
        keep = torch.arange(n)[None] < lengths[:, None]
        flops = 4 * size * heads * float((lengths.double() ** 2).sum())

        def sdpa():
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :]).transpose(1, 2)

        rows.append(paired_row(
            f"span_attention vs masked SDPA, B=16 L<={n} H={heads} D={size} ({torch.get_num_threads()} threads)",
            "GFLOP/s", flops / 1e9, lambda: kernels.span_attention(qkv, starts, lengths, impl="core"), sdpa,
            torch.device("cpu"), rounds))
    return rows


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    repeats = args.repeats or (10 if args.quick else 20)
    cases = pooling_rows(device, args.quick) + similarity_rows(device, args.quick)
    rows, fractions = [], []
    rounds = max(3, args.repeats or (3 if args.quick else 5))
    for name, read, ours, peer in cases:
        rows.append(paired_row(name, "GB/s", read / 1e9, ours, peer, device, rounds))
        fractions.append(rows[-1].ours)
    if device.type == "cuda":
        copy = copy_bandwidth(device, repeats)
        print(f"device copy bandwidth (read + write): {copy:.0f} GB/s")
        for row, gbs in zip(rows, fractions):
            print(f"  {row.name}: ours at {gbs / copy:.0%} of copy bandwidth")
    else:
        print(
            "note: no CUDA device, so 'ours' runs the torch reference path; pooling ratios near 1 are "
            "expected (both are eager torch), the similarity ratios measure batching vs Python loops."
        )
    report(f"kernels on {device.type}, median of {rounds} interleaved rounds", rows, args.json,
           peers="eager torch in this process (the pools listed above)")
    report(f"CPU attention, median of {rounds} interleaved rounds", attention_rows(args.quick, rounds), args.json,
           peers="torch scaled_dot_product_attention in this process (the pools listed above)")


if __name__ == "__main__":
    main()
