"""StoreService CommitLog stream end to end: ReadCommitLog, AppendRaw and AppendRawStream.

The streamed bytes are the CommitLog files (blank markers included), cut at
record boundaries; a SLAVE store applies them chunk by chunk or over one
stream and then serves the same queues as the master; a follower gets
heartbeats and then new bytes as they are appended.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record import MAGIC_BLANK, decode_record
from tests.integration.store_service_helpers import (
    OK,
    SEGMENT_BYTES,
    Spawn,
    append,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    msg,
    start_store,
)
from tests.waiting import wait_until


def commitlog_bytes(root: Path, max_offset: int) -> bytes:
    """The CommitLog's bytes [first segment start, max_offset) read from its files."""
    data = b"".join(path.read_bytes() for path in sorted((root / "commitlog").iterdir()))
    return data[:max_offset]


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
