"""Conversions between the broker's domain values and their proto messages.

Kept in one place so every part speaks the same wire form: the servicer and
the registrar (a topic's configuration, queue ids), and every part that
appends to the store and answers with what the store said (the send path,
transactions, dead letters resent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from boltmq.v1 import broker_pb2, message_pb2, registry_pb2, store_pb2
from services.broker.metadata.topic_config import TopicConfig

SEND_STATUS_OF_STORED = {
    message_pb2.PUT_OK: broker_pb2.SEND_OK,
    message_pb2.FLUSH_DISK_TIMEOUT: broker_pb2.SEND_FLUSH_DISK_TIMEOUT,
    message_pb2.FLUSH_SLAVE_TIMEOUT: broker_pb2.SEND_FLUSH_SLAVE_TIMEOUT,
    message_pb2.SLAVE_NOT_AVAILABLE: broker_pb2.SEND_SLAVE_NOT_AVAILABLE,
}
"""Stored outcomes; every other PutMessageStatus means nothing was stored (SEND_FAILED)."""
STORED = frozenset(SEND_STATUS_OF_STORED)
"""PutMessageStatuses under which the record is in the CommitLog."""
assert message_pb2.PUT_OK == broker_pb2.SEND_OK == 0  # to_send_response's all-stored answer


def topic_to_proto(config: TopicConfig) -> registry_pb2.TopicConfig:
    """The wire form of a topic's configuration."""
    return registry_pb2.TopicConfig(
        name=config.name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        order=config.order,
    )


def queues_to_proto(queues: Iterable[tuple[str, int]]) -> list[broker_pb2.QueueId]:
    """Wire form of ``(topic, queue_id)`` pairs."""
    return [broker_pb2.QueueId(topic=topic, queue_id=queue_id) for topic, queue_id in queues]


def to_send_response(
    response: store_pb2.AppendResponse, topic: str, queue_id: int, broker_name: str
) -> broker_pb2.SendResponse:
    """The client's view of a batch's appends: stored statuses keep their meaning, the
    rest fail (with the store's reason, or its status name when it gave none)."""
    put_statuses = response.statuses
    statuses, errors = send_statuses(put_statuses, response.errors)
    answer = broker_pb2.SendResponse(
        statuses=statuses,
        put_statuses=put_statuses,
        queue_offsets=response.queue_offsets,
        commitlog_offsets=response.commitlog_offsets,
        topic=topic,
        broker_name=broker_name,
        queue_id=queue_id,
        msg_id_prefix=response.msg_id_prefix,
    )
    if errors:  # an empty map costs a message more to build than none
        answer.errors.update(errors)
    return answer


def fill_send_response(
    answer: broker_pb2.SendResponse,
    response: store_pb2.AppendResponse,
    start: int,
    end: int,
    topic: str,
    queue_id: int,
    broker_name: str,
) -> None:
    """Fill ``answer`` (empty, in place: a section's answer inside the call's) with
    :func:`to_send_response` of the entries ``start..end`` of an append's answer."""
    put_statuses = response.statuses[start:end]
    errors_in: Mapping[int, str] = response.errors
    if errors_in:
        errors_in = {i - start: e for i, e in errors_in.items() if start <= i < end}
    statuses, errors = send_statuses(put_statuses, errors_in)
    answer.statuses.extend(statuses)
    answer.put_statuses.extend(put_statuses)
    answer.queue_offsets.extend(response.queue_offsets[start:end])
    answer.commitlog_offsets.extend(response.commitlog_offsets[start:end])
    answer.topic = topic
    answer.broker_name = broker_name
    answer.queue_id = queue_id
    answer.msg_id_prefix = response.msg_id_prefix
    if errors:
        answer.errors.update(errors)


def send_statuses(
    put_statuses: Any, stored_errors: Mapping[int, str]
) -> tuple[Any, Mapping[int, str]]:
    """The SendStatus of each PutMessageStatus (the stored keep their meaning, the rest
    fail) and the errors of the answer: the store's, and for a failure it gave no reason
    for, its status name. All PUT_OK, the usual answer: the same zeros, as they are."""
    if not any(put_statuses):
        return put_statuses, stored_errors
    send_status = SEND_STATUS_OF_STORED
    statuses = [send_status.get(status, broker_pb2.SEND_FAILED) for status in put_statuses]
    errors = dict(stored_errors)
    for index, status in enumerate(statuses):
        if status == broker_pb2.SEND_FAILED and index not in errors:
            errors[index] = (
                f"store refused the message: "
                f"{message_pb2.PutMessageStatus.Name(put_statuses[index])}"
            )
    return statuses, errors
