"""How many consume-queue entries a raw read takes, and how many lie in one segment: the
loops used for a few entries answer as the array code used for many does."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from boltmq.wire.record_heads import SMALL_BATCH
from services.store.reader import _taken, _within


def taken_by_arrays(sizes: list[int], count: int, byte_limit: int) -> int:
    if count <= 0 or not sizes:
        return 0
    head = np.maximum(np.array(sizes[:count], dtype=np.int64), 0)
    return max(1, int(np.searchsorted(np.cumsum(head), byte_limit, side="right")))


@given(
    sizes=st.lists(st.integers(-5, 5000), max_size=3 * SMALL_BATCH),
    count=st.integers(-1, 3 * SMALL_BATCH),
    byte_limit=st.integers(0, 40_000),
)
def test_taken_is_the_same_for_few_and_many_entries(
    sizes: list[int], count: int, byte_limit: int
) -> None:
    assert _taken(np.array(sizes, dtype=np.int64), count, byte_limit) == taken_by_arrays(
        sizes, count, byte_limit
    )


@given(
    physicals=st.lists(st.integers(0, 1000), max_size=3 * SMALL_BATCH),
    begin=st.integers(0, 500),
    length=st.integers(0, 600),
)
def test_within_counts_the_leading_entries_of_one_segment(
    physicals: list[int], begin: int, length: int
) -> None:
    end = begin + length
    expected = 0
    for physical in physicals:
        if not begin <= physical < end:
            break
        expected += 1
    assert _within(np.array(physicals, dtype=np.int64), begin, end) == expected
