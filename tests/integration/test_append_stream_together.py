"""AppendStream messages whose ``more`` holds raw appends of several topics, against real
store processes: the store appends them in one engine call, and every answer, every
stored record and every queue offset equals what the same appends sent one per stream
message give (refusals included, with the same code and text).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc

from boltmq.kernel.channels import sync_channel
from boltmq.message import Message
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from tests.integration.procs import ServiceProcess
from tests.integration.test_append_stream import SMALL, OpenStream

Spawn = Callable[..., ServiceProcess]


def raw(
    topic: str, *bodies: bytes, queue_id: int = 0, born_host: str = ""
) -> store_pb2.AppendRequest:
    encoded = b"".join(Message(topic, body, keys=[body.decode()]).to_record() for body in bodies)
    return store_pb2.AppendRequest(
        records=encoded,
        record_count=len(bodies),
        topic=topic,
        queue_id=queue_id,
        born_host=born_host,
    )


def with_bad_crc(request: store_pb2.AppendRequest, at: int) -> store_pb2.AppendRequest:
    """The request with the last byte of record ``at``'s body flipped (its CRC fails)."""
    data = bytearray(request.records)
    position = 0
    for _ in range(at):
        position += int.from_bytes(data[position : position + 4], "big")
    size = int.from_bytes(data[position : position + 4], "big")
    body_start = data.index(b"refused", position, position + size)
    data[body_start] ^= 0xFF
    out = store_pb2.AppendRequest()
    out.CopyFrom(request)
    out.records = bytes(data)
    return out


def appends() -> list[store_pb2.AppendStreamRequest]:
    """Appends of several topics and queues; refused ones and a refused record among them."""
    requests = [
        raw("Orders", b"o1", b"o2", born_host="10.0.0.7:4000"),
        raw("Payments", b"p1", queue_id=3),
        raw("bad topic!", b"never"),  # refused as a request (the topic name)
        with_bad_crc(raw("Orders", b"o3", b"refused", b"o4"), 1),  # one record refused
        store_pb2.AppendRequest(records=b"x" * 10, topic="Orders"),  # no record_count
        raw("Orders", b"o5", queue_id=1),
        raw("Payments", b"p2", b"p3", queue_id=3),
        raw("Orders", b"o6", born_host="not-an-address"),  # refused: born_host
        raw("Audit", *(b"a%d" % i for i in range(20))),  # a bulk-stamped batch
    ]
    return [store_pb2.AppendStreamRequest(id=100 + n, append=r) for n, r in enumerate(requests)]


def one_message() -> store_pb2.AppendStreamRequest:
    """Every append of :func:`appends` in one stream message (the first, the rest in ``more``)."""
    first, *more = appends()
    return store_pb2.AppendStreamRequest(id=first.id, append=first.append, more=more)


def stores(spawn: Spawn, tmp_path: Path, *names: str) -> list[ServiceProcess]:
    """A store process for each name, its data under ``tmp_path / name``."""
    return [spawn("store", f"root_dir={tmp_path / name}", *SMALL) for name in names]


def on_a_stream(
    address: str, message: store_pb2.AppendStreamRequest
) -> store_pb2.AppendStreamResponse:
    """The store's answer to ``message`` sent alone on an AppendStream."""
    stream = OpenStream(address)
    stream.send_message(message)
    response = stream.receive()
    stream.close()
    return response


def answered(response: store_pb2.AppendStreamResponse) -> tuple:
    """An answer without its store timestamp (and the store's own msg id prefix)."""
    append = response.append
    return (
        response.id,
        response.error_code,
        response.error,
        list(append.statuses),
        list(append.commitlog_offsets),
        list(append.queue_offsets),
        dict(append.errors),
    )


def stored(address: str) -> list[tuple]:
    """Every record each queue serves (Pull), each read again by offset (Get)."""
    out = []
    with sync_channel(address) as chan:
        stub = store_pb2_grpc.StoreServiceStub(chan)
        queues = stub.ListQueues(store_pb2.ListQueuesRequest()).queues
        for queue in queues:
            pulled = stub.Pull(
                store_pb2.PullRequest(topic=queue.topic, queue_id=queue.queue_id, max_messages=1000)
            )
            for m in pulled.messages:
                got = stub.Get(store_pb2.GetRequest(commitlog_offset=m.commitlog_offset))
                assert got.found and got.message.body == m.body
                out.append(
                    (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.body, m.born_host)
                )
    return out


