"""Token-budget batches for packed forwards: every item once, budgets kept, longest first."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sdscore.runtime.batching import (
    CPU_TOKEN_BUDGET,
    MAX_TOKEN_BUDGET,
    default_token_budget,
    plan_token_batches,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), max_size=60), st.integers(1, 900), st.one_of(st.none(), st.integers(1, 9)))
def test_plan_token_batches_properties(lengths, max_tokens, max_batch):
    batches = plan_token_batches(lengths, max_tokens, max_batch)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [i for b in batches for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)  # longest first, across batches
    for b in batches:
        assert len(b) >= 1 and (max_batch is None or len(b) <= max_batch)
        total = sum(max(1, lengths[i]) for i in b)
        assert total <= max_tokens or len(b) == 1  # only a lone item may exceed the budget
    for b, nxt in pairwise(batches):  # greedy: a batch closed because the next item did not fit
        full = max_batch is not None and len(b) == max_batch
        assert full or sum(max(1, lengths[i]) for i in b) + max(1, lengths[nxt[0]]) > max_tokens


def test_plan_token_batches_sums_lengths_not_padded_positions():
    lengths = [100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10]
    # padded planning would count 11 × 100 = 1100 positions; packed counts 200 tokens: one batch
    assert plan_token_batches(lengths, 200) == [list(range(11))]
    assert plan_token_batches(lengths, 150) == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    assert plan_token_batches(lengths, 200, max_batch=4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10]]
    assert plan_token_batches([5, 900, 7], 100) == [[1], [2, 0]]  # the long item alone, never dropped
    assert plan_token_batches([3, 3, 3], 6) == [[0, 1], [2]]  # stable among equal lengths
    assert plan_token_batches([], 10) == []


def test_plan_token_batches_rejects_bad_arguments():
    with pytest.raises(ValueError, match="max_tokens"):
        plan_token_batches([1, 2], 0)
    with pytest.raises(ValueError, match="max_batch"):
        plan_token_batches([1, 2], 10, max_batch=0)
    with pytest.raises(ValueError, match="item 1: negative length"):
        plan_token_batches([1, -2], 10)


def test_default_token_budget_from_free_memory():
    assert default_token_budget("cpu", 2048, 2) == CPU_TOKEN_BUDGET
    # Qwen2.5-3B-shaped layer in bf16: 2 × (4·2048 + 3·11008) = 82,432 bytes per token
    assert default_token_budget("cuda", 2048, 2, intermediate_size=11008, free_bytes=8 * 2**30) == (
        int(0.5 * 8 * 2**30 // 82432)
    )
    # more free memory → more tokens, capped; wider models and fp32 → fewer; never below 1024
    roomy = default_token_budget("cuda", 2048, 2, free_bytes=200 * 2**30)
    assert roomy == MAX_TOKEN_BUDGET
    assert default_token_budget("cuda", 3584, 2, free_bytes=8 * 2**30) < default_token_budget(
        "cuda", 2048, 2, free_bytes=8 * 2**30
    )
    assert default_token_budget("cuda", 2048, 4, free_bytes=8 * 2**30) < default_token_budget(
        "cuda", 2048, 2, free_bytes=8 * 2**30
    )
    assert default_token_budget("cuda", 2048, 2, free_bytes=10) == 1024
    with pytest.raises(ValueError, match="hidden_size"):
        default_token_budget("cpu", 0, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_default_token_budget_reads_the_device():
    free, _ = torch.cuda.mem_get_info()
    expected = default_token_budget("cuda", 2048, 2, free_bytes=free)
    assert abs(default_token_budget("cuda", 2048, 2) - expected) <= 0.05 * expected
