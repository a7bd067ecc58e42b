"""The Topics pages' data and changes.

The list merges every master's ``ListTopics`` (a topic's queues live on each broker
group it was created on); a topic's page adds each group's queues (``TopicStatus``:
min and max offset), the registry's route, and the consumer groups that have
offsets in it with their lag (``ListGroups`` then ``GroupProgress`` per group).
Changes are the CLI's: ``UpsertTopic`` and ``DeleteTopic`` on every master, and a
test message sent through the SDK's Producer with the logged-in account.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from boltmq.client import PERM_READ, PERM_WRITE, BoltMQError
from boltmq.console.calls import ClusterCalls, ConsoleError, error_text
from boltmq.kernel.registry_client import RegistryError
from boltmq.message import Message, MessageQueue
from boltmq.producer import Producer
from boltmq.pull_consumer import PullStatus, pull_queue
from boltmq.v1 import broker_pb2, registry_pb2
from boltmq.wire.record import SCHEDULE_TOPIC
from boltmq.wire.topic import DLQ_PREFIX, RETRY_PREFIX, InvalidTopic, validate_topic

SYSTEM_TOPICS = frozenset(
    {SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TBW102"}
)
MAX_QUEUES = 1024
TEST_PRODUCER_GROUP = "boltmq-console"
READ_GROUP = "boltmq-console"
"""The consumer group the console reads messages as (pulls that commit nothing)."""


def is_system_topic(name: str) -> bool:
    """The broker's own topics and the groups' retry and dead-letter topics."""
    return name in SYSTEM_TOPICS or name.startswith((RETRY_PREFIX, DLQ_PREFIX))


def perm_text(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")


def checked_topic(name: str) -> str:
    try:
        return validate_topic(name)
    except InvalidTopic as exc:
        raise ConsoleError(str(exc)) from None


@dataclass
class TopicRow:
    name: str
    write_queues: int
    read_queues: int
    perm: int
    order: bool
    groups: list[str] = field(default_factory=list)

    @property
    def system(self) -> bool:
        return is_system_topic(self.name)

    @property
    def perm_text(self) -> str:
        return perm_text(self.perm)


def topic_rows(calls: ClusterCalls, search: str = "", system: bool = False) -> list[TopicRow]:
    """Every topic of every master whose name contains ``search`` (case-insensitive)."""
    rows: dict[str, TopicRow] = {}
    needle = search.strip().lower()
    for broker_name, answer in calls.each_ok("ListTopics", broker_pb2.ListTopicsRequest()):
        for t in answer.topics:
            if needle not in t.name.lower() or (is_system_topic(t.name) and not system):
                continue
            row = rows.setdefault(
                t.name, TopicRow(t.name, t.write_queue_nums, t.read_queue_nums, t.perm, t.order)
            )
            row.groups.append(broker_name)
    return sorted(rows.values(), key=lambda r: r.name)


@dataclass
class QueueRow:
    group: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_stored_ms: int = 0
    """Store time of the queue's last message (0: empty, or not readable)."""


@dataclass
class ConsumerRow:
    group: str
    lag: int
    queues: int


def topic_page(calls: ClusterCalls, name: str) -> dict[str, Any]:
    """Queues per broker group, the route, and the consumer groups with their lag."""
    name = checked_topic(name)
    queues: list[QueueRow] = []
    errors: list[str] = []
    for broker, answer in calls.each("TopicStatus", broker_pb2.TopicStatusRequest(topic=name)):
        if isinstance(answer, grpc.RpcError):
            if answer.code() != grpc.StatusCode.NOT_FOUND:
                errors.append(f"TopicStatus on {broker.broker_name}: {error_text(answer)}")
            continue
        queues += [
            QueueRow(broker.broker_name, q.queue_id, q.min_offset, q.max_offset)
            for q in sorted(answer.queues, key=lambda q: q.queue_id)
        ]
    route: registry_pb2.TopicRoute | None = None
    try:
        route = calls.client.route(name, refresh=True)
    except RegistryError as exc:
        errors.append(f"route: {exc}")
    if not queues and route is None:
        raise ConsoleError(f"topic {name!r} is unknown on every master")
    last_stored(calls, name, queues, errors)
    return {
        "name": name,
        "queues": queues,
        "route": route,
        "consumers": consumers_of(calls, name, errors),
        "errors": errors,
    }


