"""ConsumerSendBack under access control: the record at the offset is authorized.

A commitlog offset is an address anyone can count through. The attack: an
account with a consumer group of its own (and no right on ``orders``) names
the offset of an ``orders`` message, or of another group's retry copy, in a
ConsumerSendBack, so the broker would copy it into the attacker's own retry
or dead-letter topic, where the attacker reads it. The broker refuses without
naming the record's topic; the group's own consumer still retries and reads
its dead letters.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import ConsumeResult, PushConsumer, PushConsumerOptions, ReceivedMessage
from boltmq.kernel.signing import Credentials
from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from tests.integration.sdk_fixtures import FAST, wait_until
from tests.integration.test_acl import ADMIN, ORDERS, READER, AclCluster, refused, send

MALLORY = Credentials("mallory-app", "mallory-secret-1")
WIDE = Credentials("wide-app", "wide-secret-1")
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
        {  # reads every topic but orders
            "accessKey": WIDE.access_key,
            "secretKey": WIDE.secret_key,
            "defaultTopicPerm": "SUB",
            "topicPerms": {"orders": "DENY"},
            "groupPerms": {"wide-group": "SUB"},
        },
        {
            "accessKey": MALLORY.access_key,
            "secretKey": MALLORY.secret_key,
            "topicPerms": {"mallory": "PUB|SUB"},
            "groupPerms": {"mallory-group": "SUB"},
        },
    ]
}
LEVELS = "100ms 200ms 300ms 400ms 500ms 600ms"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path, SEED, (f"message_delay_level={LEVELS}",))
    yield started
    started.stop()


def send_back(
    cluster: AclCluster, who: Credentials, group: str, offset: int, delay_level: int = -1
) -> broker_pb2.ConsumerSendBackResponse:
    response: broker_pb2.ConsumerSendBackResponse = cluster.stub(who).ConsumerSendBack(
        broker_pb2.ConsumerSendBackRequest(
            group=group, commitlog_offset=offset, delay_level=delay_level
        ),
        timeout=5,
    )
    return response


def dead_letters(cluster: AclCluster, who: Credentials, group: str) -> list[bytes]:
    listed = cluster.stub(who).ListDeadLetters(
        broker_pb2.ListDeadLettersRequest(group=group), timeout=5
    )
    return [bytes(m.body) for m in listed.messages]


def own_dead_letters(cluster: AclCluster) -> list[bytes]:
    """The dead letters of orders-group as its consumer lists them ([] before the first)."""
    try:
        return dead_letters(cluster, READER, "orders-group")
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            return []
        raise


def denied_details(call: object) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    return str(info.value.details())  # type: ignore[attr-defined]


def test_another_topics_message_cannot_be_copied_into_ones_own_dead_letters(
    cluster: AclCluster,
) -> None:
    secret = send(cluster.stub(ORDERS), "orders", b"card 4111").commitlog_offsets[0]
    send(cluster.stub(MALLORY), "mallory", b"own")  # the group has a topic of its own
    for level in (-1, 0):  # to the DLQ at once, or to the retry topic
        details = denied_details(
            lambda level=level: send_back(cluster, MALLORY, "mallory-group", secret, level)
        )
        assert "may send back" in details and "orders" not in details
    # walking the offsets: the attacker's dead letters never get anything
    assert (
        refused(lambda: dead_letters(cluster, MALLORY, "mallory-group"))
        == grpc.StatusCode.NOT_FOUND
    )  # no DLQ topic was ever created
    assert "card 4111" not in cluster.broker.log()


def test_the_groups_consumer_retries_and_reads_its_dead_letters_but_nobody_else(
    cluster: AclCluster,
) -> None:
    delivered: list[ReceivedMessage] = []
    lock = threading.Lock()

    def always_fails(messages: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            delivered.extend(messages)
        return ConsumeResult.RECONSUME_LATER

    send(cluster.stub(ORDERS), "orders", b"poison")
    consumer = PushConsumer(
        cluster.registry.address,
        "orders-group",
        {"orders": "*"},
        always_fails,
        options=PushConsumerOptions(**{**FAST, "max_reconsume_times": 1}),
        credentials=READER,
    ).start()
    try:
        wait_until(lambda: own_dead_letters(cluster) == [b"poison"], "a retry, then the DLQ")
    finally:
        consumer.shutdown()
    first, retried = delivered[0], delivered[1]
    assert (first.reconsume_times, retried.reconsume_times) == (0, 1)
    assert retried.topic == "orders"  # delivered from %RETRY%orders-group as its real topic

    # the retry copy sits in %RETRY%orders-group: another group may not take it
    details = denied_details(
        lambda: send_back(cluster, MALLORY, "mallory-group", retried.commitlog_offset)
    )
    assert "orders" not in details.replace("'mallory-group'", "")
    assert dead_letters(cluster, READER, "orders-group") == [b"poison"]  # nothing was added


def test_a_retry_topic_property_set_by_a_producer_is_overwritten(cluster: AclCluster) -> None:
    """A dead letter goes back (ResendDeadLetters) to its RETRY_TOPIC: a producer that
    set one on its own message must not aim the resend at a topic it may not write."""
    forged = cluster.stub(MALLORY).SendMessage(
        broker_pb2.SendRequest(
            producer_group="mallory-producers",
            messages=[
                message_pb2.Message(
                    topic="mallory", queue_id=0, body=b"aimed", properties={"RETRY_TOPIC": "orders"}
                )
            ],
        ),
        timeout=5,
    )
    back = send_back(cluster, MALLORY, "mallory-group", forged.commitlog_offsets[0])
    assert back.dead_letter
    letters = cluster.stub(MALLORY).ListDeadLetters(
        broker_pb2.ListDeadLettersRequest(group="mallory-group"), timeout=5
    )
    assert [m.properties["RETRY_TOPIC"] for m in letters.messages] == ["mallory"]


def test_a_default_sub_reaches_no_other_topic_through_the_broker_topics(
    cluster: AclCluster,
) -> None:
    """The schedule topic holds every topic's delayed messages, the half topic every
    transaction's: a topic default does not open them, nor a send-back of their records."""
    delayed = cluster.stub(ORDERS).SendMessage(
        broker_pb2.SendRequest(
            producer_group="orders-producers",
            messages=[
                message_pb2.Message(
                    topic="orders", queue_id=0, body=b"later", properties={"DELAY": "6"}
                )
            ],
        ),
        timeout=5,
    )
    offset = delayed.commitlog_offsets[0]
    for queue_id in range(6):
        denied_details(
            lambda queue_id=queue_id: cluster.stub(WIDE).PullMessage(
                broker_pb2.BrokerPullRequest(
                    consumer_group="wide-group", topic="SCHEDULE_TOPIC_XXXX", queue_id=queue_id
                ),
                timeout=5,
            )
        )
    denied_details(
        lambda: cluster.stub(WIDE).QueryMessageByKey(
            store_pb2.QueryByKeyRequest(topic="RMQ_SYS_TRANS_HALF_TOPIC", key="k"), timeout=5
        )
    )
    details = denied_details(lambda: send_back(cluster, WIDE, "wide-group", offset))
    assert "SCHEDULE" not in details and "orders" not in details
