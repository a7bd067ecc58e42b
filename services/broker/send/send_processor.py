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

import asyncio
import itertools
from collections.abc import Iterator

import grpc

from boltmq.kernel import telemetry
from boltmq.kernel.errors import ServiceError
from boltmq.v1 import broker_pb2, store_pb2
from boltmq.wire.record import SYS_FLAG_TRANSACTION_MASK
from boltmq.wire.record_batch import RECORDS_MAX, RecordBatch
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
from services.broker.metrics import BrokerMetrics, SentSection
from services.broker.send.batch_check import (
    check_batch,
    check_raw_fields,
    check_records_request,
)
from services.broker.send.checked_batch import (
    CheckedBatch,
    answer,
    answer_share,
    checked_batch,
    checked_batches,
    storable,
)
from services.broker.send.send_sections import (
    check_creations,
    check_sections,
    section_failure,
    send_sections,
    send_sections_alone,
)
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
            return await self._send_sections(request, peer_address)
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
        telemetry.annotate(response.topic, response.queue_id, len(response.statuses), size)
        sent = sent_counts(response, size)
        if sent is not None:
            self._metrics.sent(*sent)
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
        known = self._known_queue(topic, queue_id, field)
        if known is not None:
            return known
        config = await self.auto_create(topic, request.default_topic_queue_nums, field)
        return self._writable(config, queue_id, field)

    def _known_queue(self, topic: str, queue_id: int, field: str) -> int | None:
        """The queue a batch of an existing topic goes to; None when the topic does not
        exist (yet). PermissionDenied for a topic clients may not write."""
        if topic in BROKER_TOPICS:
            raise PermissionDenied(
                f"{field}: {topic} is a system topic; clients may not send to it"
            )
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            raise PermissionDenied(
                f"{field}: {topic[:60]} is a retry or dead-letter topic: only the broker "
                f"writes it (a consumer returns a message with ConsumerSendBack)"
            )
        config = self._topics.get(topic)
        return None if config is None else self._writable(config, queue_id, field)

    def _writable(self, config: TopicConfig, queue_id: int, field: str) -> int:
        if not config.writable:
            raise PermissionDenied(
                f"{field}: topic {config.name!r} is not writable (perm {config.perm})"
            )
        return self._choose_queue(config, queue_id)

    async def _send_records(
        self, request: broker_pb2.SendRequest, records: bytes, peer_address: str
    ) -> broker_pb2.SendResponse:
        """The raw path: records the producer encoded, forwarded as one ``bytes``.

        The broker reads each record's header (framing, topic, body size;
        :mod:`services.broker.send.checked_batch`), drops the refused ones with a
        status of their own, and sends the rest untouched; the store verifies CRCs
        and properties and patches offsets (the records are encoded once, by the
        producer).
        """
        topic, queue_id = check_records_request(request, records, self._config)
        queue_id = await self._writable_queue(request, topic, queue_id, "topic")
        checked = checked_batch(records, request.record_count, topic, queue_id, self._config)
        if isinstance(checked, broker_pb2.SendResponse):
            return checked
        if checked.delayed:  # the broker rewrites topic and queue: the per-message path does
            as_messages = records_as_messages(request, records)
            if as_messages is not None:
                return await self._send_messages(as_messages, peer_address)
        broker_name = self._config.broker_name
        batch = storable(checked, broker_name)
        if isinstance(batch, broker_pb2.SendResponse):
            return batch
        response = await self._store.append_records(batch, peer_address)
        return answer(checked, batch, response, broker_name)

    async def _send_sections(
        self, request: broker_pb2.SendRequest, peer_address: str
    ) -> broker_pb2.SendResponse:
        """A checked request of sections: the batches of existing topics checked here in
        one pass and stored together (one Append of runs, which the store appends in one
        call), every other section through the raw path on its own
        (auto-creation, delays, spans when tracing: :mod:`.send_sections`)."""
        if telemetry.tracing_on():  # each section in a span of its own
            return await send_sections(request, peer_address, self._send_raw)
        answers: list[broker_pb2.SectionAnswer | None] = [None] * len(request.sections)
        alone: list[int] = []
        known: list[tuple[int, RecordBatch]] = []
        together: list[tuple[int, CheckedBatch, RecordBatch]] = []
        broker_name = self._config.broker_name
        for index, section in enumerate(request.sections):
            try:
                batch = self._section_batch(section)
            except ServiceError as exc:
                answers[index] = section_failure(index, section.topic, exc)
                continue
            if batch is None:
                alone.append(index)
            else:
                known.append((index, batch))
        checked_all = checked_batches([batch for _, batch in known], self._config)
        for (index, _), checked in zip(known, checked_all, strict=True):
            if checked is None or checked.delayed:  # unframeable, or a delay: alone
                alone.append(index)
                continue
            ready = storable(checked, broker_name)
            if isinstance(ready, broker_pb2.SendResponse):
                answers[index] = self._section_answer(ready, checked)
            else:
                together.append((index, checked, ready))
        storing = self._stored_together([batch for _, _, batch in together], peer_address)
        if alone:
            stored, answered_alone = await asyncio.gather(
                storing, send_sections_alone(request, alone, peer_address, self._send_raw)
            )
        else:  # the usual request: no tasks to make for a gather
            stored, answered_alone = await storing, []
        for index, section_answer in zip(alone, answered_alone, strict=True):
            answers[index] = section_answer
        shares = {
            index: (outcome, start, checked, batch)
            for (index, checked, batch), (outcome, start) in zip(together, stored, strict=True)
        }
        out = broker_pb2.SendResponse()
        sections = out.sections
        sent: list[SentSection] = []  # counted together (no span here to describe them on)
        for index, done in enumerate(answers):
            if done is not None:
                sections.append(done)
                continue
            outcome, start, checked, batch = shares[index]
            if isinstance(outcome, Exception):
                sections.append(section_failure(index, checked.batch.topic, outcome))
                continue
            slot = sections.add()  # answered in place: no copies of it
            try:
                answer_share(slot.response, checked, batch, outcome, start, broker_name)
            except Exception as exc:  # that section alone: INTERNAL for a bug
                slot.CopyFrom(section_failure(index, checked.batch.topic, exc))
                continue
            counts = sent_counts(slot.response, len(checked.batch.records))
            if counts is not None:
                sent.append(counts)
        if sent:
            self._metrics.sent_each(sent)
        return out

    async def _stored_together(
        self, batches: list[RecordBatch], peer_address: str
    ) -> list[tuple[store_pb2.AppendResponse | Exception, int]]:
        """For each batch, the answer of the Append of runs that carried it (or the error
        that call failed with) and where the batch's entries start in it. The batches go in
        order, in as few Appends as the store takes (at most RECORDS_MAX records each)."""
        chunks: list[list[RecordBatch]] = []
        size = RECORDS_MAX
        for batch in batches:
            if size + batch.count > RECORDS_MAX:
                chunks.append([])
                size = 0
            chunks[-1].append(batch)
            size += batch.count
        placed: list[tuple[store_pb2.AppendResponse | Exception, int]] = []
        for chunk in chunks:
            outcome: store_pb2.AppendResponse | Exception
            try:
                outcome = await self._store.append_runs(chunk, peer_address)
            except ServiceError as exc:
                outcome = exc
            start = 0
            for batch in chunk:
                placed.append((outcome, start))
                start += batch.count
        return placed

    def _section_batch(self, section: broker_pb2.SendSection) -> RecordBatch | None:
        """A section's batch, its fields checked as a raw request's would be, for the queue
        the broker picks; None when it goes alone (a topic to auto-create)."""
        records = section.records  # each access copies the bytes: once only
        topic, queue_id = check_raw_fields(section, records, self._config)
        known = self._known_queue(topic, queue_id, "topic")
        if known is None:
            return None
        return RecordBatch(records, section.record_count, topic, known)

    def _section_answer(
        self, response: broker_pb2.SendResponse, checked: CheckedBatch
    ) -> broker_pb2.SectionAnswer:
        """``response`` as the answer of the section ``checked`` came from (its records'
        bytes counted from the batch: ``section.records`` would copy them again)."""
        size = len(checked.batch.records)
        return broker_pb2.SectionAnswer(response=self._observed(response, size))

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


def sent_counts(response: broker_pb2.SendResponse, size: int) -> SentSection | None:
    """What the metrics count of an answered send (``size``: its records' bytes, or its
    request's); None when it stored nothing."""
    offsets = response.queue_offsets
    if not offsets:
        return None
    stored = len(response.statuses) - len(response.errors)
    return (response.topic, response.queue_id, stored, size, offsets[-1] + 1)
