"""StoreService reads end to end: an appended batch through every read RPC, and PullQueues.

One batch with good and refused messages, then Get (by offset and by id), Pull
(tag filters, limits, raw records), QueryByKey, OffsetByTime, QueueRange,
ListQueues and GetStoreInfo; PullQueues answers many queues in order until
its byte budget, exactly as the same Pulls one by one would.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record import decode_record, decode_records
from tests.integration.store_service_helpers import (
    ILLEGAL,
    OK,
    Spawn,
    append,
    bodies,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    msg,
    start_store,
)


def test_append_batch_then_every_read(spawn: Spawn, connect, tmp_path: Path) -> None:
    stub = connect(start_store(spawn, tmp_path / "s"))
    results = append(
        stub,
        msg("Orders", 0, b"one", tags="tagA", keys=["order-1"], properties={"color": "red"}),
        msg("", 0, b"no topic"),
        msg("Orders", 0, b"two", tags="tagB"),
        msg("Orders", -1, b"broker must choose"),
        msg("../etc", 0, b"traversal"),
        msg("Orders", 1, b"three", tags="tagA", properties={"UNIQ_KEY": "uniq-3"}),
        msg("Orders", 0, b"x" * 9000),
        msg("Orders", 0, b"separator", properties={"bad\x01key": "v"}),
        msg("Orders", 0, b"four", tags="tagA", keys=["order-4", "shared"]),
    )
    assert [r.status for r in results] == [
        OK,
        ILLEGAL,
        OK,
        ILLEGAL,
        ILLEGAL,
        OK,
        ILLEGAL,
        ILLEGAL,
        OK,
    ]
    good = [r for r in results if r.status == OK]
    assert all(r.error for r in results if r.status != OK) and not any(r.error for r in good)
    assert "topic" in results[1].error and "queue_id -1" in results[3].error
    assert "9000" in results[6].error
    assert [(r.queue_id, r.queue_offset) for r in good] == [(0, 0), (0, 1), (1, 0), (0, 2)]
    offsets = [r.commitlog_offset for r in good]
    assert offsets == sorted(offsets) and offsets[0] == 0 and len(set(offsets)) == 4
    assert all(
        len(r.msg_id) == 32 and r.msg_id.endswith(f"{r.commitlog_offset:016X}") for r in good
    )

    # Get by offset: every field of the record.
    found = stub.Get(store_pb2.GetRequest(commitlog_offset=good[0].commitlog_offset))
    assert found.found
    one = found.message
    assert (one.topic, one.queue_id, one.queue_offset, one.body) == ("Orders", 0, 0, b"one")
    assert (one.tags, list(one.keys), one.properties["color"]) == ("tagA", ["order-1"], "red")
    assert one.msg_id == good[0].msg_id and one.commitlog_offset == good[0].commitlog_offset
    assert one.store_timestamp_ms == good[0].store_timestamp_ms
    assert one.body_crc == zlib.crc32(b"one") & 0x7FFFFFFF
    assert one.born_host.startswith("127.0.0.1:") and one.store_host == "127.0.0.1:10911"
    # Get by message id; nothing at an offset inside a record or past the end.
    by_id = stub.Get(store_pb2.GetRequest(msg_id=good[1].msg_id))
    assert by_id.found and by_id.message.body == b"two"
    assert not stub.Get(store_pb2.GetRequest(commitlog_offset=1)).found
    assert not stub.Get(store_pb2.GetRequest(commitlog_offset=10**9)).found

    # Pull with a tag filter, past the end, from an unknown queue.
    pulled = stub.Pull(store_pb2.PullRequest(topic="Orders", queue_id=0, subscription="tagA"))
    assert pulled.status == message_pb2.FOUND and bodies(pulled.messages) == [b"one", b"four"]
    assert (pulled.next_begin_offset, pulled.min_offset, pulled.max_offset) == (3, 0, 3)
    either = stub.Pull(
        store_pb2.PullRequest(topic="Orders", queue_id=0, subscription="tagB || tagC")
    )
    assert bodies(either.messages) == [b"two"]
    limited = stub.Pull(store_pb2.PullRequest(topic="Orders", queue_id=0, max_messages=2))
    assert bodies(limited.messages) == [b"one", b"two"] and limited.next_begin_offset == 2
    assert (
        stub.Pull(store_pb2.PullRequest(topic="Orders", queue_id=0, queue_offset=3)).status
        == message_pb2.OFFSET_OVERFLOW_ONE
    )
    assert (
        stub.Pull(store_pb2.PullRequest(topic="Orders", queue_id=5)).status
        == message_pb2.NO_MATCHED_LOGIC_QUEUE
    )

    # Pull raw records: the CommitLog format, back to back.
    raw = stub.Pull(store_pb2.PullRequest(topic="Orders", queue_id=0, raw_records=True))
    assert raw.record_count == 3 and not raw.messages
    view, position, decoded = memoryview(raw.records), 0, []
    while position < len(view):
        record = decode_record(view, position)
        decoded.append((record.commitlog_offset, bytes(record.body), record.tags))
        position += record.total_size
    assert decoded == [
        (good[0].commitlog_offset, b"one", "tagA"),
        (good[1].commitlog_offset, b"two", "tagB"),
        (good[3].commitlog_offset, b"four", "tagA"),
    ]

    # Query by key (KEYS and UNIQ_KEY), never by another topic's key.
    by_key = stub.QueryByKey(store_pb2.QueryByKeyRequest(topic="Orders", key="order-4"))
    assert bodies(by_key.messages) == [b"four"]
    by_uniq = stub.QueryByKey(store_pb2.QueryByKeyRequest(topic="Orders", key="uniq-3"))
    assert bodies(by_uniq.messages) == [b"three"]
    assert not stub.QueryByKey(store_pb2.QueryByKeyRequest(topic="Other", key="order-4")).messages

    # Offset by time, with a second batch stored at the same or a later millisecond.
    later = append(stub, msg("Orders", 0, b"five"))[0]
    stored = [(r.queue_offset, r.store_timestamp_ms) for r in good if r.queue_id == 0]
    stored.append((later.queue_offset, later.store_timestamp_ms))
    expected = min(q for q, ts in stored if ts >= later.store_timestamp_ms)

    def offset_by_time(ts: int) -> int:
        return stub.OffsetByTime(
            store_pb2.OffsetByTimeRequest(topic="Orders", queue_id=0, timestamp_ms=ts)
        ).queue_offset

    assert offset_by_time(later.store_timestamp_ms) == expected
    assert offset_by_time(0) == 0
    assert offset_by_time(later.store_timestamp_ms + 10**9) == 4

    # Queue ranges and the queue list.
    range0 = stub.QueueRange(store_pb2.QueueRangeRequest(topic="Orders", queue_id=0))
    assert (range0.exists, range0.min_offset, range0.max_offset) == (True, 0, 4)
    assert not stub.QueueRange(store_pb2.QueueRangeRequest(topic="Orders", queue_id=7)).exists
    listed = stub.ListQueues(store_pb2.ListQueuesRequest()).queues
    assert [(q.topic, q.queue_id, q.min_offset, q.max_offset) for q in listed] == [
        ("Orders", 0, 0, 4),
        ("Orders", 1, 0, 1),
    ]
    assert len(stub.ListQueues(store_pb2.ListQueuesRequest(topic="Orders")).queues) == 2
    assert not stub.ListQueues(store_pb2.ListQueuesRequest(topic="Nobody")).queues

    info = stub.GetStoreInfo(store_pb2.GetStoreInfoRequest())
    assert info.role == "MASTER" and info.store_host == "127.0.0.1:10911"
    assert info.commitlog_min_offset == 0 and info.commitlog_max_offset > later.commitlog_offset
    assert info.dispatched_offset == info.commitlog_max_offset and not info.disk_full


def test_pull_queues_answers_each_queue_in_order_until_the_byte_budget(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    stub = connect(start_store(spawn, tmp_path / "s"))
    append(stub, *(msg("T", 0, f"t0-{n}".encode()) for n in range(3)))
    append(stub, *(msg("T", 1, b"x" * 2000) for _ in range(2)))
    append(stub, msg("U", 0, b"u0", tags="red"), msg("U", 0, b"u1", tags="blue"))
    append(stub, *(msg("V", 0, b"v") for _ in range(3)))
    pulls = [
        store_pb2.PullRequest(topic="T", queue_id=1),
        store_pb2.PullRequest(topic="T", queue_id=0, queue_offset=1),
        store_pb2.PullRequest(topic="U", queue_id=0, subscription="blue"),
        store_pb2.PullRequest(topic="T", queue_id=2),
        store_pb2.PullRequest(topic="V", queue_id=0, queue_offset=3),
    ]
    answer = stub.PullQueues(store_pb2.PullQueuesRequest(pulls=pulls))
    assert [a.status for a in answer.answers] == [
        message_pb2.FOUND,
        message_pb2.FOUND,
        message_pb2.FOUND,
        message_pb2.NO_MATCHED_LOGIC_QUEUE,
        message_pb2.OFFSET_OVERFLOW_ONE,
    ]
    assert [bodies(decode_records(a.records)) for a in answer.answers] == [
        [b"x" * 2000] * 2,
        [b"t0-1", b"t0-2"],
        [b"u1"],
        [],
        [],
    ]
    assert [(a.record_count, a.next_begin_offset, a.max_offset) for a in answer.answers] == [
        (2, 2, 2),
        (2, 3, 3),
        (1, 2, 2),
        (0, 0, 0),
        (0, 3, 3),
    ]
    # The same reads one by one answer the same.
    for pull, queue_answer in zip(pulls, answer.answers, strict=True):
        pull.raw_records = True
        assert stub.Pull(pull) == queue_answer
    # 2,500 bytes: one 2 KB record, then what is left for the queues after it.
    cut = stub.PullQueues(store_pb2.PullQueuesRequest(pulls=pulls, max_bytes=2500))
    assert [a.record_count for a in cut.answers] == [1, 2, 1, 0, 0]
    # A budget smaller than one record answers the first queue with one, and no other.
    one = stub.PullQueues(store_pb2.PullQueuesRequest(pulls=pulls, max_bytes=1000))
    assert [bodies(decode_records(a.records)) for a in one.answers] == [[b"x" * 2000]]


def test_a_pull_in_pull_queues_without_max_bytes_is_bounded_by_the_calls_budget_only(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    # A Pull without max_bytes gets the store's 256 KiB (maxTransferBytesOnMessageInMemory);
    # inside PullQueues the same pull gets what is left of the call's budget (4 MiB).
    stub = connect(start_store(spawn, tmp_path / "s"))
    for _ in range(4):
        append(stub, *(msg("T", 0, bytes(1024)) for _ in range(100)))
    pull = store_pb2.PullRequest(topic="T", queue_id=0, max_messages=400, raw_records=True)
    alone = stub.Pull(pull)
    assert 200 < alone.record_count < 256
    whole = stub.PullQueues(store_pb2.PullQueuesRequest(pulls=[pull]))
    assert [(a.record_count, a.next_begin_offset) for a in whole.answers] == [(400, 400)]
    assert len(whole.answers[0].records) > 400 * 1024
    # A pull's own max_bytes still holds, and so does the call's.
    pull.max_bytes = 10 * 1024
    own = stub.PullQueues(store_pb2.PullQueuesRequest(pulls=[pull]))
    assert 5 <= own.answers[0].record_count <= 10
    pull.max_bytes = 0
    call = stub.PullQueues(store_pb2.PullQueuesRequest(pulls=[pull], max_bytes=20 * 1024))
    assert 10 <= call.answers[0].record_count <= 20
