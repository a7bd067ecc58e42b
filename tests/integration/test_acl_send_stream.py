"""SendStream against a broker with the ACL on: who may open one, and what each message may do.

The stream opens with signed metadata (a SendStream call with an empty body);
each message carries its own signature bound to the stream's nonce and its id.
Attempts without credentials, with forged ones, with a forged or moved message,
and a replayed open are refused UNAUTHENTICATED and store nothing; a topic the
account may not publish to is refused for that message only, with the text a
unary SendMessage gets, and the stream goes on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.signing import EMPTY_BODY, Credentials, signed_metadata
from boltmq.message import Message
from boltmq.producer import Producer, SendError
from boltmq.send_stream import METHOD
from boltmq.v1 import broker_pb2
from tests.integration.send_stream_client import RawStream, send_request, signed
from tests.integration.test_acl import ORDERS, READER, AclCluster, queue_end

OK = grpc.StatusCode.OK.value[0]


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclCluster]:
    cluster = AclCluster(Path(tmp_path_factory.mktemp("acl-stream")))
    with Producer(cluster.registry.address, credentials=ORDERS) as producer:
        producer.send(Message("orders", b"the topic exists"))
    yield cluster
    cluster.stop()


def opened(
    cluster: AclCluster, credentials: Credentials
) -> tuple[RawStream, tuple[tuple[str, str], ...]]:
    """A stream signed by ``credentials`` and its metadata (what a capture would hold)."""
    metadata = signed_metadata(credentials, METHOD, "stream-client@1@x", EMPTY_BODY)
    return RawStream(cluster.broker.address, metadata), metadata


def test_the_sdk_sends_on_a_signed_stream_and_a_topic_without_pub_fails_alone(
    acl_cluster: AclCluster,
) -> None:
    with Producer(acl_cluster.registry.address, "acl-stream-pg", credentials=ORDERS) as producer:
        assert producer.send(Message("orders", b"on the stream")).status.name == "SEND_OK"
        with pytest.raises(SendError) as info:
            producer.send(Message("payments", b"not mine"))
        assert "PERMISSION_DENIED" in str(info.value)
        assert "orders-app has DENY on topic 'payments'; SendMessage needs PUB" in str(info.value)
        assert producer.send(Message("orders", b"still open")).status.name == "SEND_OK"
        assert producer.client.send_stream(acl_cluster.broker.address).opened == 1


def test_an_account_without_pub_is_refused_per_message(acl_cluster: AclCluster) -> None:
    stream, metadata = opened(acl_cluster, READER)  # READER holds SUB on orders only
    try:
        stream.write(signed(READER, metadata, 1, send_request("orders", b"read only")))
        answer = stream.read()
        assert answer.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        assert "reader-app has SUB on topic 'orders'; SendMessage needs PUB" in answer.error
    finally:
        stream.close()


def test_unsigned_and_forged_streams_are_refused_before_any_message(
    acl_cluster: AclCluster,
) -> None:
    end = queue_end(acl_cluster, "orders")
    forged = Credentials(ORDERS.access_key, "not-the-secret")
    for metadata, reason in [
        ((), "no credentials"),
        (signed_metadata(forged, METHOD, "c@1@x", EMPTY_BODY), "is unknown, or the signature"),
        (  # signed as another method
            signed_metadata(ORDERS, "/boltmq.v1.BrokerService/SendMessage", "c@1@x", EMPTY_BODY),
            "is unknown, or the signature",
        ),
        (  # signed with a body: a stream's open has none
            signed_metadata(ORDERS, METHOD, "c@1@x", b"something"),
            "request body differs",
        ),
    ]:
        stream = RawStream(acl_cluster.broker.address, metadata)
        try:
            stream.send(1, send_request("orders", b"sneaked"))
            error = stream.ended()
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED, error
            assert reason in error.details()
        finally:
            stream.close()
    assert queue_end(acl_cluster, "orders") == end


def test_a_message_not_signed_by_the_streams_account_ends_the_stream(
    acl_cluster: AclCluster,
) -> None:
    end = queue_end(acl_cluster, "orders")
    good = send_request("orders", b"good")
    wrong = Credentials(ORDERS.access_key, "not-the-secret")
    for what in ("unsigned", "wrong secret", "tampered body"):
        stream, metadata = opened(acl_cluster, ORDERS)
        try:
            if what == "unsigned":
                stream.send(1, good)
            elif what == "wrong secret":
                stream.write(signed(wrong, metadata, 1, good))
            else:
                stream.write(_tampered(signed(ORDERS, metadata, 1, good)))
            error = stream.ended()
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED, what
            assert "message 1 of the stream of access key orders-app is not signed" in (
                error.details()
            )
        finally:
            stream.close()
    assert queue_end(acl_cluster, "orders") == end


def _tampered(message: broker_pb2.SendStreamRequest) -> broker_pb2.SendStreamRequest:
    message.send = send_request("orders", b"pay 10000")
    return message


def test_replays_of_a_stream_or_of_its_messages_are_refused(acl_cluster: AclCluster) -> None:
    stream, metadata = opened(acl_cluster, ORDERS)
    first = signed(ORDERS, metadata, 1, send_request("orders", b"pay 10"))
    end = queue_end(acl_cluster, "orders")
    try:
        stream.write(first)
        assert stream.read().code == OK
        stream.write(first)  # the same message again on its stream
        error = stream.ended()
        assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "id: 1 is not greater than the id before it (1)" in error.details()
    finally:
        stream.close()
    replayed = RawStream(acl_cluster.broker.address, metadata)  # the open, captured
    try:
        replayed.write(first)
        error = replayed.ended()
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "replayed call: nonce" in error.details()
    finally:
        replayed.close()
    other, _ = opened(acl_cluster, ORDERS)  # a fresh stream of the same account
    try:
        other.write(first)  # a message signed for another stream's nonce
        error = other.ended()
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED
        assert "is not signed by it" in error.details()
    finally:
        other.close()
    assert queue_end(acl_cluster, "orders") == end + 1  # the first send only
