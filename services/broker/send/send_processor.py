"""SendMessage: validate a batch, find or auto-create its topic, append it in one store call.

Two forms of a batch: protobuf ``messages`` (any client) or ``records`` the
producer encoded in the CommitLog format (the Python SDK): those the broker
checks header by header (:mod:`services.broker.send.batch_check`) and forwards
as one opaque ``bytes`` (:mod:`boltmq.wire.record_batch`). A request of
``sections`` carries several topics' raw batches, each sent as a raw request
of its own and answered on its own (:mod:`services.broker.send.send_sections`).

A batch is one topic and one queue (queue_id -1: the broker picks the next
queue round-robin), so the store appends it in one call under one lock. Every
check happens before anything is stored: a batch is refused whole with a
status naming the field, never half-stored. What the store then says about
each message is mapped to a :data:`SendStatus` per message
(:func:`services.broker.wire.to_send_response`).

Every message is stored with the born host the broker observed: the
connection's remote ``host:port`` (``peer_address``), never what the request
claims (``SendRequest.born_host`` and the born host bytes of a pre-encoded
record are ignored), so a client cannot make its messages look as if they
came from another host. Half messages of transactions and delayed messages
rewritten by the broker take the same address; copies the broker makes of a
stored message (send-back, dead letters, delay delivery, transaction
commits) keep the original record's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import grpc

from boltmq.kernel import telemetry
from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.record import SYS_FLAG_TRANSACTION_MASK
from boltmq.wire.record_batch import MalformedBatch, RecordBatch, frame_records, select
from boltmq.wire.topic import DLQ_PREFIX, RETRY_PREFIX
from services.broker.access.creation_limits import CreationLimits
from services.broker.cluster.topic_publisher import TopicPublisher
from services.broker.config import BrokerConfig
from services.broker.delay.delay_message import records_as_messages, schedule_delayed
from services.broker.errors import InvalidArgument, NotFound, PermissionDenied, StoreFailed
from services.broker.metadata.topic_config import (
    AUTO_CREATE_TEMPLATE_TOPIC,
    BROKER_TOPICS,
    TopicConfig,
    TopicConfigManager,
)
from services.broker.metrics import BrokerMetrics
from services.broker.send.batch_check import check_batch, check_headers, check_records_request
from services.broker.send.send_sections import check_creations, check_sections, send_sections
from services.broker.store.store_client import StoreClient
from services.broker.transaction.transaction_service import TransactionService
from services.broker.wire import to_send_response


class SendProcessor:
    """Turns SendRequests into store appends."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicConfigManager,
        store: StoreClient,
        publisher: TopicPublisher,
        transactions: TransactionService,
        metrics: BrokerMetrics,
        creations: CreationLimits,
    ) -> None:
        self._config = config
        self._topics = topics
        self._store = store
        self._publisher = publisher
        self._transactions = transactions
        """Stores half messages (sys flag PREPARED)."""
        self._metrics = metrics
        self._round_robin: dict[str, Iterator[int]] = {}
        self._creations = creations
        """Caps the topics a client's sends auto-create."""

    async def send(
        self, request: broker_pb2.SendRequest, peer_address: str
    ) -> broker_pb2.SendResponse:
        """Validate, pick the queue, append the batch as born at ``peer_address`` (the
        connection's remote ``host:port``; empty: the store records the broker's), and map
        the store's results."""
        if request.sections:  # several topics' raw batches (send_sections.py)
            check_sections(request)
            check_creations(request, self._config, self._topics, self._creations)
            return await send_sections(request, peer_address, self._send_raw)
        if request.record_count or request.records:
            return await self._send_raw(request, peer_address)
        return self._observed(await self._send_messages(request, peer_address), request.ByteSize())

    async def _send_raw(
        self, request: broker_pb2.SendRequest, peer_address: str
    ) -> broker_pb2.SendResponse:
        """A raw request (or a section's), counted and described."""
        records = request.records  # each access copies the bytes: once only
        return self._observed(
            await self._send_records(request, records, peer_address), len(records)
        )

    def _observed(self, response: broker_pb2.SendResponse, size: int) -> broker_pb2.SendResponse:
        """Count a batch (metrics), describe it on the current span; return ``response``.

        ``size``: the records' bytes, or the request's for protobuf messages
        (``ByteSize`` of a raw request would cost a copy of its records, ~13 us).
        """
        statuses, offsets = response.statuses, response.queue_offsets
        telemetry.annotate(response.topic, response.queue_id, len(statuses), size)
        if offsets:
            self._metrics.sent(
                response.topic,
                response.queue_id,
                len(statuses) - len(response.errors),
                size,
                offsets[-1] + 1,
            )
        return response

    async def _send_messages(
        self, request: broker_pb2.SendRequest, peer_address: str
    ) -> broker_pb2.SendResponse:
        """The per-message path: protobuf messages, and raw batches holding a delay."""
        topic, queue_id = check_batch(request, self._config)
        queue_id = await self._writable_queue(request, topic, queue_id, "messages[0].topic")
        if any(m.sys_flag & SYS_FLAG_TRANSACTION_MASK for m in request.messages):
            return await self._transactions.prepare(request, topic, queue_id, peer_address)
        for message in request.messages:
            message.queue_id = queue_id
        schedule_delayed(request.messages, self._config)
        response = await self._store.append(request.messages, peer_address)
        if len(response.statuses) != len(request.messages):
            raise StoreFailed(
                grpc.StatusCode.INTERNAL,
                f"store answered {len(response.statuses)} "
                f"results for {len(request.messages)} messages",
            )
        return to_send_response(response, topic, queue_id, self._config.broker_name)

    async def _writable_queue(
        self, request: broker_pb2.SendRequest, topic: str, queue_id: int, field: str
    ) -> int:
        """The queue a batch goes to, once its topic exists (or was auto-created) and
        may be written."""
        if topic in BROKER_TOPICS:
            raise PermissionDenied(
                f"{field}: {topic} is a system topic; clients may not send to it"
            )
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            raise PermissionDenied(
                f"{field}: {topic[:60]} is a retry or dead-letter topic: only the broker "
                f"writes it (a consumer returns a message with ConsumerSendBack)"
            )
        config = self._topics.get(topic) or await self.auto_create(
            topic, request.default_topic_queue_nums, field
        )
        if not config.writable:
            raise PermissionDenied(f"{field}: topic {topic!r} is not writable (perm {config.perm})")
        return self._choose_queue(config, queue_id)

    async def _send_records(
        self, request: broker_pb2.SendRequest, records: bytes, peer_address: str
    ) -> broker_pb2.SendResponse:
        """The raw path: records the producer encoded, forwarded as one ``bytes``.

        The broker reads each record's header (framing, topic, body size;
        :func:`check_headers`), drops the refused ones with a status of their
        own, and sends the rest untouched; the store verifies CRCs and
        properties and patches offsets (the records are encoded once, by the
        producer).
        """
        topic, queue_id = check_records_request(request, records, self._config)
        queue_id = await self._writable_queue(request, topic, queue_id, "topic")
        batch = RecordBatch(records, request.record_count, topic, queue_id)
        try:
            positions = frame_records(batch.records, batch.count)
        except MalformedBatch as exc:
            return _refused_response(
                batch.count, str(exc), topic, queue_id, self._config.broker_name
            )
        refused, delayed = check_headers(batch, positions, self._config)
        if delayed:  # the broker rewrites topic and queue: the per-message path does
            as_messages = records_as_messages(request, records)
            if as_messages is not None:
                return await self._send_messages(as_messages, peer_address)
        if refused:
            if len(refused) == batch.count:
                return _merge_refused(
                    store_pb2.AppendResponse(),
                    refused,
                    batch.count,
                    topic,
                    queue_id,
                    self._config.broker_name,
                )
            batch = select(batch, positions, (i for i in range(batch.count) if i not in refused))
        response = await self._store.append_records(batch, peer_address)
        if len(response.statuses) != batch.count:
            raise StoreFailed(
                grpc.StatusCode.INTERNAL,
                f"store answered {len(response.statuses)} results for {batch.count} records",
            )
        if refused:
            return _merge_refused(
                response, refused, request.record_count, topic, queue_id, self._config.broker_name
            )
        return to_send_response(response, topic, queue_id, self._config.broker_name)

    async def auto_create(self, topic: str, requested_queue_nums: int, field: str) -> TopicConfig:
        """Create ``topic`` from the template (auto_create_topic_enable, the creation limits)
        and register it; NotFound when that is off or impossible."""
        if not self._config.auto_create_topic_enable:
            raise NotFound(
                f"{field}: topic {topic!r} does not exist (auto_create_topic_enable is off)"
            )
        self._creations.charge(1, field)
        created = self._topics.create_from_template(
            topic, requested_queue_nums or self._config.default_topic_queue_nums
        )
        if created is None:
            raise NotFound(
                f"{field}: topic {topic!r} does not exist and "
                f"{AUTO_CREATE_TEMPLATE_TOPIC} cannot be inherited"
            )
        await self._publisher.publish()
        return created

    def _choose_queue(self, config: TopicConfig, queue_id: int) -> int:
        if config.write_queue_nums <= 0:
            raise PermissionDenied(f"messages[0].topic: topic {config.name!r} has no write queues")
        if queue_id == -1:
            counter = self._round_robin.setdefault(config.name, itertools.count())
            return next(counter) % config.write_queue_nums
        if queue_id >= config.write_queue_nums:
            raise InvalidArgument(
                f"messages[0].queue_id: {queue_id} is not below "
                f"write_queue_nums {config.write_queue_nums} of topic "
                f"{config.name!r}"
            )
        return queue_id


