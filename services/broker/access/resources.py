"""What each BrokerService call needs: the topics and groups it touches, and how.

RocketMQ's ACL parses each request code's header into resources (topic or
group) and the permission it needs; this is the same table for BoltMQ's
calls. A retry or dead-letter topic (``%RETRY%G``, ``%DLQ%G``) is the
consumer group G's resource, as in RocketMQ: whoever may consume as G may
read its retries.

Call kind    | Calls
-------------+-----------------------------------------------------------------
PUB / SUB    | SendMessage and each message of a SendStream (topic PUB, every
             | section's topic of a request of sections too; a half
             | message also its producer group's PUB);
             | EndTransaction, TransactionChecks (producer group PUB; the half's
             | topic PUB where the half is read); PullMessage, PullQueues, offsets, locks,
             | heartbeat, send-back, dead-letter listing, key queries, SearchOffset,
             | ReceiveMessages, AckMessage, ChangeInvisibleDuration, ForwardToDeadLetter
             | (group / topic SUB);
             | the record a send-back names is checked where it is read
             | (:mod:`services.broker.access.caller`)
ANY ACCOUNT  | opening a SendStream; read-only cluster views (ListTopics, TopicStatus, ListGroups,
             | GroupProgress, GetBrokerInfo)
ADMIN        | UpsertTopic, DeleteTopic, UpsertGroup, DeleteGroup, GetGroup, GetConnections,
             | GetTrafficStats, ResetOffset, TrackMessage,
             | Promote, ViewMessage, GetMetadata, ResendDeadLetters, GetAcl, UpdateAcl,
             | and any call not listed
             | (a new call is admin-only until it is given a row here)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from boltmq.wire.record import SYS_FLAG_TRANSACTION_MASK
from services.broker.access.acl_file import Perm

BROKER_SERVICE_PREFIX = "/boltmq.v1.BrokerService/"
_GROUP_TOPIC_PREFIXES = ("%RETRY%", "%DLQ%")


class Kind(enum.Enum):
    """A resource's namespace."""

    TOPIC = "topic"
    GROUP = "group"


@dataclass(frozen=True)
class Need:
    """One right a call needs."""

    kind: Kind
    name: str
    perm: Perm


def topic_need(topic: str, perm: Perm) -> Need:
    """The need for ``topic``; a retry / DLQ topic is its group's SUB (module docstring)."""
    for prefix in _GROUP_TOPIC_PREFIXES:
        if topic.startswith(prefix):
            return Need(Kind.GROUP, topic[len(prefix) :], Perm.SUB)
    return Need(Kind.TOPIC, topic, perm)


def group_need(group: str, perm: Perm = Perm.SUB) -> Need:
    """A group's right: SUB to consume as a consumer group, PUB to be a transactional
    producer group (its check-backs, its decisions)."""
    return Need(Kind.GROUP, group, perm)


def _send(request: Any) -> Iterator[Need]:
    topics = {m.topic for m in request.messages}
    if request.topic:
        topics.add(request.topic)
    topics.update(section.topic for section in request.sections if section.topic)
    for topic in sorted(topics):
        yield topic_need(topic, Perm.PUB)
    if any(m.sys_flag & SYS_FLAG_TRANSACTION_MASK for m in request.messages):
        yield group_need(request.producer_group, Perm.PUB)  # a half message: its group's


def _producer_group(request: Any) -> Iterator[Need]:
    yield group_need(request.producer_group, Perm.PUB)


def _pull(request: Any) -> Iterator[Need]:
    yield group_need(request.consumer_group)
    yield topic_need(request.topic, Perm.SUB)


def _pull_queues(request: Any) -> Iterator[Need]:
    yield group_need(request.consumer_group)
    for topic in sorted({pull.topic for pull in request.pulls}):
        yield topic_need(topic, Perm.SUB)


def _group_and_topic(request: Any) -> Iterator[Need]:
    yield group_need(request.group)
    yield topic_need(request.topic, Perm.SUB)


def _heartbeat(request: Any) -> Iterator[Need]:
    for group in request.consumer_groups:
        yield group_need(group.group)
        for subscription in group.subscriptions:
            yield topic_need(subscription.topic, Perm.SUB)


def _unregister(request: Any) -> Iterator[Need]:
    for group in request.consumer_groups:
        yield group_need(group)


def _group_and_queues(request: Any) -> Iterator[Need]:
    yield group_need(request.group)
    for topic in sorted({q.topic for q in request.queues}):
        yield topic_need(topic, Perm.SUB)


def _group_and_offsets(request: Any) -> Iterator[Need]:
    yield group_need(request.group)
    for topic in sorted({entry.topic for entry in request.offsets}):
        yield topic_need(topic, Perm.SUB)


def _group(request: Any) -> Iterator[Need]:
    yield group_need(request.group)


def _key_query(request: Any) -> Iterator[Need]:
    yield topic_need(request.topic, Perm.SUB)


def _nothing(request: Any) -> Iterator[Need]:
    return iter(())


NEEDS: dict[str, Callable[[Any], Iterator[Need]]] = {
    "SendMessage": _send,
    "SendStream": _nothing,  # each message is checked as a SendMessage (stream_access.py)
    "PullMessage": _pull,
    "PullQueues": _pull_queues,
    "Heartbeat": _heartbeat,
    "UnregisterClient": _unregister,
    "GetConsumerList": _group,
    "UpdateConsumerOffset": _group_and_topic,
    "UpdateConsumerOffsets": _group_and_offsets,
    "QueryConsumerOffset": _group_and_topic,
    "QueryConsumerOffsets": _group_and_queues,
    "LockQueues": _group_and_queues,
    "UnlockQueues": _group_and_queues,
    "QueryMessageByKey": _key_query,
    "SearchOffset": _key_query,
    "ConsumerSendBack": _group,
    "ListDeadLetters": _group,
    "ListTopics": _nothing,
    "TopicStatus": _nothing,
    "ListGroups": _nothing,
    "GroupProgress": _nothing,
    "GetBrokerInfo": _nothing,
    "ReceiveMessages": _group_and_topic,
    "AckMessage": _group_and_topic,
    "ChangeInvisibleDuration": _group_and_topic,
    "ForwardToDeadLetter": _group_and_topic,
    "EndTransaction": _producer_group,
    "TransactionChecks": _producer_group,
}
"""Non-admin calls by method name -> the rights they need; every other call is admin-only."""


def is_admin_call(method: str) -> bool:
    """True for a call only admin accounts may make (``method`` is the short name)."""
    return method not in NEEDS


def needs_of(method: str, request: Any) -> list[Need]:
    """Rights a non-admin ``method`` needs for ``request`` (duplicates dropped)."""
    return list(dict.fromkeys(NEEDS[method](request)))
