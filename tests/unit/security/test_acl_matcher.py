"""The ACL document, the rights each call needs, and the authorizer's verdicts (its
authentication: tests/unit/security/test_signed_calls.py)."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from boltmq.v1 import broker_pb2, message_pb2
from services.broker.access.acl_file import (
    Account,
    AclDocument,
    InvalidAcl,
    Perm,
    wide_group_defaults,
)
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
            "groupPerms": {"legacy": "DENY", "g": "SUB", "orders-tx": "PUB"},
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
    assert account.group_perm("anything") == Perm.DENY  # the default: groups are named
    assert account.group_perm("g") == Perm.SUB
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
        (
            "PullMessage",
            broker_pb2.BrokerPullRequest(consumer_group="unnamed", topic="orders"),
            "denied",
        ),
        (
            "UpdateConsumerOffset",
            broker_pb2.UpdateConsumerOffsetRequest(group="unnamed", topic="orders"),
            "denied",
        ),
        ("ListDeadLetters", broker_pb2.ListDeadLettersRequest(group="unnamed"), "denied"),
        ("ListDeadLetters", broker_pb2.ListDeadLettersRequest(group="g"), "allowed"),
        (
            "EndTransaction",
            broker_pb2.EndTransactionRequest(producer_group="orders-tx"),
            "allowed",
        ),
        ("EndTransaction", broker_pb2.EndTransactionRequest(producer_group="g"), "denied"),
        (
            "TransactionChecks",
            broker_pb2.TransactionChecksRequest(producer_group="unnamed"),
            "denied",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(
                producer_group="g", messages=[message_pb2.Message(topic="orders", sys_flag=4)]
            ),
            "denied",
        ),
        (
            "SendMessage",
            broker_pb2.SendRequest(
                producer_group="orders-tx",
                messages=[message_pb2.Message(topic="orders", sys_flag=4)],
            ),
            "allowed",
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


@pytest.mark.parametrize(
    "topic", ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
)
def test_a_topic_default_never_opens_the_broker_topics(topic: str) -> None:
    pull = broker_pb2.BrokerPullRequest(consumer_group="billing", topic=topic)
    assert _verdict("reader-app", "PullMessage", pull) == "denied"  # defaultTopicPerm SUB
    assert _verdict("admin-key", "PullMessage", pull) == "allowed"


def test_accounts_with_a_group_default_are_named_for_the_start_up_warning() -> None:
    document = AclDocument.parse(json.dumps(DOCUMENT))
    assert wide_group_defaults(document) == []
    legacy = Account.from_json(
        {"accessKey": "legacy-app", "secretKey": "legacy-secret", "defaultGroupPerm": "SUB"}
    )
    assert wide_group_defaults(document.with_account(legacy)) == ["legacy-app"]


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
