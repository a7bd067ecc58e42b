"""Index work on many keys at once against the same work one key at a time.

Keys of one length in ASCII (the SDK's unique ids) are hashed as one matrix of their
bytes, other keys as UTF-16 code units grouped by length; both must give exactly what
``key_hash`` gives one key at a time (the entry hash a Java reader computes), also when
the keys are of many topics. A batch of entries is written as arrays; the file must hold
the bytes ``put`` of each writes, and records indexed together the files of each record
indexed alone.
"""

from __future__ import annotations

from pathlib import Path

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
    topics_key_hashes,
)
from services.store.index_service import IndexEntry, IndexService


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


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.sampled_from(["A", "Orders", "%RETRY%g", "TopicÄ"]), st.text(max_size=12)),
        max_size=24,
    )
    | st.integers(1, 40).flatmap(
        lambda n: st.lists(
            st.tuples(
                st.text(min_size=1, max_size=12),
                st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=n, max_size=n),
            ),
            min_size=2,
            max_size=40,
        )
    ),
)
def test_hashes_of_keys_of_many_topics_are_each_keys_own(pairs: list[tuple[str, str]]) -> None:
    """The keys of an append of many topics' one-record sections are hashed together,
    each with its own topic; each must be what key_hash gives that topic and key."""
    topics = [topic for topic, _ in pairs]
    keys = [key for _, key in pairs]
    assert topics_key_hashes(topics, keys) == [key_hash(t, k) for t, k in pairs]


def test_keys_of_many_records_indexed_together_are_the_files_of_one_by_one(
    tmp_path: Path,
) -> None:
    """build_index_many writes what build_index of each record writes: across files that
    fill up, store times that change within the call, records without keys, and records
    at or below what the files already hold (indexed before a restart: skipped)."""
    base = 1_767_225_600_000
    records: list[IndexEntry] = [
        (f"T{n % 5}", (f"{n:032X}",) if n % 7 else (f"key{n}", "", f"{n:032X}"), 100 * n, base)
        for n in range(1, 40)
    ]
    records[10:20] = [(t, k, o, base + 2_500) for t, k, o, _ in records[10:20]]
    records[25] = (records[25][0], (), records[25][2], base + 2_500)
    services = [
        IndexService(tmp_path / name, max_hash_slot_num=7, max_index_num=16)
        for name in ("together", "alone")
    ]
    together, alone = services
    try:
        for service in services:
            service.build_index("T0", ["first"], 50, base)
        together.build_index_many([(t, k, 20, s) for t, k, _, s in records[:3]])  # indexed
        together.build_index_many(records[:12])
        together.build_index_many(records[12:])
        for topic, keys, offset, store_ts in records:
            alone.build_index(topic, keys, offset, store_ts)
        files = [sorted((tmp_path / name).iterdir()) for name in ("together", "alone")]
        assert len(files[0]) == len(files[1]) > 2
        assert [f.read_bytes() for f in files[0]] == [f.read_bytes() for f in files[1]]
    finally:
        for service in services:
            service.close()
