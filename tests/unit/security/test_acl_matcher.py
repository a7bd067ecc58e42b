"""The ACL document, the rights each call needs, and the authorizer's verdicts."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from boltmq.kernel.signing import Credentials, signed_metadata
from boltmq.v1 import broker_pb2, message_pb2
from services.broker.access.acl_file import Account, AclDocument, InvalidAcl, Perm
from services.broker.access.authorizer import AccessDenied, Authorizer

NOW_MS = 1_700_000_000_000
DOCUMENT: dict[str, Any] = {
    "version": 3,
    "accounts": [
        {"accessKey": "admin-key", "secretKey": "admin-secret", "admin": True},
        {
            "accessKey": "orders-app",
            "secretKey": "orders-secret",
            "topicPerms": {"orders": "PUB|SUB", "audit": "PUB", "secret": "DENY"},
            "groupPerms": {"legacy": "DENY"},
        },
        {
            "accessKey": "reader-app",
            "secretKey": "reader-secret",
            "defaultTopicPerm": "SUB",
            "defaultGroupPerm": "DENY",
            "groupPerms": {"billing": "SUB"},
        },
    ],
}


def _authorizer(skew_ms: int = 60_000) -> Authorizer:
    document = AclDocument.parse(json.dumps(DOCUMENT))
    return Authorizer(lambda: document, skew_ms, clock_ms=lambda: NOW_MS)


def _verdict(access_key: str, method: str, call: object) -> str:
    account = AclDocument.parse(json.dumps(DOCUMENT)).accounts[access_key]
    try:
        Authorizer.authorize(account, method, call)
    except AccessDenied as exc:
        assert exc.code == grpc.StatusCode.PERMISSION_DENIED
        return "denied"
    return "allowed"


@pytest.mark.parametrize(
    "text, perm",
    [
        ("DENY", Perm.DENY),
        ("PUB", Perm.PUB),
        ("sub", Perm.SUB),
        ("PUB|SUB", Perm.PUB | Perm.SUB),
        ("SUB|PUB", Perm.PUB | Perm.SUB),
    ],
)
def test_permissions_parse_and_print(text: str, perm: Perm) -> None:
    assert Perm.parse(text, "x") == perm
    assert Perm.parse(perm.text(), "x") == perm


@pytest.mark.parametrize("text", ["", "READ", "DENY|PUB", "PUB|", None, 7])
def test_bad_permissions_are_refused(text: object) -> None:
    with pytest.raises(InvalidAcl):
        Perm.parse(text, "topicPerms orders")


def test_deny_grants_nothing_and_named_entries_replace_defaults() -> None:
    account = Account.from_json(DOCUMENT["accounts"][1])
    assert not Perm.DENY.grants(Perm.SUB)
    assert account.topic_perm("orders") == Perm.PUB | Perm.SUB
    assert account.topic_perm("elsewhere") == Perm.DENY  # the default
    assert account.group_perm("anything") == Perm.SUB  # the default
    assert account.group_perm("legacy") == Perm.DENY


@pytest.mark.parametrize(
    "method, call, expected",
    [
        (
            "SendMessage",
            broker_pb2.SendRequest(messages=[message_pb2.Message(topic="orders")]),
            "allowed",
        ),
        ("SendMessage", broker_pb2.SendRequest(topic="audit"), "allowed"),
        (
            "SendMessage",
            broker_pb2.SendRequest(
                messages=[message_pb2.Message(topic="orders"), message_pb2.Message(topic="other")]
            ),
            "denied",
        ),
        ("SendMessage", broker_pb2.SendRequest(topic="secret"), "denied"),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(consumer_group="g", topic="orders"),
            "allowed",
        ),
        ("PullMessage", broker_pb2.BrokerPullRequest(consumer_group="g", topic="audit"), "denied"),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(consumer_group="legacy", topic="orders"),
            "denied",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(consumer_group="g", topic="%RETRY%g"),
            "allowed",
        ),
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(consumer_group="g", topic="%RETRY%legacy"),
            "denied",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="g",
                pulls=[
                    broker_pb2.QueuePull(topic="orders"),
                    broker_pb2.QueuePull(topic="%RETRY%g"),
                ],
            ),
            "allowed",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="g",
                pulls=[broker_pb2.QueuePull(topic="orders"), broker_pb2.QueuePull(topic="audit")],
            ),
            "denied",
        ),
        (
            "PullQueues",
            broker_pb2.BrokerPullQueuesRequest(
                consumer_group="legacy", pulls=[broker_pb2.QueuePull(topic="orders")]
            ),
            "denied",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g",
                queues=[broker_pb2.QueueId(topic="orders"), broker_pb2.QueueId(topic="%RETRY%g")],
            ),
            "allowed",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="g",
                queues=[broker_pb2.QueueId(topic="orders"), broker_pb2.QueueId(topic="audit")],
            ),
            "denied",
        ),
        (
            "QueryConsumerOffsets",
            broker_pb2.QueryConsumerOffsetsRequest(
                group="legacy", queues=[broker_pb2.QueueId(topic="orders")]
            ),
            "denied",
        ),
        (
            "Heartbeat",
            broker_pb2.HeartbeatRequest(
                consumer_groups=[
                    broker_pb2.ConsumerGroupHeartbeat(
                        group="g", subscriptions=[broker_pb2.ConsumerSubscription(topic="audit")]
                    )
                ]
            ),
            "denied",
        ),
        ("ListTopics", broker_pb2.ListTopicsRequest(), "allowed"),
        ("UpsertTopic", broker_pb2.UpsertTopicRequest(), "denied"),
        ("DeleteTopic", broker_pb2.DeleteTopicRequest(topic="orders"), "denied"),
        ("UpdateAcl", broker_pb2.UpdateAclRequest(), "denied"),
        ("SomeFutureCall", broker_pb2.ListTopicsRequest(), "denied"),
    ],
)
def test_rights_of_a_plain_account(method: str, call: object, expected: str) -> None:
    assert _verdict("orders-app", method, call) == expected


def test_admin_may_do_everything() -> None:
    assert _verdict("admin-key", "DeleteTopic", broker_pb2.DeleteTopicRequest()) == "allowed"
    assert _verdict("admin-key", "SendMessage", broker_pb2.SendRequest(topic="secret")) == "allowed"


def test_default_group_deny_and_named_group() -> None:
    pull = broker_pb2.BrokerPullRequest(consumer_group="billing", topic="anything")
    assert _verdict("reader-app", "PullMessage", pull) == "allowed"
    pull.consumer_group = "other"
    assert _verdict("reader-app", "PullMessage", pull) == "denied"


def _metadata(
    access_key: str,
    secret: str,
    timestamp_ms: int = NOW_MS,
    method: str = "/boltmq.v1.BrokerService/SendMessage",
) -> list[tuple[str, str]]:
    return list(signed_metadata(Credentials(access_key, secret), method, "c-1", timestamp_ms))


def test_authentication_verdicts() -> None:
    method = "/boltmq.v1.BrokerService/SendMessage"
    authorizer = _authorizer(skew_ms=60_000)
    assert (
        authorizer.authenticate(method, _metadata("orders-app", "orders-secret")).access_key
        == "orders-app"
    )
    cases = {
        "wrong signature": _metadata("orders-app", "not-the-secret"),
        "unknown access key": _metadata("nobody-here", "orders-secret"),
        "from the broker's clock": _metadata("orders-app", "orders-secret", NOW_MS - 61_000),
        "no credentials": [],
    }
    for reason, metadata in cases.items():
        with pytest.raises(AccessDenied) as info:
            authorizer.authenticate(method, metadata)
        assert reason in info.value.log_reason
        assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert "orders-secret" not in str(info.value) + info.value.log_reason
    # The caller cannot tell an unknown access key from a wrong secret.
    answers = set()
    for key, secret in (("orders-app", "not-the-secret"), ("nobody-here", "orders-secret")):
        with pytest.raises(AccessDenied) as info:
            authorizer.authenticate(method, _metadata(key, secret))
        answers.add(str(info.value).replace(key, "KEY"))
    assert answers == {"access key KEY is unknown or the signature does not match its secret"}
    stale_unknown = _metadata("nobody-here", "orders-secret", NOW_MS - 61_000)
    with pytest.raises(AccessDenied, match="from the broker's clock"):
        authorizer.authenticate(method, stale_unknown)  # checked before the look-up
    future = _metadata("orders-app", "orders-secret", NOW_MS + 61_000)
    with pytest.raises(AccessDenied, match="from the broker's clock"):
        authorizer.authenticate(method, future)
    other_method = _metadata(
        "orders-app", "orders-secret", method="/boltmq.v1.BrokerService/PullMessage"
    )
    with pytest.raises(AccessDenied, match="signature does not match"):
        authorizer.authenticate(method, other_method)


@pytest.mark.parametrize(
    "document, message",
    [
        ("not json", "not valid JSON"),
        ('{"accounts": {}}', "accounts must be a list"),
        ('{"version": -1}', "version"),
        ('{"extra": 1}', "'version' and 'accounts' only"),
        (
            '{"accounts": [{"accessKey": "orders-app", "secretKey": "orders-secret", '
            '"topicPerm": {}}]}',
            "unknown fields",
        ),
        ('{"accounts": [{"accessKey": "orders-app", "secretKey": "x"}]}', "secret key"),
        (
            '{"accounts": [{"accessKey": "orders-app", "secretKey": "orders-secret", '
            '"admin": "yes"}]}',
            "admin must be",
        ),
        (
            '{"accounts": [{"accessKey": "orders-app", "secretKey": "orders-secret"}, '
            '{"accessKey": "orders-app", "secretKey": "orders-secret"}]}',
            "appears twice",
        ),
        (
            '{"accounts": [{"accessKey": "orders-app", "secretKey": "orders-secret", '
            '"topicPerms": {"t": "ALL"}}]}',
            "unknown permission",
        ),
    ],
)
def test_bad_documents_are_refused_with_the_field(document: str, message: str) -> None:
    with pytest.raises(InvalidAcl, match=message):
        AclDocument.parse(document)


def test_document_round_trips_and_redacts() -> None:
    document = AclDocument.parse(json.dumps(DOCUMENT))
    assert AclDocument.parse(document.dump()) == document
    redacted = document.dump(redact=True).decode()
    assert "orders-secret" not in redacted and "******" in redacted
    edited = document.without_account("reader-app")
    assert edited.version == 4 and set(edited.accounts) == {"admin-key", "orders-app"}
    with pytest.raises(InvalidAcl, match="no account"):
        edited.without_account("reader-app")
