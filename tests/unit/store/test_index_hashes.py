"""Index work on many keys at once against the same work one key at a time.

Keys of one length in ASCII (the SDK's unique ids) are hashed as one matrix of their
bytes, other keys as UTF-16 code units grouped by length; both must give exactly what
``key_hash`` gives one key at a time (the entry hash a Java reader computes). A batch
of entries is written as arrays; the file must hold the bytes ``put`` of each writes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.store.index_file import (
    COLUMNS_MIN,
    HEADER_SIZE,
    SLOT,
    IndexFile,
    _entry_hashes,
    key_hash,
    key_hashes,
)


@settings(max_examples=200, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=12),
    keys=st.lists(st.text(max_size=40), max_size=24)
    | st.integers(1, 40).flatmap(
        lambda n: st.lists(
            st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=n, max_size=n),
            min_size=2,
            max_size=40,
        )
    ),
)
def test_hashes_computed_together_are_each_keys_own(topic: str, keys: list[str]) -> None:
    """Keys of one length in ASCII (the SDK's unique ids) take a shorter way than others;
    both must give what key_hash gives one key at a time."""
    assert key_hashes(topic, keys) == [key_hash(topic, key) for key in keys]


def test_entry_hashes_of_sums_follow_key_hash_rule() -> None:
    """Modulo 2^32, as a signed int32, abs, and Integer.MIN_VALUE as 0."""
    sums = np.array([0x80000000, 0xFFFFFFFF, 5, 0x180000000, 0x7FFFFFFF], dtype=np.uint64)
    assert _entry_hashes(sums) == [0, 1, 5, 0, 0x7FFFFFFF]


@settings(max_examples=150, deadline=None)
@given(
    slots=st.integers(1, 9),
    garbage=st.lists(
        st.integers(-3, 70) | st.integers(-(2**31), 2**31 - 1), min_size=9, max_size=9
    ),
    batches=st.lists(
        st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=2 * COLUMNS_MIN + 8),
        min_size=1,
        max_size=5,
    ),
)
def test_entries_put_as_arrays_are_the_bytes_of_puts_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    slots: int,
    garbage: list[int],
    batches: list[list[int]],
) -> None:
    """put_many writes a batch of COLUMNS_MIN or more as arrays: same file as put() of
    each entry in turn, over slots holding garbage and chains within one batch, up to a
    full file (the rest is refused alike)."""
    directory = tmp_path_factory.mktemp("index")
    capacity = 60
    files = [
        IndexFile(directory / name, slots, capacity, create=True)
        for name in ("20260101000000000", "20260101000000001")
    ]
    together, alone = files
    try:
        for index_file in files:
            for slot, value in enumerate(garbage[:slots]):
                SLOT.pack_into(index_file.mapped.mm, HEADER_SIZE + slot * 4, value)
        offset = 0
        for n, hashes in enumerate(batches):
            offsets = [offset + 100 * i for i in range(len(hashes))]
            offset += 100 * len(hashes)
            store_ts = 1_767_225_600_000 + 1_500 * n
            taken = together.put_many(hashes, offsets, store_ts)
            put = [alone.put(h, o, store_ts) for h, o in zip(hashes, offsets, strict=True)]
            assert taken == sum(put)
        assert bytes(together.mapped.mm) == bytes(alone.mapped.mm)
    finally:
        for index_file in files:
            index_file.close()
