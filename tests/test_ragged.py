"""Flat values + int64 offsets: the one ragged representation."""

import numpy as np
import pytest

from sdscore.ragged import check_offsets, offsets_from_lengths, pack


def test_offsets_from_lengths_includes_empty_items():
    assert offsets_from_lengths([3, 0, 2]).tolist() == [0, 3, 3, 5]
    assert offsets_from_lengths([]).tolist() == [0]
    assert offsets_from_lengths([1]).dtype == np.int64


def test_pack_round_trips():
    items = [np.arange(3, dtype=np.float32), np.zeros(0, np.float32), np.ones(2, np.float32)]
    values, offsets = pack(items)
    assert values.tolist() == [0, 1, 2, 1, 1]
    for i, item in enumerate(items):
        np.testing.assert_array_equal(values[offsets[i] : offsets[i + 1]], item)


@pytest.mark.parametrize(
    "offsets,n,message",
    [
        (np.array([1, 2], np.int64), 2, "must start at 0, got 1"),
        (np.array([0, 2, 1], np.int64), 1, "non-decreasing"),
        (np.array([0, 2], np.int32), 2, "must be int64, got int32"),
        (np.array([0, 2], np.int64), 3, "offsets end at 2 but there are 3 values"),
    ],
)
def test_check_offsets_errors(offsets, n, message):
    with pytest.raises(ValueError, match=message):
        check_offsets(offsets, n)


def test_negative_lengths_are_refused():
    with pytest.raises(ValueError, match="non-negative, got minimum -1"):
        offsets_from_lengths([2, -1])
