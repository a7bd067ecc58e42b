"""chunk_requests: the vector check of a replicated chunk agrees with check_chunk.

Chunks come from a real store's CommitLog (``read_bytes``), as the HA
service ships them. Where the vector path answers, its requests must equal
the scalar path's record for record; where the scalar check refuses a chunk,
the vector path must not answer (it leaves the refusal to check_chunk).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from boltmq.wire.record import (
    BODY_CRC_OFFSET,
    PHYSICAL_OFFSET_OFFSET,
    QUEUE_OFFSET_OFFSET,
    SCHEDULE_TOPIC,
    CorruptRecord,
)
from services.store import MessageStore, StoreMessage
from services.store.chunk_records import SMALL_CHUNK, chunk_requests
from services.store.commitlog import dispatch_request_of
from services.store.record_scan import check_chunk

SEGMENT = 64 * 1024  # small_config's segment size
StoreFactory = Callable[..., MessageStore]


def scalar_requests(data: bytes, offset: int) -> list[tuple]:  # type: ignore[type-arg]
    return [tuple(dispatch_request_of(r)) for r in check_chunk(data, offset, SEGMENT)]


def chunk_of(store: MessageStore, messages: list[StoreMessage]) -> tuple[int, bytes]:
    """Append ``messages``; the CommitLog bytes they took, with their offset."""
    start = store.commitlog.max_offset
    for message in messages:
        store.put_message(message)
    return start, store.commitlog.read_bytes(start, SEGMENT)


def plain(count: int, topic: str = "T", **fields: object) -> list[StoreMessage]:
    return [
        StoreMessage(topic=topic, queue_id=i % 4, body=bytes([i % 251]) * 200, **fields)  # type: ignore[arg-type]
        for i in range(count)
    ]


def test_a_plain_chunk_takes_the_vector_path_with_the_scalar_requests(
    make_store: StoreFactory,
) -> None:
    offset, data = chunk_of(make_store(), plain(40) + plain(30, topic="Other", tags="red"))
    requests = chunk_requests(data, offset, SEGMENT)
    assert requests is not None
    assert requests == scalar_requests(data, offset)
    assert {r[0] for r in requests} == {"T", "Other"}


def test_keys_and_transactions_keep_their_fields(make_store: StoreFactory) -> None:
    messages = [
        StoreMessage(
            topic="T", queue_id=i % 2, body=b"b" * 100, keys=[f"k{i}", "shared"], tags=f"t{i % 3}"
        )
        for i in range(30)
    ]
    offset, data = chunk_of(make_store(), messages)
    requests = chunk_requests(data, offset, SEGMENT)
    assert requests is not None and requests == scalar_requests(data, offset)
    assert requests[7][7] == ("k7", "shared")


def test_a_chunk_that_ends_its_segment_with_the_blank_marker(make_store: StoreFactory) -> None:
    store = make_store()
    while store.commitlog.max_offset < SEGMENT:  # the segment fills and rolls
        store.put_messages(plain(20))
    offsets, data = [0], b""
    while offsets[-1] + len(data) < SEGMENT:  # the chunks a replica gets, up to the marker
        offsets.append(offsets[-1] + len(data))
        data = store.commitlog.read_bytes(offsets[-1], 16 * 1024)
    offset = offsets[-2]  # the last two chunks: enough records for the vector path
    data = store.commitlog.read_bytes(offset, SEGMENT)
    requests = chunk_requests(data, offset, SEGMENT)
    assert requests is not None
    assert requests == scalar_requests(data, offset)
    assert requests[-1][2] + requests[-1][3] < SEGMENT  # the marker is no request


def test_scheduled_and_few_records_go_to_the_scalar_check(make_store: StoreFactory) -> None:
    store = make_store()
    offset, data = chunk_of(store, plain(SMALL_CHUNK - 1))
    assert chunk_requests(data, offset, SEGMENT) is None
    offset, data = chunk_of(store, plain(20, topic=SCHEDULE_TOPIC, properties={"DELAY": "2"}))
    assert chunk_requests(data, offset, SEGMENT) is None
    assert len(scalar_requests(data, offset)) == 20


LONG = struct.Struct(">q")
INT = struct.Struct(">i")


@pytest.mark.parametrize("damage", ["crc", "physical", "cut", "total", "properties"])
def test_a_damaged_chunk_is_left_to_the_scalar_refusal(
    make_store: StoreFactory, damage: str
) -> None:
    offset, data = chunk_of(make_store(), plain(40, tags="red"))
    raw = bytearray(data)
    size = INT.unpack_from(raw, 0)[0]
    third = 2 * size  # every plain record here has the same size
    if damage == "crc":
        raw[third + BODY_CRC_OFFSET] ^= 0x01
    elif damage == "physical":
        LONG.pack_into(raw, third + PHYSICAL_OFFSET_OFFSET, offset + third + 1)
    elif damage == "cut":
        raw = raw[:-5]
    elif damage == "total":
        INT.pack_into(raw, third, size + 1)
    else:  # a properties section that does not decode: "TAGS\x01red\x02" loses its \x01
        at = raw.index(b"TAGS\x01", third)
        raw[at + 4] = ord("_")
    damaged = bytes(raw)
    assert chunk_requests(damaged, offset, SEGMENT) is None
    with pytest.raises(CorruptRecord):
        check_chunk(damaged, offset, SEGMENT)


def test_queue_offsets_are_taken_from_the_records(make_store: StoreFactory) -> None:
    offset, data = chunk_of(make_store(), plain(32))
    raw = bytearray(data)
    size = INT.unpack_from(raw, 0)[0]
    LONG.pack_into(raw, 5 * size + QUEUE_OFFSET_OFFSET, 12345)  # not covered by any CRC
    requests = chunk_requests(bytes(raw), offset, SEGMENT)
    assert requests is not None and requests[5][6] == 12345
    assert requests == scalar_requests(bytes(raw), offset)
