"""A client forging where its messages came from, against a broker with the ACL on.

The born host of a stored message tells its readers which host produced it.
An application account claims ``10.9.9.9:1`` on every send path: the
request's ``born_host`` on protobuf messages, on pre-encoded records (with the
claim written into each record's born host bytes too), on a delayed record the
broker rewrites, and on a transaction's half message. Each stored record, read
back by commitlog offset, by message id and by a consumer's pull, shows the
loopback address the broker observed; the broker's own copies (a commit, a
delay delivery, a send-back into the dead-letter queue) keep it.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.message import Message, batch_records
from boltmq.pull_consumer import PullConsumer
from boltmq.v1 import broker_pb2, message_pb2, registry_pb2, store_pb2
from boltmq.wire.record import SYS_FLAG_TRANSACTION_PREPARED
from tests.integration.test_acl import ADMIN, ORDERS, READER, AclCluster

CLAIM = "10.9.9.9:1"
TOPIC = "orders"
GROUP = "orders-group"
PRODUCER_GROUP = "orders-tx"
BORN_HOST_AT = 48
"""Offset of the born host bytes in a CommitLog record (boltmq.wire.record)."""
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": ORDERS.access_key,
            "secretKey": ORDERS.secret_key,
            "topicPerms": {TOPIC: "PUB|SUB"},
            "groupPerms": {PRODUCER_GROUP: "PUB"},
        },
        {
            "accessKey": READER.access_key,
            "secretKey": READER.secret_key,
            "topicPerms": {TOPIC: "SUB"},
            "groupPerms": {GROUP: "SUB"},
        },
    ]
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AclCluster]:
    acl_cluster = AclCluster(tmp_path, SEED)
    admin = acl_cluster.stub(ADMIN)
    topic = registry_pb2.TopicConfig(name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
    admin.UpsertTopic(broker_pb2.UpsertTopicRequest(topic=topic), timeout=5)
    admin.UpsertGroup(broker_pb2.UpsertGroupRequest(group=GROUP), timeout=5)
    yield acl_cluster
    acl_cluster.stop()


def observed(born_host: str) -> str:
    """``born_host`` when it is the loopback peer the broker saw (not the claim)."""
    host, _, port = born_host.rpartition(":")
    assert born_host != CLAIM and host == "127.0.0.1" and 0 < int(port) < 65536, born_host
    return born_host


def stored_at(cluster: AclCluster, commitlog_offset: int) -> message_pb2.MessageExt:
    found = cluster.stub(ADMIN).ViewMessage(
        store_pb2.GetRequest(commitlog_offset=commitlog_offset), timeout=5
    )
    assert found.found
    message: message_pb2.MessageExt = found.message
    return message


def pulled(cluster: AclCluster, body: bytes) -> str:
    """The born host a consumer of ``orders`` sees on the message of ``body``."""
    consumer = PullConsumer(cluster.registry.address, GROUP, credentials=READER)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for queue in consumer.queues(TOPIC):
                for message in consumer.pull(queue, 0, 64).messages:
                    if bytes(message.body) == body:
                        return str(message.born_host)
            time.sleep(0.2)
    finally:
        consumer.shutdown()
    raise AssertionError(f"{body!r} never reached {TOPIC}")


def forged_request(**fields: object) -> broker_pb2.SendRequest:
    return broker_pb2.SendRequest(producer_group=PRODUCER_GROUP, born_host=CLAIM, **fields)


def test_protobuf_messages_are_stored_with_the_observed_peer_and_copies_keep_it(
    cluster: AclCluster,
) -> None:
    message = message_pb2.Message(topic=TOPIC, queue_id=0, body=b"forged")
    sent = cluster.stub(ORDERS).SendMessage(forged_request(messages=[message]), timeout=5)
    assert sent.statuses == [broker_pb2.SEND_OK]
    record = stored_at(cluster, sent.commitlog_offsets[0])
    born = observed(record.born_host)
    assert (
        cluster.stub(ADMIN)
        .ViewMessage(store_pb2.GetRequest(msg_id=record.msg_id), timeout=5)
        .message.born_host
        == born
    )
    assert pulled(cluster, b"forged") == born

    copy = cluster.stub(READER).ConsumerSendBack(
        broker_pb2.ConsumerSendBackRequest(
            group=GROUP, commitlog_offset=sent.commitlog_offsets[0], delay_level=-1
        ),
        timeout=5,
    )
    assert copy.dead_letter
    letter = cluster.stub(ADMIN).ViewMessage(store_pb2.GetRequest(msg_id=copy.msg_id), timeout=5)
    assert letter.message.born_host == born


def test_pre_encoded_records_and_delayed_records_ignore_the_claim(cluster: AclCluster) -> None:
    records = bytearray(batch_records([Message(topic=TOPIC, body=b"raw")]))
    records[BORN_HOST_AT : BORN_HOST_AT + 8] = socket.inet_aton("10.9.9.9") + struct.pack(">i", 1)
    stub = cluster.stub(ORDERS)
    sent = stub.SendMessage(
        forged_request(records=bytes(records), record_count=1, topic=TOPIC, queue_id=0), timeout=5
    )
    assert sent.statuses == [broker_pb2.SEND_OK]
    born = observed(stored_at(cluster, sent.commitlog_offsets[0]).born_host)
    assert pulled(cluster, b"raw") == born

    delayed = batch_records([Message(topic=TOPIC, body=b"later", delay_level=1)])
    sent = stub.SendMessage(
        forged_request(records=delayed, record_count=1, topic=TOPIC, queue_id=0), timeout=5
    )
    assert sent.statuses == [broker_pb2.SEND_OK]
    entry = observed(stored_at(cluster, sent.commitlog_offsets[0]).born_host)
    assert observed(pulled(cluster, b"later")) == entry  # delivered a second later


def test_a_half_message_and_its_commit_ignore_the_claim(cluster: AclCluster) -> None:
    half = message_pb2.Message(
        topic=TOPIC, queue_id=0, body=b"tx", sys_flag=SYS_FLAG_TRANSACTION_PREPARED
    )
    stub = cluster.stub(ORDERS)
    sent = stub.SendMessage(forged_request(messages=[half]), timeout=5)
    assert sent.statuses == [broker_pb2.SEND_OK]
    born = observed(stored_at(cluster, sent.commitlog_offsets[0]).born_host)
    stub.EndTransaction(
        broker_pb2.EndTransactionRequest(
            producer_group=PRODUCER_GROUP,
            prepared_commitlog_offset=sent.commitlog_offsets[0],
            decision=broker_pb2.TRANSACTION_COMMIT,
        ),
        timeout=5,
    )
    assert pulled(cluster, b"tx") == born
