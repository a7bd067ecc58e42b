"""StoreService bad requests end to end: every malformed field is named in the error.

Each RPC's invalid fields are refused with INVALID_ARGUMENT whose details
start with the field's name; a read past the CommitLog's end is OUT_OF_RANGE;
nothing refused reaches the disk as a topic.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from boltmq.v1 import store_pb2
from tests.integration.store_service_helpers import (
    Spawn,
    append,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    invalid,
    msg,
    start_store,
)


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
