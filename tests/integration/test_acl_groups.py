"""Consumer groups under access control: a group is only the accounts named for it.

The attacks, by an account with no right on the group ``orders-group``: move
its committed offsets, read its dead letters, pull its retry topic, and inject
a forged message into its retry stream (which its consumers would get under
the real topic's name). Groups default to DENY, and only the broker writes
``%RETRY%`` / ``%DLQ%`` topics: a client send to one is refused, even an
admin's. The group's own consumer still commits, retries and gets the real
message. An account whose document spells out ``defaultGroupPerm`` keeps it,
and the broker warns about it at start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
    SendError,
)
from boltmq.kernel.signing import Credentials
from boltmq.v1 import broker_pb2, message_pb2
from tests.integration.sdk_fixtures import FAST, wait_until
from tests.integration.test_acl import ADMIN, ORDERS, READER, AclCluster, send

MALLORY = Credentials("mallory-app", "mallory-secret-1")
LEGACY = Credentials("legacy-app", "legacy-secret-1")
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": ORDERS.access_key,
            "secretKey": ORDERS.secret_key,
            "topicPerms": {"orders": "PUB|SUB"},
        },
        {
            "accessKey": READER.access_key,
            "secretKey": READER.secret_key,
            "topicPerms": {"orders": "SUB"},
            "groupPerms": {"orders-group": "SUB"},
        },
        {
            "accessKey": MALLORY.access_key,
            "secretKey": MALLORY.secret_key,
            "topicPerms": {"mallory": "PUB|SUB", "orders": "PUB"},
        },
        {  # as documents written before groups defaulted to DENY spell every account
            "accessKey": LEGACY.access_key,
            "secretKey": LEGACY.secret_key,
            "topicPerms": {"legacy": "PUB|SUB"},
            "defaultGroupPerm": "SUB",
        },
    ]
}
GROUP = "orders-group"
RETRY, DLQ = f"%RETRY%{GROUP}", f"%DLQ%{GROUP}"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path, SEED, ("message_delay_level=100ms 200ms 300ms 400ms",))
    yield started
    started.stop()


def denied(call: object) -> str:
    """The details of a call refused with PERMISSION_DENIED."""
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    return str(info.value.details())  # type: ignore[attr-defined]


def commit(cluster: AclCluster, who: Credentials, topic: str, offset: int) -> None:
    cluster.stub(who).UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(group=GROUP, topic=topic, queue_id=0, offset=offset),
        timeout=5,
    )


def committed(cluster: AclCluster) -> int:
    answer = cluster.stub(READER).QueryConsumerOffset(
        broker_pb2.QueryConsumerOffsetRequest(group=GROUP, topic="orders", queue_id=0), timeout=5
    )
    return int(answer.offset)


def test_an_account_without_the_groups_right_cannot_touch_it(cluster: AclCluster) -> None:
    send(cluster.stub(ORDERS), "orders", b"one")
    send(cluster.stub(MALLORY), "mallory", b"own")
    commit(cluster, READER, "orders", 1)  # the group's own consumer commits
    assert committed(cluster) == 1

    for topic in ("orders", "mallory"):  # moving the group's offsets, on any topic
        details = denied(lambda topic=topic: commit(cluster, MALLORY, topic, 0))
        assert f"mallory-app has DENY on group '{GROUP}'" in details
    assert committed(cluster) == 1
    denied(
        lambda: cluster.stub(MALLORY).ListDeadLetters(
            broker_pb2.ListDeadLettersRequest(group=GROUP), timeout=5
        )
    )
    for topic in (RETRY, "mallory"):
        denied(
            lambda topic=topic: cluster.stub(MALLORY).PullMessage(
                broker_pb2.BrokerPullRequest(consumer_group=GROUP, topic=topic, queue_id=0),
                timeout=5,
            )
        )
    # no account gets a group it is not given: the default is DENY
    details = denied(
        lambda: cluster.stub(ORDERS).PullMessage(
            broker_pb2.BrokerPullRequest(consumer_group="orders-app-group", topic="orders"),
            timeout=5,
        )
    )
    assert "has DENY on group 'orders-app-group'" in details


def test_a_commit_of_many_queues_needs_the_group_and_every_topic_and_commits_nothing_else(
    cluster: AclCluster,
) -> None:
    send(cluster.stub(ORDERS), "orders", b"one")
    send(cluster.stub(MALLORY), "mallory", b"own")
    commit(cluster, READER, "orders", 1)

    def commit_many(who: Credentials, topics: list[str]) -> None:
        cluster.stub(who).UpdateConsumerOffsets(
            broker_pb2.UpdateConsumerOffsetsRequest(
                group=GROUP,
                offsets=[broker_pb2.QueueOffset(topic=t, queue_id=0, offset=0) for t in topics],
            ),
            timeout=5,
        )

    details = denied(lambda: commit_many(MALLORY, ["mallory"]))
    assert f"mallory-app has DENY on group '{GROUP}'" in details
    details = denied(lambda: commit_many(READER, ["orders", "mallory"]))  # may not read mallory
    assert "topic 'mallory'" in details, details
    assert committed(cluster) == 1  # neither refused call moved the group's offset
    commit_many(READER, ["orders"])
    assert committed(cluster) == 0


def test_only_the_broker_writes_retry_and_dead_letter_topics(cluster: AclCluster) -> None:
    def forge(who: Credentials, topic: str) -> broker_pb2.SendResponse:
        request = broker_pb2.SendRequest(
            producer_group="forger",
            messages=[
                message_pb2.Message(
                    topic=topic,
                    queue_id=0,
                    body=b"forged",
                    properties={"RETRY_TOPIC": "orders", "RECONSUME_TIME": "1"},
                )
            ],
        )
        response: broker_pb2.SendResponse = cluster.stub(who).SendMessage(request, timeout=5)
        return response

    assert f"DENY on group '{GROUP}'" in denied(lambda: forge(MALLORY, RETRY))
    for who in (READER, ADMIN):  # the group's own account, even an admin
        for topic in (RETRY, DLQ):
            details = denied(lambda who=who, topic=topic: forge(who, topic))
            assert "only the broker writes it" in details
    with Producer(cluster.registry.address, "forger", credentials=ADMIN) as producer:
        with pytest.raises(SendError, match="only the broker writes it"):
            producer.send(Message(topic=RETRY, body=b"forged"))  # the records path too

    # the group's consumer: the real message, failed once and retried by the broker
    seen: list[tuple[bytes, str, int]] = []
    lock = threading.Lock()

    def fails_once(messages: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            seen.extend((bytes(m.body), m.topic, m.reconsume_times) for m in messages)
        first = any(m.reconsume_times == 0 for m in messages)
        return ConsumeResult.RECONSUME_LATER if first else ConsumeResult.SUCCESS

    send(cluster.stub(ORDERS), "orders", b"real")
    consumer = PushConsumer(
        cluster.registry.address,
        GROUP,
        {"orders": "*"},
        fails_once,
        options=PushConsumerOptions(**FAST),  # type: ignore[arg-type]
        credentials=READER,
    ).start()
    try:
        wait_until(lambda: len(seen) >= 2, "the message and its retry")
    finally:
        consumer.shutdown()
    assert seen[:2] == [(b"real", "orders", 0), (b"real", "orders", 1)]
    assert all(body != b"forged" for body, _, _ in seen)


def test_a_spelled_out_group_default_is_kept_and_warned_about(cluster: AclCluster) -> None:
    log = cluster.broker.log()
    assert "ACL accounts legacy-app may use every group" in log
    assert "mallory-app" not in log.split("ACL accounts", 1)[1].split("\n", 1)[0]
    send(cluster.stub(LEGACY), "legacy", b"x")
    pulled = cluster.stub(LEGACY).PullMessage(
        broker_pb2.BrokerPullRequest(consumer_group="any-group", topic="legacy", queue_id=0),
        timeout=5,
    )
    assert pulled is not None
