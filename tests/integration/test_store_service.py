"""StoreService end to end: a real ``boltmq serve store`` process spoken to over gRPC.

Every test starts its own store process on port 0 (the ``spawn`` fixture) with
64 KiB CommitLog segments, so a few hundred KiB of messages cross segments and
leave blank markers behind. One test runs the server in-process through
``create_server``.
"""

from __future__ import annotations

import asyncio
import queue
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import channel, sync_channel
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from boltmq.wire.record import MAGIC_BLANK, decode_record, decode_records
from services.store import MessageStore, StoreConfig
from services.store.arrival_streams import WATCHING_METADATA
from services.store.server import create_server
from tests.integration.procs import ServiceProcess
from tests.waiting import wait_until

SEGMENT_BYTES = 65536
SMALL = (
    f"mapped_file_size_commitlog={SEGMENT_BYTES}",
    "mapped_file_size_consume_queue=20000",
    "max_hash_slot_num=1000",
    "max_index_num=4000",
    "max_message_size_bytes=8192",
)
OK = message_pb2.PUT_OK
ILLEGAL = message_pb2.MESSAGE_ILLEGAL

Spawn = Callable[..., ServiceProcess]


def start_store(spawn: Spawn, root: Path, *settings: str) -> ServiceProcess:
    return spawn("store", f"root_dir={root}", *SMALL, *settings)


@pytest.fixture
def connect() -> Iterator[Callable[[ServiceProcess], store_pb2_grpc.StoreServiceStub]]:
    """``connect(proc)``: a stub on a blocking channel, closed at the end of the test."""
    channels: list[grpc.Channel] = []

    def factory(proc: ServiceProcess) -> store_pb2_grpc.StoreServiceStub:
        chan = sync_channel(proc.address)
        channels.append(chan)
        return store_pb2_grpc.StoreServiceStub(chan)

    yield factory
    for chan in channels:
        chan.close()


