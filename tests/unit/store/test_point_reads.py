"""One record read through the file, not the mapping (services/store/point_reads.py).

Residency is asked of the kernel with mincore(2) on a fresh mapping of the segment
(tests/page_residency.py): a lookup of a record whose pages were released brings back
the pages it reads, where a read through the mapping brings back the read-ahead around
them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from boltmq.wire.record import CorruptRecord
from services.store import MessageStore, PutStatus, StoreMessage
from tests.page_residency import PAGE_SIZE, resident_pages

SEGMENT = 8 * 1024 * 1024
BODY = 1000


def filled(make_store: Callable[..., MessageStore]) -> tuple[MessageStore, list[int]]:
    """A store of one 8 MiB segment filled three quarters with 1,000-byte bodies, flushed."""
    store = make_store(mapped_file_size_commitlog=SEGMENT)
    offsets = []
    for n in range(6_000):
        result = store.put_message(StoreMessage(topic="T", body=n.to_bytes(4, "big") * 250))
        assert result.status == PutStatus.PUT_OK
        offsets.append(result.commitlog_offset)
    assert store.flusher is not None
    store.flusher.flush_now()
    return store, offsets


def test_a_released_record_read_by_offset_brings_back_only_its_pages(
    make_store: Callable[..., MessageStore],
) -> None:
    store, offsets = filled(make_store)
    (segment,) = store.commitlog.files.files
    segment.drop_cached(0, segment.file_size)
    kept = sum(resident_pages(segment.path))  # at most the page holding the flushed end
    assert kept <= 1

    record = store.look_message(offsets[3_000])
    assert record is not None and bytes(record.body) == (3_000).to_bytes(4, "big") * 250
    assert 1 <= sum(resident_pages(segment.path)) - kept <= 2

    segment.drop_cached(0, segment.file_size)
    position = offsets[3_000]
    bytes(segment.view[position : position + BODY])  # the same bytes through the mapping
    assert sum(resident_pages(segment.path)) - kept > 2 * (BODY // PAGE_SIZE + 2)


def test_offset_by_time_over_released_pages_finds_the_first_record_at_its_time(
    make_store: Callable[..., MessageStore],
) -> None:
    store, offsets = filled(make_store)
    (segment,) = store.commitlog.files.files
    middle = store.look_message(offsets[3_000])
    assert middle is not None
    segment.drop_cached(0, segment.file_size)
    queue_offset = store.offset_by_time("T", 0, middle.store_timestamp)
    first = store.get_messages("T", 0, queue_offset, 1).messages[0]
    assert first.store_timestamp == middle.store_timestamp
    if queue_offset:
        before = store.get_messages("T", 0, queue_offset - 1, 1).messages[0]
        assert before.store_timestamp < middle.store_timestamp


def test_a_record_longer_than_the_first_read_comes_whole(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    body = bytes(range(256)) * 160  # 40 KiB: ten pages
    result = store.put_message(StoreMessage(topic="T", body=body, keys=["big"]))
    assert result.status == PutStatus.PUT_OK
    record = store.look_message(result.commitlog_offset)
    assert record is not None and bytes(record.body) == body
    assert [bytes(m.body) for m in store.query_messages("T", "big")] == [body]


def test_a_read_that_finds_no_record_names_its_segment_and_position(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    result = store.put_message(StoreMessage(topic="T", body=b"x" * 100))
    with pytest.raises(CorruptRecord, match=r"segment 0{20}, position 1\)"):
        store.commitlog.read_record(result.commitlog_offset + 1)
    assert store.look_message(result.commitlog_offset + 1) is None
    assert store.commitlog.read_record(store.commitlog.max_offset) is None
