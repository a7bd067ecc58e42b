"""Groups, topics and offsets as operators and consumers see them.

Heartbeats and unregistering shape a group's members; orderly members lock queues, and a
lock passes on when its holder leaves; topics are listed, reported and deleted (and leave
the routes); a group's progress shows its lag. Committed offsets and topics survive a
broker restart.
"""

from __future__ import annotations

import grpc

from boltmq.v1 import broker_pb2
from tests.integration.broker_fixtures import (
    Cluster,
    Spawn,
    Stubs,
    failure,
    msg,
    pull,
    route_or_none,
    send,
    start_broker,
    upsert,
)
from tests.integration.broker_fixtures import cluster as cluster
from tests.integration.broker_fixtures import stubs as stubs


def test_groups_members_locks_topics_and_progress(cluster: Cluster) -> None:
    stub = cluster.stub
    upsert(stub, "shared", queues=2)
    for client_id in ("c-2", "c-1"):
        stub.Heartbeat(
            broker_pb2.HeartbeatRequest(
                client_id=client_id,
                consumer_groups=[
                    broker_pb2.ConsumerGroupHeartbeat(
                        group="g1",
                        model="CLUSTERING",
                        orderly=True,
                        subscriptions=[
                            broker_pb2.ConsumerSubscription(topic="shared", expression="*")
                        ],
                    )
                ],
            )
        )
    members = stub.GetConsumerList(broker_pb2.GetConsumerListRequest(group="g1")).client_ids
    assert list(members) == ["c-1", "c-2"]
    q0, q1 = (broker_pb2.QueueId(topic="shared", queue_id=i) for i in (0, 1))
    locked = stub.LockQueues(broker_pb2.LockQueuesRequest(group="g1", client_id="c-1", queues=[q0]))
    assert list(locked.locked) == [q0]
    refused = stub.LockQueues(
        broker_pb2.LockQueuesRequest(group="g1", client_id="c-2", queues=[q0, q1])
    )
    assert list(refused.locked) == [q1]
    stub.UnregisterClient(
        broker_pb2.UnregisterClientRequest(client_id="c-1", consumer_groups=["g1"])
    )
    assert list(stub.GetConsumerList(broker_pb2.GetConsumerListRequest(group="g1")).client_ids) == [
        "c-2"
    ]
    taken = stub.LockQueues(broker_pb2.LockQueuesRequest(group="g1", client_id="c-2", queues=[q0]))
    assert list(taken.locked) == [q0]

    groups = {g.group: g for g in stub.ListGroups(broker_pb2.ListGroupsRequest()).groups}
    assert list(groups["g1"].client_ids) == ["c-2"] and groups["g1"].orderly
    send(stub, msg("shared", b"1", 1), msg("shared", b"2", 1))
    status = stub.TopicStatus(broker_pb2.TopicStatusRequest(topic="shared")).queues
    assert [(q.queue_id, q.max_offset) for q in status] == [(0, 0), (1, 2)]
    progress = stub.GroupProgress(broker_pb2.GroupProgressRequest(group="g1")).queues
    assert [(q.queue_id, q.broker_offset, q.consumer_offset, q.lag) for q in progress] == [
        (0, 0, -1, 0),
        (1, 2, -1, 2),
    ]

    names = {t.name for t in stub.ListTopics(broker_pb2.ListTopicsRequest()).topics}
    assert {
        "shared",
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "DefaultCluster",
        "broker-a",
    } <= names
    stub.DeleteTopic(broker_pb2.DeleteTopicRequest(topic="shared"))
    assert (
        failure(stub.TopicStatus, broker_pb2.TopicStatusRequest(topic="shared")).code()
        == grpc.StatusCode.NOT_FOUND
    )
    assert route_or_none(cluster.routes, "shared") is None
    info = stub.GetBrokerInfo(broker_pb2.GetBrokerInfoRequest())
    assert (info.broker_name, info.address, info.store_address) == (
        "broker-a",
        cluster.broker.address,
        cluster.store.address,
    )
    assert info.store.role == "MASTER"


def test_committed_offsets_and_topics_survive_a_broker_restart(
    cluster: Cluster, spawn: Spawn, stubs: Stubs
) -> None:
    stub = cluster.stub
    send(stub, *(msg("durable", b"m", 1) for _ in range(5)))
    stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(group="cg", topic="durable", queue_id=1, offset=3)
    )
    pull(stub, "durable", queue_id=0, commit_offset=7, consumer_group="other")
    assert cluster.broker.stop() == 0

    restarted = stubs.broker(start_broker(spawn, cluster.store, cluster.registry))
    answer = restarted.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="cg", topic="durable", queue_id=1)
    )
    assert (answer.found, answer.offset) == (True, 3)
    other = restarted.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="other", topic="durable", queue_id=0)
    )
    assert (other.found, other.offset) == (True, 7)
    never = restarted.QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group="cg", topic="durable", queue_id=0)
    )
    assert not never.found
    batch = restarted.QueryConsumerOffsets(
        broker_pb2.QueryConsumerOffsetsRequest(
            group="cg", queues=[broker_pb2.QueueId(topic="durable", queue_id=n) for n in (1, 0, 1)]
        )
    )
    assert [(o.found, o.offset) for o in batch.offsets] == [(True, 3), (False, -1), (True, 3)]
    assert len(pull(restarted, "durable", queue_id=1).messages) == 5
    progress = restarted.GroupProgress(broker_pb2.GroupProgressRequest(group="cg")).queues
    queue1 = next(q for q in progress if q.queue_id == 1)
    assert (queue1.broker_offset, queue1.consumer_offset, queue1.lag) == (5, 3, 2)