def _refused_response(
    count: int, error: str, topic: str, queue_id: int, broker_name: str
) -> broker_pb2.SendResponse:
    """Every record of a batch refused with one reason (its records cannot be told apart)."""
    return _merge_refused(
        store_pb2.AppendResponse(),
        dict.fromkeys(range(count), error),
        count,
        topic,
        queue_id,
        broker_name,
    )


def _merge_refused(
    stored: store_pb2.AppendResponse,
    refused: dict[int, str],
    count: int,
    topic: str,
    queue_id: int,
    broker_name: str,
) -> broker_pb2.SendResponse:
    """The store's results for the records it got, with the broker's refusals put back in
    their places (MESSAGE_ILLEGAL, nothing stored)."""
    statuses, commitlog_offsets, queue_offsets = [], [], []
    errors: dict[int, str] = {}
    stored_index = 0
    for index in range(count):
        if index in refused:
            statuses.append(message_pb2.MESSAGE_ILLEGAL)
            commitlog_offsets.append(-1)
            queue_offsets.append(-1)
            errors[index] = refused[index]
            continue
        statuses.append(stored.statuses[stored_index])
        commitlog_offsets.append(stored.commitlog_offsets[stored_index])
        queue_offsets.append(stored.queue_offsets[stored_index])
        if stored_index in stored.errors:
            errors[index] = stored.errors[stored_index]
        stored_index += 1
    merged = store_pb2.AppendResponse(
        statuses=statuses,
        commitlog_offsets=commitlog_offsets,
        queue_offsets=queue_offsets,
        store_timestamp_ms=stored.store_timestamp_ms,
        msg_id_prefix=stored.msg_id_prefix,
        errors=errors,
    )
    return to_send_response(merged, topic, queue_id, broker_name)
