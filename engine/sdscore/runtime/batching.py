"""Length bucketing: group items of similar length so padding wastes little compute.

Items are bucketed within a window (a chunk of the input, like lhotse's dynamic bucketing), so
memory stays bounded on corpora of millions of pairs and no length pass over the data is needed.
A batch holds at most `max_batch` items and at most `max_tokens` padded positions (B × Lmax).

Packed batches (models/packed_attention.py: episodes concatenated, no padding) are planned by
`plan_token_batches` instead: their cost is the sum of the lengths, so a token budget, not an
item count, bounds them; `default_token_budget` sets that budget from the device's free memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: activations per token of one decoder layer, in units of hidden_size × dtype bytes, when no
#: intermediate_size is given: 4 H-wide tensors (residual, normed input, q/k/v, attention output)
#: plus 3 MLP-wide ones (gate, up, their product) at Qwen2.5's intermediate ≈ 5.4 H, rounded up
ACTIVATION_WIDTHS = 4 + 3 * 5.5
#: share of the free device memory a packed batch's activations may take (the rest: allocator
#: fragmentation, the audio tower's activations, the embeddings and last-layer copy held across layers)
FREE_MEMORY_SHARE = 0.5
#: tokens per packed batch on CPU: large enough that per-call overhead is small, small enough that
#: one batch's activations stay far below a laptop's memory even at H = 3584
CPU_TOKEN_BUDGET = 8192
#: no packed batch beyond this many tokens: a larger one adds no GPU throughput, only latency
MAX_TOKEN_BUDGET = 1 << 17


def plan_batches(lengths: Sequence[int], max_batch: int, max_tokens: int | None = None) -> list[list[int]]:
    """Indices into `lengths`, grouped into batches of similar length (longest first).

    Sorting is stable, so equal lengths keep their input order. An item longer than max_tokens
    gets a batch of its own (it is never dropped).
    """
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 or None, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = max(1, int(lengths[i]))
        grown = max(longest, length) * (len(current) + 1)
        if current and (len(current) >= max_batch or (max_tokens is not None and grown > max_tokens)):
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    return batches


def padded_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Share of the padded positions that are padding (0 = no waste); for logs and the bench."""
    total = sum(max(int(lengths[i]) for i in b) * len(b) for b in batches if b)
    used = sum(int(lengths[i]) for b in batches for i in b)
    return 0.0 if total == 0 else 1.0 - used / total


def plan_token_batches(lengths: Sequence[int], max_tokens: int, max_batch: int | None = None) -> list[list[int]]:
    """Indices into `lengths`, longest first, in batches whose lengths SUM to at most max_tokens
    (a packed batch has no padding) and, when given, of at most max_batch items.

    Sorting is stable (equal lengths keep their input order); an item longer than max_tokens gets a
    batch of its own (it is never dropped). Greedy in one pass: a batch closes when the next item
    does not fit, so batches hold items of similar length, as in plan_batches.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if max_batch is not None and max_batch < 1:
        raise ValueError(f"max_batch must be >= 1 or None, got {max_batch}")
    for i, length in enumerate(lengths):
        if int(length) < 0:
            raise ValueError(f"item {i}: negative length {length}")
    order = sorted(range(len(lengths)), key=lambda i: -int(lengths[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i in order:
        length = max(1, int(lengths[i]))
        full = max_batch is not None and len(current) >= max_batch
        if current and (full or total + length > max_tokens):
            batches.append(current)
            current, total = [], 0
        current.append(i)
        total += length
    if current:
        batches.append(current)
    return batches


def default_token_budget(
    device: torch.device | str, hidden_size: int, dtype_bytes: int, intermediate_size: int | None = None,
    free_bytes: int | None = None,
) -> int:
    """Tokens per packed batch: what fits in FREE_MEMORY_SHARE of the free device memory.

    An inference forward (no cache, no stored per-layer states) holds one decoder layer's
    activations at a time, so the peak per token is that of the widest layer:
    dtype_bytes × (4 × hidden_size + 3 × intermediate_size) — see ACTIVATION_WIDTHS; the number of
    layers does not enter. budget = FREE_MEMORY_SHARE × free / per_token, clamped to
    [1024, MAX_TOKEN_BUDGET]. free_bytes: measured free memory (torch.cuda.mem_get_info on CUDA,
    after the model is loaded, so its weights are already out of it). On CPU: CPU_TOKEN_BUDGET.
    """
    if hidden_size < 1 or dtype_bytes < 1:
        raise ValueError(f"hidden_size and dtype_bytes must be >= 1, got {hidden_size} and {dtype_bytes}")
    device = torch.device(device)
    if device.type != "cuda" and free_bytes is None:
        return CPU_TOKEN_BUDGET
    if free_bytes is None:
        free_bytes, _ = torch.cuda.mem_get_info(device)
    widths = ACTIVATION_WIDTHS * hidden_size if intermediate_size is None else 4 * hidden_size + 3 * intermediate_size
    per_token = dtype_bytes * widths
    return int(min(MAX_TOKEN_BUDGET, max(1024, FREE_MEMORY_SHARE * free_bytes // per_token)))
