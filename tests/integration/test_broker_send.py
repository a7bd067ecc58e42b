"""SendMessage through a real broker and store: what a producer is told, and what it reads back.

A message's result (status, queue, offsets, id) and its tags, keys and properties seen again
by a pull, by id, by commit-log offset and by key; a batch appended whole to one queue while
single sends rotate over the queues; a body the store refuses answered as SEND_FAILED with
the store's put status.
"""

from __future__ import annotations

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from tests.integration.broker_fixtures import Cluster, msg, pull, send, upsert
from tests.integration.broker_fixtures import cluster as cluster
from tests.integration.broker_fixtures import stubs as stubs


def test_send_then_pull_round_trip_with_tags(cluster: Cluster) -> None:
    stub = cluster.stub
    results = send(stub, msg("orders", b"a1", 0, tags="A", keys=["k-1"]))
    results += send(stub, msg("orders", b"b1", 0, tags="B"))
    results += send(stub, msg("orders", b"a2", 0, tags="A", properties={"p": "v"}))
    assert [r.status for r in results] == [broker_pb2.SEND_OK] * 3
    assert [r.queue_offset for r in results] == [0, 1, 2]
    assert {(r.topic, r.broker_name, r.queue_id) for r in results} == {("orders", "broker-a", 0)}
    assert all(r.msg_id and r.put_status == message_pb2.PUT_OK for r in results)

    tagged = pull(stub, "orders", subscription="A")
    assert tagged.status == message_pb2.FOUND
    assert [m.body for m in tagged.messages] == [b"a1", b"a2"]
    assert tagged.messages[1].properties["p"] == "v"
    everything = pull(stub, "orders", subscription="A || B")
    assert [m.body for m in everything.messages] == [b"a1", b"b1", b"a2"]
    assert everything.next_begin_offset == 3
    raw = pull(stub, "orders", raw_records=True)
    assert raw.record_count == 3 and len(raw.records) > 0 and not raw.messages

    viewed = stub.ViewMessage(store_pb2.GetRequest(msg_id=results[0].msg_id))
    assert viewed.found and viewed.message.body == b"a1"
    by_offset = stub.ViewMessage(store_pb2.GetRequest(commitlog_offset=results[1].commitlog_offset))
    assert by_offset.message.body == b"b1"
    found = stub.QueryMessageByKey(store_pb2.QueryByKeyRequest(topic="orders", key="k-1"))
    assert [m.body for m in found.messages] == [b"a1"]


def test_a_batch_is_appended_whole_to_one_queue_and_queues_rotate(cluster: Cluster) -> None:
    stub = cluster.stub
    upsert(stub, "batch", queues=3)
    first = send(stub, *(msg("batch", f"m{i}".encode()) for i in range(50)))
    assert len(first) == 50 and {r.status for r in first} == {broker_pb2.SEND_OK}
    assert len({r.queue_id for r in first}) == 1
    assert [r.queue_offset for r in first] == list(range(50))
    queues = [first[0].queue_id] + [send(stub, msg("batch"))[0].queue_id for _ in range(3)]
    assert sorted(queues[:3]) == [0, 1, 2] and queues[3] == queues[0]
    got = pull(stub, "batch", first[0].queue_id, max_messages=64)
    assert [m.body for m in got.messages][:50] == [f"m{i}".encode() for i in range(50)]


def test_store_refusals_become_send_failed_with_the_put_status(cluster: Cluster) -> None:
    # 10 000 bytes passes the broker's limit but not the store's 8192.
    results = send(cluster.stub, msg("orders", b"z" * 10_000, 0))
    assert results[0].status == broker_pb2.SEND_FAILED
    assert results[0].put_status == message_pb2.MESSAGE_ILLEGAL
    assert results[0].error
    assert pull(cluster.stub, "orders").status != message_pb2.FOUND