def without_peer_ports(records: list[tuple]) -> list[tuple]:
    """The records with a born host of the caller's own (ephemeral) port as its address."""
    return [
        (*r[:5], r[5].rpartition(":")[0] if r[5].startswith("127.0.0.1:") else r[5])
        for r in records
    ]


def test_appends_of_one_stream_message_store_what_they_store_one_per_message(
    spawn: Spawn, tmp_path: Path
) -> None:
    together, separate = stores(spawn, tmp_path, "together", "separate")
    response = on_a_stream(together.address, one_message())
    got = [response, *response.more]
    assert len(got) == len(appends())  # answered in one stream message
    one_stream = OpenStream(separate.address)
    expected = []
    for request in appends():
        one_stream.send_message(request)
        expected.append(one_stream.receive())
    one_stream.close()

    assert [answered(a) for a in got] == [answered(a) for a in expected]
    by_id = {a.id: a for a in got}
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert (by_id[102].error_code, by_id[102].error.split(":")[0]) == (invalid, "topic")
    assert (by_id[104].error_code, by_id[104].error.split(":")[0]) == (invalid, "record_count")
    assert (by_id[107].error_code, by_id[107].error.split(":")[0]) == (invalid, "born_host")
    assert list(by_id[103].append.statuses) == [
        message_pb2.PUT_OK,
        message_pb2.MESSAGE_ILLEGAL,
        message_pb2.PUT_OK,
    ]
    assert "CRC" in by_id[103].append.errors[1]
    assert list(by_id[100].append.queue_offsets) == [0, 1]
    assert [
        q
        for q, s in zip(by_id[103].append.queue_offsets, by_id[103].append.statuses, strict=True)
        if s == message_pb2.PUT_OK
    ] == [2, 3]
    assert list(by_id[106].append.queue_offsets) == [1, 2]  # Payments/3 after p1
    records = stored(together.address)
    assert without_peer_ports(records) == without_peer_ports(stored(separate.address))
    bodies = {(topic, queue): [] for topic, queue, *_ in records}
    for topic, queue, offset, _, body, _ in records:
        bodies[(topic, queue)].append((offset, body))
    assert bodies[("Orders", 0)] == [(0, b"o1"), (1, b"o2"), (2, b"o3"), (3, b"o4")]
    assert bodies[("Orders", 1)] == [(0, b"o5")]
    assert bodies[("Payments", 3)] == [(0, b"p1"), (1, b"p2"), (2, b"p3")]
    assert [b for _, b in bodies[("Audit", 0)]] == [b"a%d" % i for i in range(20)]
    assert {r[5] for r in records if r[4] in (b"o1", b"o2")} == {"10.0.0.7:4000"}
    assert sum(len(v) for v in bodies.values()) == 28  # nothing else was stored


def test_a_message_with_a_protobuf_append_is_appended_one_by_one_as_before(
    spawn: Spawn, tmp_path: Path
) -> None:
    store = spawn("store", f"root_dir={tmp_path / 's'}", *SMALL)
    stream = OpenStream(store.address)
    stream.send_message(
        store_pb2.AppendStreamRequest(
            id=1,
            append=raw("Mixed", b"r1"),
            more=[
                store_pb2.AppendStreamRequest(
                    id=2,
                    append=store_pb2.AppendRequest(
                        messages=[message_pb2.Message(topic="Mixed", body=b"m1")]
                    ),
                ),
                store_pb2.AppendStreamRequest(id=3, append=raw("Mixed", b"r2")),
                store_pb2.AppendStreamRequest(id=4, append=raw("bad topic!", b"x")),
            ],
        )
    )
    response = stream.receive()
    stream.close()
    answers = {a.id: a for a in (response, *response.more)}
    assert [list(answers[i].append.queue_offsets) for i in (1, 2, 3)] == [[0], [1], [2]]
    assert answers[4].error_code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert answers[4].error.startswith("topic: ")
    assert [r[4] for r in stored(store.address)] == [b"r1", b"m1", b"r2"]
