"""StreamAccess: each message of a signed SendStream is checked as a SendMessage call.

A stream's signed fields (its nonce, its signature method) come from its open;
every message must be signed under the account's current secret for that nonce,
its id, deadline, trace context and body, and is then parsed, charged to the
client's budget and authorized. Only a bad signature ends the stream.
"""

from __future__ import annotations

import json

import grpc
import pytest

from boltmq.kernel.caller_limits import CallerLimits
from boltmq.kernel.signing import EMPTY_BODY, Credentials, SignedCall, signed_metadata
from boltmq.send_stream import METHOD
from boltmq.v1 import broker_pb2, message_pb2
from services.broker.access.acl_file import AclDocument
from services.broker.access.authorizer import AccessDenied, Authorizer
from services.broker.access.replay_cache import ReplayCache
from services.broker.access.stream_access import StreamAccess, StreamRefused
from tests.integration.send_stream_client import signed

ORDERS = Credentials("orders-app", "orders-secret-1")
DOCUMENT = AclDocument.parse(
    json.dumps(
        {
            "accounts": [
                {
                    "accessKey": ORDERS.access_key,
                    "secretKey": ORDERS.secret_key,
                    "topicPerms": {"orders": "PUB"},
                }
            ]
        }
    )
)


def send(topic: str) -> bytes:
    return broker_pb2.SendRequest(
        producer_group="pg", messages=[message_pb2.Message(topic=topic, body=b"x")]
    ).SerializeToString()


def opened(limits: CallerLimits | None = None) -> tuple[StreamAccess, tuple[tuple[str, str], ...]]:
    """A stream of ORDERS as the gate admits it, and its open's metadata."""
    metadata = signed_metadata(ORDERS, METHOD, "c@1@x", EMPTY_BODY)
    authorizer = Authorizer(lambda: DOCUMENT, 30_000, ReplayCache(30_000, 16))
    account, call = authorizer.authenticate_call(METHOD, metadata, EMPTY_BODY)
    assert account.access_key == ORDERS.access_key and isinstance(call, SignedCall)
    return StreamAccess(METHOD, authorizer, call, limits, ORDERS.access_key), metadata


def test_a_message_signed_for_its_stream_is_let_through_parsed() -> None:
    access, metadata = opened()
    request = access.admit(signed(ORDERS, metadata, 1, send("orders"), traceparent="00-ab"))
    assert request.messages[0].topic == "orders"


@pytest.mark.parametrize(
    "change", ["id", "timeout_ms", "traceparent", "send", "no signature", "other stream"]
)
def test_any_field_changed_after_signing_refuses_the_stream(change: str) -> None:
    access, metadata = opened()
    message = signed(ORDERS, metadata, 5, send("orders"))
    if change == "id":
        message.id = 6
    elif change == "timeout_ms":
        message.timeout_ms += 1
    elif change == "traceparent":
        message.traceparent = "00-forged"
    elif change == "send":
        message.send = send("orders") + b"\x00"
    elif change == "no signature":
        message.signature = ""
    else:
        _, other = opened()
        message = signed(ORDERS, other, 5, send("orders"))
    with pytest.raises(StreamRefused) as info:
        access.admit(message)
    assert info.value.code is grpc.StatusCode.UNAUTHENTICATED
    assert f"message {message.id} of the stream of access key orders-app is not signed" in (
        str(info.value)
    )


def test_a_topic_without_pub_is_refused_for_that_message_and_its_budget_given_back() -> None:
    limits = CallerLimits(0, 1, 1)  # one message in flight at most
    access, metadata = opened(limits)
    with pytest.raises(AccessDenied) as info:
        access.admit(signed(ORDERS, metadata, 1, send("payments")))
    assert not isinstance(info.value, StreamRefused)
    assert info.value.code is grpc.StatusCode.PERMISSION_DENIED
    assert "orders-app has DENY on topic 'payments'; SendMessage needs PUB" in str(info.value)
    access.admit(signed(ORDERS, metadata, 2, send("orders")))  # the slot was given back
    with pytest.raises(AccessDenied) as full:
        access.admit(signed(ORDERS, metadata, 3, send("orders")))
    assert full.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    access.done()
    access.admit(signed(ORDERS, metadata, 4, send("orders")))


def test_a_send_that_does_not_parse_is_refused_for_that_message() -> None:
    access = StreamAccess(METHOD, None, None, None, "127.0.0.1")  # access control off
    with pytest.raises(AccessDenied) as info:
        access.admit(broker_pb2.SendStreamRequest(id=9, send=b"\xff\xff", timeout_ms=1))
    assert info.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "message 9: send does not parse" in str(info.value)
