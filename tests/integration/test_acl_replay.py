"""Replaying captured signed calls against a broker with the ACL on.

An attacker who saw one signed call on the wire (its metadata and its bytes)
tries to use it again: with another body, as it was, on another method, after
the window, and a client still signing the old way. Every attempt is refused
UNAUTHENTICATED with its reason, stores nothing, and the legitimate calls
(the SDK, the CLI) go on working.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

import grpc
import pytest
from click.testing import CliRunner

from boltmq.cli.main import main
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.signing import (
    ALGORITHM_HEADER,
    CONTENT_HEADER,
    NONCE_HEADER,
    Credentials,
    signed_metadata,
)
from boltmq.message import Message
from boltmq.producer import Producer
from boltmq.v1 import broker_pb2
from tests.integration import test_acl
from tests.integration.test_acl import ORDERS, SEND_METHOD, AclCluster, queue_end, send_request

acl_cluster = test_acl.acl_cluster
LIST_TOPICS_METHOD = "/boltmq.v1.BrokerService/ListTopics"
WINDOW_MS = 60_000
"""The test cluster's acl_signature_max_skew_ms."""


Metadata = tuple[tuple[str, str], ...]


def raw_send(cluster: AclCluster, body: bytes, metadata: Metadata) -> broker_pb2.SendResponse:
    """SendMessage with exactly ``body`` on the wire and exactly ``metadata``: what an attacker
    holding a captured call can send."""
    call = sync_channel(cluster.broker.address).unary_unary(
        SEND_METHOD, response_deserializer=broker_pb2.SendResponse.FromString
    )
    response: broker_pb2.SendResponse = call(body, metadata=metadata, timeout=5)
    return response


def refused(call: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    error: grpc.RpcError = info.value
    return error


def captured(body: bytes, method: str = SEND_METHOD, timestamp_ms: int | None = None) -> Metadata:
    """The metadata of a call ORDERS signed, as seen on the wire."""
    return signed_metadata(ORDERS, method, "victim@1@abc", body, timestamp_ms)


def test_a_captured_call_is_refused_with_another_body_and_when_replayed(
    acl_cluster: AclCluster,
) -> None:
    original = send_request("orders", b"pay 10").SerializeToString()
    metadata = captured(original)
    forged = send_request("orders", b"pay 10000").SerializeToString()
    error = refused(lambda: raw_send(acl_cluster, forged, metadata))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "request body differs from the one access key orders-app signed" in error.details()

    assert raw_send(acl_cluster, original, metadata).statuses == [broker_pb2.SEND_OK]
    error = refused(lambda: raw_send(acl_cluster, original, metadata))  # the same call again
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "replayed call: nonce" in error.details() and "already used" in error.details()
    assert queue_end(acl_cluster, "orders") == 1  # the original only: the topic was new
    log = acl_cluster.broker.log()
    assert "replayed call" in log and "request body differs" in log
    assert ORDERS.secret_key not in log


def test_a_signature_made_for_another_method_is_refused(acl_cluster: AclCluster) -> None:
    body = send_request("orders").SerializeToString()
    metadata = captured(body, method=LIST_TOPICS_METHOD)  # same bytes, signed for a read
    error = refused(lambda: raw_send(acl_cluster, body, metadata))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "the signature does not match its secret and the method called" in error.details()
    assert "signed for another method than /boltmq.v1.BrokerService/SendMessage" in (
        acl_cluster.broker.log()
    )


def test_a_call_outside_the_window_is_refused(acl_cluster: AclCluster) -> None:
    body = send_request("orders").SerializeToString()
    now_ms = int(time.time() * 1000)
    for skew_ms in (-2 * WINDOW_MS, 2 * WINDOW_MS):  # held back, or stamped ahead
        metadata = captured(body, timestamp_ms=now_ms + skew_ms)
        error = refused(partial(raw_send, acl_cluster, body, metadata))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "from the broker's clock (at most 60000)" in error.details()


def test_an_old_format_signature_is_refused_with_an_upgrade_message(
    acl_cluster: AclCluster,
) -> None:
    body = send_request("orders").SerializeToString()
    old = tuple((k, v) for k, v in captured(body) if k not in (NONCE_HEADER, CONTENT_HEADER))
    error = refused(lambda: raw_send(acl_cluster, body, old))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "old signature format" in error.details() and "upgrade the client" in error.details()


def test_legitimate_clients_sign_every_call_afresh(acl_cluster: AclCluster) -> None:
    registry = acl_cluster.registry.address
    for algorithm in ("HmacSHA256", "HmacSHA1"):
        creds = Credentials(ORDERS.access_key, ORDERS.secret_key, algorithm)
        producer = Producer(registry, credentials=creds).start()
        try:  # many calls with one client id: each has its own nonce
            results = [producer.send(Message(topic="orders", body=b"%d" % i)) for i in range(20)]
            big = producer.send(Message(topic="orders", body=b"b" * 1_000_000))
        finally:
            producer.shutdown()
        assert {r.status.name for r in [*results, big]} == {"SEND_OK"}
    env = {"BOLTMQ_ACCESS_KEY": ORDERS.access_key, "BOLTMQ_SECRET_KEY": ORDERS.secret_key}
    for _ in range(2):
        produced = CliRunner().invoke(
            main, ["produce", "--registry", registry, "--topic", "orders", "--body", "cli"], env=env
        )
        assert produced.exit_code == 0, produced.output
    assert dict(captured(b""))[ALGORITHM_HEADER] == "HmacSHA256"