def msg(topic: str, queue_id: int = 0, body: bytes = b"", **fields: object) -> message_pb2.Message:
    return message_pb2.Message(topic=topic, queue_id=queue_id, body=body, **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PutOutcome:
    """One message's entry of an AppendResponse's packed arrays."""

    status: int
    error: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    store_timestamp_ms: int


def outcomes(
    response: store_pb2.AppendResponse, messages: Sequence[message_pb2.Message]
) -> list[PutOutcome]:
    assert (
        len(response.statuses)
        == len(response.commitlog_offsets)
        == len(response.queue_offsets)
        == len(messages)
    )
    return [
        PutOutcome(
            status,
            response.errors.get(i, ""),
            messages[i].queue_id,
            queue_offset,
            offset,
            f"{response.msg_id_prefix}{offset:016X}" if offset >= 0 else "",
            response.store_timestamp_ms,
        )
        for i, (status, queue_offset, offset) in enumerate(
            zip(response.statuses, response.queue_offsets, response.commitlog_offsets, strict=True)
        )
    ]


def append(
    stub: store_pb2_grpc.StoreServiceStub, *messages: message_pb2.Message
) -> list[PutOutcome]:
    return outcomes(stub.Append(store_pb2.AppendRequest(messages=messages)), messages)


def bodies(messages: object) -> list[bytes]:
    return [m.body for m in messages]  # type: ignore[attr-defined]


def invalid(call: Callable[[object], object], request: object) -> str:
    """The details of the INVALID_ARGUMENT that ``call(request)`` must fail with."""
    with pytest.raises(grpc.RpcError) as info:
        result = call(request)
        if isinstance(result, Iterator):  # a server stream fails on the first read
            list(result)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    return str(info.value.details())


def commitlog_bytes(root: Path, max_offset: int) -> bytes:
    """The CommitLog's bytes [first segment start, max_offset) read from its files."""
    data = b"".join(path.read_bytes() for path in sorted((root / "commitlog").iterdir()))
    return data[:max_offset]


# =========================================================================== append & reads
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


def test_watch_arrivals_sees_an_append(spawn: Spawn, connect, tmp_path: Path) -> None:
    stub = connect(start_store(spawn, tmp_path / "s", "arrival_watch_queue_max=2"))
    watch = stub.WatchArrivals(store_pb2.WatchArrivalsRequest())
    # The metadata comes once the stream listens: every later arrival reaches it.
    assert tuple(watch.initial_metadata()) == WATCHING_METADATA
    append(stub, msg("Events", 2, b"a"), msg("Events", 2, b"b"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Events", 2, 2)
    append(stub, msg("Events", 3, b"c"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Events", 3, 1)
    # One batch touching more queues than a stream may have pending: the stream
    # ends with a clear error instead of growing or silently dropping a wake-up.
    append(stub, *(msg("Events", q, b"burst") for q in range(4, 7)))
    with pytest.raises(grpc.RpcError) as info:
        next(watch)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more than 2 queues" in str(info.value.details())
    # A new stream starts afresh.
    again = stub.WatchArrivals(store_pb2.WatchArrivalsRequest())
    again.initial_metadata()
    append(stub, msg("Events", 2, b"c"))
    assert next(again).max_offset == 3
    again.cancel()


def test_watch_queues_answers_only_what_is_waited_on(spawn: Spawn, connect, tmp_path: Path) -> None:
    stub = connect(start_store(spawn, tmp_path / "s"))
    append(stub, msg("Q", 0, b"a"))
    interests: queue.Queue[store_pb2.QueueInterest | None] = queue.Queue()
    watch = stub.WatchQueues(iter(interests.get, None))
    assert tuple(watch.initial_metadata()) == WATCHING_METADATA
    # Already past the offset: answered at once.
    interests.put(store_pb2.QueueInterest(topic="Q", queue_id=0, after_offset=0))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 0, 1)
    # Waiting at the end: the next append answers; queue 1, never named, sends nothing.
    interests.put(store_pb2.QueueInterest(topic="Q", queue_id=0, after_offset=1))
    append(stub, msg("Q", 1, b"unwatched"))
    append(stub, msg("Q", 0, b"b"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 0, 2)
    # Answered once, then forgotten: this append reaches nobody, the named queue 2 does.
    append(stub, msg("Q", 0, b"c"))
    interests.put(store_pb2.QueueInterest(topic="Q", queue_id=2, after_offset=0))
    append(stub, msg("Q", 2, b"d"))
    arrival = next(watch)
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 2, 1)
    # One message naming three queues (``more``): each is watched as if named alone.
    interests.put(
        store_pb2.QueueInterest(
            topic="Q",
            queue_id=3,
            after_offset=0,
            more=[
                store_pb2.QueueInterest(topic="Q", queue_id=0, after_offset=1),
                store_pb2.QueueInterest(topic="R", queue_id=1, after_offset=0),
            ],
        )
    )
    arrival = next(watch)  # queue 0 already ends past 1
    assert (arrival.topic, arrival.queue_id, arrival.max_offset) == ("Q", 0, 3)
    append(stub, msg("R", 1, b"e"))
    append(stub, msg("Q", 3, b"f"))
    assert {(a.topic, a.queue_id, a.max_offset) for a in (next(watch), next(watch))} == {
        ("R", 1, 1),
        ("Q", 3, 1),
    }
    # A malformed interest ends the stream, naming the field.
    inner = store_pb2.QueueInterest(topic="Q")
    for bad, field in (
        (store_pb2.QueueInterest(topic="a/b"), "topic"),
        (store_pb2.QueueInterest(topic="Q", queue_id=-1), "queue_id"),
        (store_pb2.QueueInterest(topic="Q", after_offset=-1), "after_offset"),
        (
            store_pb2.QueueInterest(topic="Q", more=[inner, store_pb2.QueueInterest(topic="..")]),
            "more[1].topic",
        ),
        (
            store_pb2.QueueInterest(
                topic="Q", more=[store_pb2.QueueInterest(topic="Q", more=[inner])]
            ),
            "more[0].more",
        ),
    ):
        stream = stub.WatchQueues(iter([bad]))
        with pytest.raises(grpc.RpcError) as info:
            next(stream)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert str(info.value.details()).startswith(f"{field}: ")
    interests.put(None)
    watch.cancel()


# =========================================================================== CommitLog stream & HA
def test_commitlog_stream_is_the_file_and_replicates(spawn: Spawn, connect, tmp_path: Path) -> None:
    root = tmp_path / "master"
    master = connect(start_store(spawn, root))
    for batch in range(4):
        results = append(
            master,
            *(msg("Rep", i % 2, bytes([65 + batch]) * 1000, tags=f"t{i}") for i in range(40)),
        )
        assert {r.status for r in results} == {OK}
    end = master.GetStoreInfo(store_pb2.GetStoreInfoRequest()).commitlog_max_offset
    assert end > 2 * SEGMENT_BYTES  # three segments, two blank markers

    chunks = list(master.ReadCommitLog(store_pb2.ReadCommitLogRequest(max_chunk_bytes=10_000)))
    position = 0
    for chunk in chunks:
        assert chunk.offset == position and 0 < len(chunk.data) <= 10_000
        assert chunk.end_offset == chunk.offset + len(chunk.data)
        last_byte = chunk.offset + len(chunk.data) - 1
        assert chunk.offset // SEGMENT_BYTES == last_byte // SEGMENT_BYTES
        position += len(chunk.data)
    streamed = b"".join(c.data for c in chunks)
    assert streamed == commitlog_bytes(root, end)
    assert MAGIC_BLANK.to_bytes(4, "big") in streamed
    second = len(chunks[0].data)  # chunks hold whole records: this is a record start
    tail = list(master.ReadCommitLog(store_pb2.ReadCommitLogRequest(offset=second)))
    assert b"".join(c.data for c in tail) == streamed[second:]
    with pytest.raises(grpc.RpcError) as mid_record:
        list(master.ReadCommitLog(store_pb2.ReadCommitLogRequest(offset=100)))
    assert mid_record.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not the start of a record" in str(mid_record.value.details())

    refused = master.AppendRaw(store_pb2.AppendRawRequest(offset=end, data=b"x"))
    assert not refused.ok and "SLAVE" in refused.error and refused.max_offset == end

    replica_proc = start_store(spawn, tmp_path / "replica", "broker_role=SLAVE")
    replica = connect(replica_proc)
    watch = replica.WatchArrivals(store_pb2.WatchArrivalsRequest())
    watch.initial_metadata()
    wrong = replica.AppendRaw(store_pb2.AppendRawRequest(offset=5, data=chunks[0].data))
    assert not wrong.ok and wrong.max_offset == 0 and "5" in wrong.error
    for chunk in chunks:
        applied = replica.AppendRaw(
            store_pb2.AppendRawRequest(offset=chunk.offset, data=chunk.data)
        )
        assert applied.ok and applied.max_offset == chunk.offset + len(chunk.data)
    pending = {0: 80, 1: 80}
    while pending:
        arrival = next(watch)
        if arrival.max_offset >= pending.get(arrival.queue_id, 1 << 62):
            del pending[arrival.queue_id]
    watch.cancel()
    # Every chunk is whole records, each checked before it was written.
    assert "ERROR" not in replica_proc.log()
    for queue_id in (0, 1):
        request = store_pb2.PullRequest(
            topic="Rep", queue_id=queue_id, max_messages=100, max_bytes=1 << 20
        )
        assert replica.Pull(request) == master.Pull(request)
    refused_put = append(replica, msg("Rep", 0, b"client write"))[0]
    assert refused_put.status == message_pb2.SERVICE_NOT_AVAILABLE

    # The same chunks over one AppendRawStream: answered in order, a refusal keeps the
    # stream open, and a chunk whose end_offset is not offset + its size is refused.
    streamed_proc = start_store(spawn, tmp_path / "streamed", "broker_role=SLAVE")
    streamed_to = connect(streamed_proc)
    first, lying = chunks[0], store_pb2.CommitLogChunk()
    lying.CopyFrom(chunks[1])
    lying.end_offset += 1
    sent = [first, first, lying, *chunks[1:]]
    answers = list(streamed_to.AppendRawStream(iter(sent), timeout=30))
    assert [a.ok for a in answers] == [True, False, False] + [True] * (len(chunks) - 1)
    assert "ends at" in answers[1].error and answers[1].max_offset == first.end_offset
    assert f"says it ends at {lying.end_offset}" in answers[2].error
    assert [a.max_offset for a in answers[3:]] == [c.end_offset for c in chunks[1:]]
    for queue_id in (0, 1):
        request = store_pb2.PullRequest(
            topic="Rep", queue_id=queue_id, max_messages=100, max_bytes=1 << 20
        )
        wait_until(
            lambda r=request: streamed_to.Pull(r) == master.Pull(r),
            f"queue {queue_id} dispatched on the streamed-to replica",
        )

    # Following: a heartbeat while idle, then the new bytes as soon as they are appended.
    follow = master.ReadCommitLog(
        store_pb2.ReadCommitLogRequest(offset=end, follow=True, heartbeat_ms=100)
    )
    heartbeat = next(follow)
    assert (heartbeat.offset, heartbeat.data, heartbeat.master_max_offset) == (end, b"", end)
    new = append(master, msg("Rep", 0, b"late"))[0]
    chunk = next(c for c in follow if c.data)
    follow.cancel()
    assert chunk.offset == end == new.commitlog_offset
    assert decode_record(memoryview(chunk.data), 0).body == b"late"
    assert replica.AppendRaw(store_pb2.AppendRawRequest(offset=end, data=chunk.data)).ok


# =========================================================================== config files
def test_config_files_round_trip_backup_and_names(spawn: Spawn, connect, tmp_path: Path) -> None:
    root = tmp_path / "s"
    stub = connect(start_store(spawn, root))
    v1, v2 = b'{"topics": {"A": 8}}', b'{"topics": {"A": 8, "B": 4}}'

    def get(name: str) -> store_pb2.GetConfigResponse:
        return stub.GetConfig(store_pb2.GetConfigRequest(name=name))

    stub.PutConfig(store_pb2.PutConfigRequest(name="topics.json", content=v1))
    assert (get("topics.json").found, get("topics.json").content) == (True, v1)
    stub.PutConfig(store_pb2.PutConfigRequest(name="topics.json", content=v2))
    assert get("topics.json").content == v2
    config_dir = root / "config"
    assert (config_dir / "topics.json").read_bytes() == v2
    assert (config_dir / "topics.json.bak").read_bytes() == v1
    assert sorted(p.name for p in config_dir.iterdir()) == ["topics.json", "topics.json.bak"]
    # A damaged current file falls back to the previous version ...
    for damage in (b"", b'{"topics": {"A"'):
        (config_dir / "topics.json").write_bytes(damage)
        assert get("topics.json").content == v1
    # ... and is never kept as the backup by the next write.
    stub.PutConfig(store_pb2.PutConfigRequest(name="topics.json", content=v2))
    assert (config_dir / "topics.json.bak").read_bytes() == v1
    assert not get("nothing.json").found

    for name in (
        "",
        ".",
        "..",
        "../escape.json",
        "a/b",
        "sp ace",
        "x.bak",
        "x.tmp",
        "é",
        "n" * 201,
    ):
        assert invalid(
            stub.PutConfig, store_pb2.PutConfigRequest(name=name, content=b"{}")
        ).startswith("name:")
        assert invalid(stub.GetConfig, store_pb2.GetConfigRequest(name=name)).startswith("name:")
    for content in (b"not json", b"\xff\xfe", b"   ", b"1" * (16 * 1024 * 1024 + 1)):
        assert invalid(
            stub.PutConfig, store_pb2.PutConfigRequest(name="bad.json", content=content)
        ).startswith("content:")
    assert not (tmp_path / "escape.json").exists() and not (root / "escape.json").exists()
    assert not get("bad.json").found


# =========================================================================== bad input
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


def test_every_bad_request_names_its_field(spawn: Spawn, connect, tmp_path: Path) -> None:
    stub = connect(start_store(spawn, tmp_path / "s"))
    append(stub, msg("T", 0, b"x"))
    s = store_pb2
    cases: list[tuple[Callable[[object], object], object, str]] = [
        (stub.Append, s.AppendRequest(messages=[msg("T")], born_host="nonsense"), "born_host"),
        (
            stub.Append,
            s.AppendRequest(messages=[msg("T")], born_host="10.0.0.1:70000"),
            "born_host",
        ),
        (stub.Get, s.GetRequest(), "by"),
        (stub.Get, s.GetRequest(commitlog_offset=-1), "commitlog_offset"),
        (stub.Get, s.GetRequest(msg_id="zz"), "msg_id"),
        (stub.Get, s.GetRequest(msg_id="G" * 32), "msg_id"),
        (stub.Pull, s.PullRequest(topic=""), "topic"),
        (stub.Pull, s.PullRequest(topic="a/b"), "topic"),
        (stub.Pull, s.PullRequest(topic="..", queue_id=0), "topic"),
        (stub.Pull, s.PullRequest(topic="T", queue_id=-1), "queue_id"),
        (stub.Pull, s.PullRequest(topic="T", queue_id=5000), "queue_id"),
        (stub.Pull, s.PullRequest(topic="T", queue_offset=-1), "queue_offset"),
        (stub.Pull, s.PullRequest(topic="T", max_messages=-1), "max_messages"),
        (stub.Pull, s.PullRequest(topic="T", max_bytes=-1), "max_bytes"),
        (stub.Pull, s.PullRequest(topic="T", subscription="a || "), "subscription"),
        (stub.PullQueues, s.PullQueuesRequest(), "pulls"),
        (
            stub.PullQueues,
            s.PullQueuesRequest(pulls=[s.PullRequest(topic="T", queue_id=n) for n in range(1025)]),
            "pulls",
        ),
        (
            stub.PullQueues,
            s.PullQueuesRequest(pulls=[s.PullRequest(topic="T"), s.PullRequest(topic="../T")]),
            "pulls[1].topic",
        ),
        (
            stub.PullQueues,
            s.PullQueuesRequest(pulls=[s.PullRequest(topic="T", queue_offset=-1)]),
            "pulls[0].queue_offset",
        ),
        (
            stub.PullQueues,
            s.PullQueuesRequest(pulls=[s.PullRequest(topic="T", max_bytes=-1)]),
            "pulls[0].max_bytes",
        ),
        (
            stub.PullQueues,
            s.PullQueuesRequest(pulls=[s.PullRequest(topic="T", subscription="||")]),
            "pulls[0].subscription",
        ),
        (
            stub.PullQueues,
            s.PullQueuesRequest(
                pulls=[s.PullRequest(topic="T"), s.PullRequest(topic="T", queue_offset=3)]
            ),
            "pulls[1]",
        ),
        (
            stub.PullQueues,
            s.PullQueuesRequest(pulls=[s.PullRequest(topic="T")], max_bytes=-1),
            "max_bytes",
        ),
        (stub.QueryByKey, s.QueryByKeyRequest(topic="T", key=""), "key"),
        (stub.QueryByKey, s.QueryByKeyRequest(topic="T" * 128, key="k"), "topic"),
        (stub.QueryByKey, s.QueryByKeyRequest(topic="T", key="k", max_count=-1), "max_count"),
        (stub.QueryByKey, s.QueryByKeyRequest(topic="T", key="k", begin_ms=-1), "begin_ms"),
        (stub.QueryByKey, s.QueryByKeyRequest(topic="T", key="k", begin_ms=5, end_ms=4), "end_ms"),
        (stub.OffsetByTime, s.OffsetByTimeRequest(topic="T", timestamp_ms=-1), "timestamp_ms"),
        (stub.OffsetByTime, s.OffsetByTimeRequest(topic="T/..", timestamp_ms=1), "topic"),
        (stub.QueueRange, s.QueueRangeRequest(topic="T", queue_id=-2), "queue_id"),
        (stub.ListQueues, s.ListQueuesRequest(topic="a b"), "topic"),
        (stub.ReadCommitLog, s.ReadCommitLogRequest(offset=-1), "offset"),
        (stub.ReadCommitLog, s.ReadCommitLogRequest(max_chunk_bytes=-1), "max_chunk_bytes"),
        (stub.ReadCommitLog, s.ReadCommitLogRequest(follow=True, heartbeat_ms=-1), "heartbeat_ms"),
        (stub.AppendRaw, s.AppendRawRequest(offset=-1, data=b"x"), "offset"),
        (stub.AppendRaw, s.AppendRawRequest(offset=0), "data"),
    ]
    for call, request, field in cases:
        details = invalid(call, request)
        assert details.startswith(f"{field}: "), (request, details)
    for chunk, field in (
        (s.CommitLogChunk(offset=-1, data=b"x", end_offset=0), "offset"),
        (s.CommitLogChunk(offset=0), "data"),
    ):
        with pytest.raises(grpc.RpcError) as bad_chunk:
            list(stub.AppendRawStream(iter([chunk]), timeout=10))
        assert bad_chunk.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert str(bad_chunk.value.details()).startswith(f"{field}: ")
    with pytest.raises(grpc.RpcError) as info:
        list(stub.ReadCommitLog(store_pb2.ReadCommitLogRequest(offset=10**9)))
    assert info.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert "past the CommitLog's end" in str(info.value.details())
    # Nothing above reached the disk as a topic.
    assert [q.topic for q in stub.ListQueues(store_pb2.ListQueuesRequest()).queues] == ["T"]


# =========================================================================== restart & SIGTERM
def test_sigterm_is_clean_and_a_restart_serves_the_same_data(
    spawn: Spawn, connect, tmp_path: Path
) -> None:
    root = tmp_path / "s"
    proc = start_store(spawn, root)
    stub = connect(proc)
    results = append(
        stub, *(msg("Keep", i % 3, f"m{i}".encode(), keys=[f"k{i}"]) for i in range(30))
    )
    stub.PutConfig(store_pb2.PutConfigRequest(name="consumerOffset.json", content=b'{"a": 1}'))
    pulls = [stub.Pull(store_pb2.PullRequest(topic="Keep", queue_id=q)) for q in range(3)]
    got = stub.Get(store_pb2.GetRequest(msg_id=results[7].msg_id))
    assert (root / "abort").exists()

    assert proc.stop() == 0
    assert not (root / "abort").exists()

    # Restarted with SYNC_FLUSH: appends go through the group-commit threads.
    again = connect(start_store(spawn, root, "flush_disk_type=SYNC_FLUSH"))
    assert [again.Pull(store_pb2.PullRequest(topic="Keep", queue_id=q)) for q in range(3)] == pulls
    assert again.Get(store_pb2.GetRequest(msg_id=results[7].msg_id)) == got
    assert bodies(
        again.QueryByKey(store_pb2.QueryByKeyRequest(topic="Keep", key="k9")).messages
    ) == [b"m9"]
    assert (
        again.GetConfig(store_pb2.GetConfigRequest(name="consumerOffset.json")).content
        == b'{"a": 1}'
    )
    synced = append(again, msg("Keep", 0, b"durable"), msg("", 0, b"bad"))
    assert [r.status for r in synced] == [OK, ILLEGAL] and synced[0].queue_offset == 10
    assert (
        again.Get(store_pb2.GetRequest(commitlog_offset=synced[0].commitlog_offset)).message.body
        == b"durable"
    )


# =========================================================================== in-process
def test_create_server_in_process(tmp_path: Path) -> None:
    config = StoreConfig(
        root_dir=tmp_path / "s", listen_port=0, mapped_file_size_commitlog=SEGMENT_BYTES
    )

    async def scenario() -> PutOutcome:
        server, port = await create_server(config)
        await server.start()
        async with channel(f"127.0.0.1:{port}") as chan:
            stub = store_pb2_grpc.StoreServiceStub(chan)
            sent = [msg("Local", 0, b"in-process")]
            response = await stub.Append(
                store_pb2.AppendRequest(messages=sent, born_host="10.1.2.3:4567")
            )
        await server.stop(None)
        return outcomes(response, sent)[0]

    result = asyncio.run(scenario())
    assert result.status == OK
    # The server's own store was shut down with it: clean, unlocked, data kept.
    assert not (config.root_dir / "abort").exists()
    with MessageStore(config) as store:
        record = store.look_message(result.commitlog_offset)
        assert record is not None and bytes(record.body) == b"in-process"
        assert record.born_host == "10.1.2.3:4567"
