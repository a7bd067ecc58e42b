"""Receiver: the protocol's consumption calls on BoltMQ's POP consumption.

ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue
map one to one onto :class:`~services.broker.pop.pop_service.PopService` (its in-broker
API): a received message is invisible to the rest of the group for the asked
``invisible_duration`` and comes back with ``delivery_attempt + 1`` unless acked in
time; after the group's ``retry_max_times + 1`` deliveries it goes to ``%DLQ%<group>``.
The POP receipt handle is the protocol's receipt handle.

- **ReceiveMessage** answers the time of delivery (when there are messages: the push
  consumer measures its latency from it), each message, then the receive's Status: OK after
  messages, MESSAGE_NOT_FOUND when the long poll (``long_polling_timeout``, at most the
  broker's ``long_poll_max_ms``) ended with none. It reads every queue of the topic on
  this broker (POP's rule), whichever of them the request names. A TAG filter
  expression is POP's tag filter; SQL filters are ILLEGAL_FILTER_EXPRESSION. FIFO
  delivery (one message group's next message only after the one before was acked)
  applies when the group is orderly (``consume_message_orderly``) or the client's
  Settings ask for it.
- **AckMessage** answers per entry; a receipt handle that is forged, altered or for
  another group or topic, or whose delivery is over (acked, dead-lettered, received
  again after its invisible time), is INVALID_RECEIPT_HANDLE.
- **ChangeInvisibleDuration** answers the new receipt handle (the old one is stale).
- **ForwardMessageToDeadLetterQueue** moves the delivery to ``%DLQ%<group>`` now.

Rights with the ACL on: SUB on the group and on the topic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from google.protobuf import duration_pb2, timestamp_pb2

from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2 as service
from boltmq.v1 import message_pb2
from boltmq.wire.body_compression import CorruptBody, inflate_body
from boltmq.wire.record import SYS_FLAG_COMPRESSED
from boltmq.wire.topic import is_group
from services.broker.access.caller import Caller
from services.broker.errors import (
    BrokerError,
    ReceiptHandleInvalid,
    ReceiptHandleStale,
)
from services.broker.pop.pop_service import (
    INVISIBLE_MAX_MS,
    INVISIBLE_MIN_MS,
    WAIT_MAX_MS,
    PoppedMessage,
    PopService,
)
from services.broker.rocketmq_v2.credentials import may_consume_as, may_subscribe, require
from services.broker.rocketmq_v2.message_mapping import to_protocol, topic_of
from services.broker.rocketmq_v2.status import OK, Refused, code_of_grpc, status

DEFAULT_INVISIBLE_MS = 30_000
"""A receive that names no invisible duration (RocketMQ's default)."""
DEFAULT_LONG_POLLING_MS = 20_000


def _ms(duration: duration_pb2.Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def group_of(resource: v2.Resource, field: str = "group") -> str:
    """The consumer group a resource names; ILLEGAL_CONSUMER_GROUP otherwise."""
    if resource.resource_namespace:
        raise Refused(
            v2.BAD_REQUEST, f"{field}.resource_namespace: BoltMQ has no namespaces; leave it empty"
        )
    if not is_group(resource.name):
        raise Refused(
            v2.ILLEGAL_CONSUMER_GROUP,
            f"{field}.name {resource.name[:60]!r}: 1..255 letters, digits, '%', '|', '_', '-'",
        )
    return resource.name


def _handle_refusal(exc: BrokerError, what: str) -> Refused:
    if isinstance(exc, (ReceiptHandleInvalid, ReceiptHandleStale)):
        return Refused(v2.INVALID_RECEIPT_HANDLE, f"{what}: {exc}")
    return Refused(code_of_grpc(exc.code), f"{what}: {exc}")


class Receiver:
    """The consumption calls over POP."""

    def __init__(self, pop: PopService, fifo_asked: Callable[[str], bool]) -> None:
        self._pop = pop
        self._fifo_asked = fifo_asked
        """Whether a client's Settings asked for FIFO delivery (by client id)."""

    async def receive(
        self, request: service.ReceiveMessageRequest, caller: Caller | None, client_id: str
    ) -> AsyncIterator[service.ReceiveMessageResponse]:
        """The messages, then the Status; Refused before any message is read."""
        group = group_of(request.group)
        topic = topic_of(request.message_queue.topic, "message_queue.topic")
        require(caller, may_consume_as(group), may_subscribe(topic))
        expression = self._expression(request.filter_expression)
        invisible_ms = (
            _ms(request.invisible_duration)
            if request.HasField("invisible_duration")
            else DEFAULT_INVISIBLE_MS
        )
        if not INVISIBLE_MIN_MS <= invisible_ms <= INVISIBLE_MAX_MS:
            raise Refused(
                v2.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration: {invisible_ms} ms, not within "
                f"{INVISIBLE_MIN_MS}..{INVISIBLE_MAX_MS}",
            )
        wait_ms = (
            _ms(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else DEFAULT_LONG_POLLING_MS
        )
        if not 0 <= wait_ms <= WAIT_MAX_MS:
            raise Refused(
                v2.ILLEGAL_POLLING_TIME,
                f"long_polling_timeout: {wait_ms} ms, not within 0..{WAIT_MAX_MS}",
            )
        if not 1 <= request.batch_size <= 32:
            raise Refused(v2.BAD_REQUEST, f"batch_size: {request.batch_size}, not within 1..32")
        try:
            popped = await self._pop.receive(
                group,
                topic,
                expression,
                request.batch_size,
                invisible_ms,
                wait_ms,
                self._fifo_asked(client_id),
            )
        except BrokerError as exc:
            code = code_of_grpc(exc.code)
            raise Refused(
                v2.TOPIC_NOT_FOUND if code == v2.NOT_FOUND and "topic" in str(exc) else code,
                str(exc),
            ) from None
        if popped:  # when the broker handed them over (the clients' delivery latency)
            now = timestamp_pb2.Timestamp()
            now.GetCurrentTime()
            yield service.ReceiveMessageResponse(delivery_timestamp=now)
        for message in popped:
            yield service.ReceiveMessageResponse(message=_delivered(message, invisible_ms))
        yield service.ReceiveMessageResponse(
            status=OK
            if popped
            else status(v2.MESSAGE_NOT_FOUND, "no message to deliver within the long poll")
        )

    @staticmethod
    def _expression(expression: v2.FilterExpression) -> str:
        if expression.type == v2.SQL:
            raise Refused(
                v2.ILLEGAL_FILTER_EXPRESSION,
                "filter_expression: SQL filters are not served through this protocol; "
                "use a TAG expression",
            )
        return expression.expression or "*"

    async def ack(
        self, request: service.AckMessageRequest, caller: Caller | None
    ) -> service.AckMessageResponse:
        group = group_of(request.group)
        topic = topic_of(request.topic, "topic")
        require(caller, may_consume_as(group), may_subscribe(topic))
        if not request.entries:
            raise Refused(v2.BAD_REQUEST, "entries: at least one entry is required")
        results = []
        for index, entry in enumerate(request.entries):
            try:
                await self._pop.ack(group, topic, entry.receipt_handle)
                outcome = OK
            except BrokerError as exc:
                outcome = _handle_refusal(exc, f"entries[{index}].receipt_handle").status()
            results.append(
                service.AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=outcome,
                )
            )
        if len(results) == 1:
            overall = results[0].status
        elif all(r.status.code == v2.OK for r in results):
            overall = OK
        else:
            overall = status(v2.MULTIPLE_RESULTS, "some entries were not acked: see entries")
        return service.AckMessageResponse(status=overall, entries=results)

    async def change_invisible(
        self, request: service.ChangeInvisibleDurationRequest, caller: Caller | None
    ) -> service.ChangeInvisibleDurationResponse:
        group = group_of(request.group)
        topic = topic_of(request.topic, "topic")
        require(caller, may_consume_as(group), may_subscribe(topic))
        invisible_ms = _ms(request.invisible_duration)
        if not INVISIBLE_MIN_MS <= invisible_ms <= INVISIBLE_MAX_MS:
            raise Refused(
                v2.ILLEGAL_INVISIBLE_TIME,
                f"invisible_duration: {invisible_ms} ms, not within "
                f"{INVISIBLE_MIN_MS}..{INVISIBLE_MAX_MS}",
            )
        try:
            handle = await self._pop.change_invisible(
                group, topic, request.receipt_handle, invisible_ms
            )
        except BrokerError as exc:
            raise _handle_refusal(exc, "receipt_handle") from None
        return service.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    async def forward_to_dead_letter(
        self, request: service.ForwardMessageToDeadLetterQueueRequest, caller: Caller | None
    ) -> service.ForwardMessageToDeadLetterQueueResponse:
        group = group_of(request.group)
        topic = topic_of(request.topic, "topic")
        require(caller, may_consume_as(group), may_subscribe(topic))
        try:
            await self._pop.forward_to_dead_letter(group, topic, request.receipt_handle)
        except BrokerError as exc:
            raise _handle_refusal(exc, "receipt_handle") from None
        return service.ForwardMessageToDeadLetterQueueResponse(status=OK)


def _delivered(popped: PoppedMessage, invisible_ms: int) -> v2.Message:
    """The protocol's message of a delivery (a body BoltMQ stored compressed, inflated)."""
    ext = popped.message
    if ext.sys_flag & SYS_FLAG_COMPRESSED:
        inflated = message_pb2.MessageExt()
        inflated.CopyFrom(ext)
        try:
            inflated.body = bytes(inflate_body(ext.body, ext.sys_flag))
            ext = inflated
        except CorruptBody:
            pass  # delivered as stored: the client's digest check flags it
    return to_protocol(
        ext,
        delivery_attempt=popped.delivery_attempt,
        receipt_handle=popped.receipt_handle,
        invisible_ms=invisible_ms,
    )
