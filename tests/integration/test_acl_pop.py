"""POP consumption under access control (real registry, store and ACL-enforcing broker).

ReceiveMessages, AckMessage, ChangeInvisibleDuration and ForwardToDeadLetter need SUB on
the topic and on the consumer group, as PullMessage does. The attacks: an account without
SUB on the topic receives it through a group it owns; an account that may use the topic
but not the group acks (or changes, or buries) another account's delivery with a handle
it saw; an unsigned client calls at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import SimpleConsumer, SimpleConsumerError
from boltmq.kernel.signing import Credentials
from boltmq.v1 import broker_pb2, registry_pb2
from services.broker.access.acl_seal import unseal
from services.broker.pop import receipt_handle
from tests.integration.test_acl import ADMIN, AclCluster, refused, send

OPS = Credentials("ops-admin", "ops-secret-1")
POPPER = Credentials("popper-app", "popper-secret-1")
PRODUCER_ONLY = Credentials("producer-app", "producer-secret-1")
TOPIC_ONLY = Credentials("topic-app", "topic-secret-1")
TOPIC = "pop-orders"
GROUP = "pop-group"
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {"accessKey": OPS.access_key, "secretKey": OPS.secret_key, "admin": True},
        {
            "accessKey": POPPER.access_key,
            "secretKey": POPPER.secret_key,
            "topicPerms": {TOPIC: "PUB|SUB"},
            "groupPerms": {GROUP: "SUB"},
        },
        {  # may send to the topic, and owns a group of its own
            "accessKey": PRODUCER_ONLY.access_key,
            "secretKey": PRODUCER_ONLY.secret_key,
            "topicPerms": {TOPIC: "PUB"},
            "groupPerms": {"producer-group": "SUB"},
        },
        {  # may read the topic, but not as pop-group
            "accessKey": TOPIC_ONLY.access_key,
            "secretKey": TOPIC_ONLY.secret_key,
            "topicPerms": {TOPIC: "SUB"},
            "groupPerms": {"topic-group": "SUB"},
        },
    ]
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    started = AclCluster(
        Path(tmp_path_factory.mktemp("acl-pop")),
        SEED,  # the brokers' own account is ADMIN: GetMetadata seals secrets for it
        (f"access_key={ADMIN.access_key}", f"secret_key={ADMIN.secret_key}"),
    )
    started.stub(ADMIN).UpsertTopic(
        broker_pb2.UpsertTopicRequest(
            topic=registry_pb2.TopicConfig(
                name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6
            )
        ),
        timeout=30,
    )
    yield started
    started.stop()


def receive_request(group: str = GROUP, wait_ms: int = 0) -> broker_pb2.ReceiveMessagesRequest:
    return broker_pb2.ReceiveMessagesRequest(
        group=group,
        topic=TOPIC,
        subscription="*",
        max_messages=8,
        invisible_ms=60_000,
        wait_ms=wait_ms,
    )


def test_an_account_with_the_topic_and_group_receives_and_acks(cluster: AclCluster) -> None:
    send(cluster.stub(POPPER), TOPIC, b"signed")
    with SimpleConsumer(
        cluster.registry.address, GROUP, subscriptions={TOPIC: "*"}, credentials=POPPER
    ) as consumer:
        got = consumer.receive(8, wait_ms=5_000)
        assert [m.body for m in got] == [b"signed"]
        consumer.ack(got[0])


def test_receives_need_sub_on_the_topic_and_the_group(cluster: AclCluster) -> None:
    stub = cluster.stub
    assert (
        refused(lambda: stub(PRODUCER_ONLY).ReceiveMessages(receive_request("producer-group")))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    assert (
        refused(lambda: stub(TOPIC_ONLY).ReceiveMessages(receive_request(GROUP)))
        == grpc.StatusCode.PERMISSION_DENIED
    )
    assert (
        refused(lambda: stub(None).ReceiveMessages(receive_request()))
        == grpc.StatusCode.UNAUTHENTICATED
    )
    with (
        SimpleConsumer(
            cluster.registry.address,
            "producer-group",
            subscriptions={TOPIC: "*"},
            credentials=PRODUCER_ONLY,
        ) as consumer,
        pytest.raises(SimpleConsumerError) as info,
    ):
        consumer.receive(1)
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_another_account_cannot_ack_change_or_bury_a_delivery(cluster: AclCluster) -> None:
    send(cluster.stub(POPPER), TOPIC, b"mine")
    (got,) = (
        cluster.stub(POPPER).ReceiveMessages(receive_request(wait_ms=5_000), timeout=30).messages
    )
    handle = got.receipt_handle
    calls = {
        "AckMessage": broker_pb2.AckMessageRequest(group=GROUP, topic=TOPIC, receipt_handle=handle),
        "ChangeInvisibleDuration": broker_pb2.ChangeInvisibleDurationRequest(
            group=GROUP, topic=TOPIC, receipt_handle=handle, invisible_ms=1000
        ),
        "ForwardToDeadLetter": broker_pb2.ForwardToDeadLetterRequest(
            group=GROUP, topic=TOPIC, receipt_handle=handle
        ),
    }
    for who in (TOPIC_ONLY, PRODUCER_ONLY, None):
        expected = (
            grpc.StatusCode.UNAUTHENTICATED if who is None else grpc.StatusCode.PERMISSION_DENIED
        )
        for method, request in calls.items():
            call = getattr(cluster.stub(who), method)
            code = refused(lambda call=call, request=request: call(request, timeout=30))
            assert code == expected, (method, who, code)
    # the handle under the attacker's own group is not one the broker issued for it
    own = broker_pb2.AckMessageRequest(group="topic-group", topic=TOPIC, receipt_handle=handle)
    assert (
        refused(lambda: cluster.stub(TOPIC_ONLY).AckMessage(own, timeout=30))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    cluster.stub(POPPER).AckMessage(calls["AckMessage"], timeout=30)  # still the owner's


def test_the_handle_secret_is_answered_only_sealed_for_the_brokers_own_account(
    cluster: AclCluster,
) -> None:
    send(cluster.stub(POPPER), TOPIC, b"sealed")
    (got,) = (
        cluster.stub(POPPER).ReceiveMessages(receive_request(wait_ms=5_000), timeout=30).messages
    )
    request = broker_pb2.GetMetadataRequest()
    other_admin = cluster.stub(OPS).GetMetadata(request, timeout=30).documents
    assert "popState.json" in other_admin
    assert not any(name.startswith("popSecret") for name in other_admin)
    assert b"secret" not in other_admin["popState.json"]
    brokers = cluster.stub(ADMIN).GetMetadata(request, timeout=30).documents
    sealed = brokers["popSecret.json.sealed"]
    secret = bytes.fromhex(json.loads(unseal(sealed, ADMIN.access_key, ADMIN.secret_key))["secret"])
    assert secret.hex().encode() not in sealed
    assert not any(secret.hex().encode() in data for data in other_admin.values())
    # the sealed secret is the one the broker signs handles with
    decoded = receipt_handle.decode(secret, "broker-a", GROUP, TOPIC, got.receipt_handle, "h")
    assert decoded.queue_offset == got.message.queue_offset
    with pytest.raises(ValueError, match="not sealed for access key ops-admin"):
        unseal(sealed, OPS.access_key, OPS.secret_key)
    cluster.stub(POPPER).AckMessage(
        broker_pb2.AckMessageRequest(group=GROUP, topic=TOPIC, receipt_handle=got.receipt_handle),
        timeout=30,
    )