def last_stored(calls: ClusterCalls, topic: str, queues: list[QueueRow], errors: list[str]) -> None:
    """Each non-empty queue's last store time, read by pulling its last message as the
    console's read group (SUB on the topic and on that group; nothing is committed)."""

    def read(row: QueueRow) -> str:
        queue = MessageQueue(topic, row.group, row.queue_id)
        try:
            result = pull_queue(
                calls.client, READ_GROUP, queue, row.max_offset - 1,
                max_messages=1, subscription="*", wait_ms=0,
            )  # fmt: skip
        except (BoltMQError, RegistryError) as exc:
            return str(exc)
        if result.status is PullStatus.FOUND and result.messages:
            row.last_stored_ms = result.messages[-1].store_timestamp
        return ""

    failures = [
        f for f in calls.in_parallel(read, [q for q in queues if q.max_offset > q.min_offset]) if f
    ]
    if failures:
        errors.append(f"last store times (read as group {READ_GROUP}): {failures[0]}")


def consumers_of(calls: ClusterCalls, topic: str, errors: list[str]) -> list[ConsumerRow]:
    """The consumer groups with offsets in ``topic``, with their lag there."""
    names = sorted(
        {
            g.group
            for _, answer in calls.each("ListGroups", broker_pb2.ListGroupsRequest())
            if not isinstance(answer, grpc.RpcError)
            for g in answer.groups
        }
    )

    def progress(group: str) -> ConsumerRow | str | None:
        lag = queues = 0
        for broker, answer in calls.each(
            "GroupProgress", broker_pb2.GroupProgressRequest(group=group)
        ):
            if isinstance(answer, grpc.RpcError):
                if answer.code() == grpc.StatusCode.NOT_FOUND:
                    continue
                return f"GroupProgress {group} on {broker.broker_name}: {error_text(answer)}"
            for q in answer.queues:
                if q.topic == topic:
                    lag += q.lag
                    queues += 1
        return ConsumerRow(group, lag, queues) if queues else None

    rows = []
    for found in calls.in_parallel(progress, names):
        if isinstance(found, str):
            errors.append(found)
        elif found is not None:
            rows.append(found)
    return rows


def upsert_topic(calls: ClusterCalls, name: str, queues: int, perm: int, order: bool) -> list[str]:
    """Create or change topic ``name`` on every master; a line per master."""
    name = checked_topic(name)
    if not 1 <= queues <= MAX_QUEUES:
        raise ConsoleError(f"queues: between 1 and {MAX_QUEUES}, not {queues}")
    if not 0 <= perm <= 7:
        raise ConsoleError(f"perm: READ 4 | WRITE 2 | INHERIT 1 (0..7), not {perm}")
    config = registry_pb2.TopicConfig(
        name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm, order=order
    )
    return [
        f"{broker}: {t.topic.name} queues {t.topic.write_queue_nums}/{t.topic.read_queue_nums}"
        f" perm {perm_text(t.topic.perm)}"
        for broker, t in calls.each_ok("UpsertTopic", broker_pb2.UpsertTopicRequest(topic=config))
    ]


def delete_topic(calls: ClusterCalls, name: str) -> list[str]:
    """Delete topic ``name`` from every master that has it."""
    name = checked_topic(name)
    lines = []
    for broker, answer in calls.each("DeleteTopic", broker_pb2.DeleteTopicRequest(topic=name)):
        if isinstance(answer, grpc.RpcError):
            if answer.code() == grpc.StatusCode.NOT_FOUND:
                continue
            raise ConsoleError(f"DeleteTopic on {broker.broker_name}: {error_text(answer)}")
        lines.append(f"{broker.broker_name}: {name} deleted")
    if not lines:
        raise ConsoleError(f"topic {name!r} does not exist on any master")
    return lines


def send_test_message(
    calls: ClusterCalls, registry: str, name: str, body: str, tags: str, keys: str
) -> str:
    """Send one message to topic ``name`` as the logged-in account; the result line."""
    name = checked_topic(name)
    message = Message(topic=name, body=body.encode(), tags=tags.strip() or None, keys=keys.split())
    try:
        producer = Producer(
            registry,
            TEST_PRODUCER_GROUP,
            tls=calls.client.tls,
            credentials=calls.credentials,
        ).start()
        try:
            result = producer.send(message)
        finally:
            producer.shutdown()
    except (BoltMQError, RegistryError, ValueError) as exc:
        raise ConsoleError(f"send to {name}: {exc}") from None
    return (
        f"{result.status.name} msg id {result.msg_id} unique id {result.unique_id} "
        f"queue {result.queue} offset {result.queue_offset}"
    )


def is_topic_name(name: str) -> bool:
    try:
        validate_topic(name)
    except InvalidTopic:
        return False
    return True
