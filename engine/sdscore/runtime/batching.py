"""Length bucketing: group items of similar length so padding wastes little compute.

Items are bucketed within a window (a chunk of the input, like lhotse's dynamic bucketing), so
memory stays bounded on corpora of millions of pairs and no length pass over the data is needed.
A batch holds at most `max_batch` items and at most `max_tokens` padded positions (B × Lmax).
"""

from __future__ import annotations

from collections.abc import Sequence


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
