"""SimpleConsumer: POP consumption; the broker keeps the group's progress.

A simple consumer names its topics (:meth:`SimpleConsumer.subscribe`, with a tag
expression each), then asks for messages (:meth:`SimpleConsumer.receive`). Each message it
gets is invisible to the group for ``invisible_ms``; :meth:`SimpleConsumer.ack` ends it,
:meth:`SimpleConsumer.change_invisible_duration` gives it more (or less) time. A message
not acked in time is received again, by this consumer or another of the group, with
``delivery_attempt`` one higher; after the group's ``retry_max_times + 1`` deliveries it
goes to the group's dead-letter queue (:meth:`SimpleConsumer.forward_to_dead_letter` sends
it there at once). There are no queues to balance and no offsets to commit: any number
of consumers of a group receive side by side (docs/pop.md).

A receive asks every broker group serving the subscribed topics (the routes merge them):
first each without waiting, in turn from one further each call, until it has
``max_messages``; when none had anything and ``wait_ms`` > 0, all at once, each waiting
up to ``wait_ms``, and the first answer with messages ends the others' waits. (A message a
broker took for a wait in the instant it was cancelled comes back after its invisible
time, as any unacked message does.)

An ack or change goes to the master of the broker group the message came from
(``message.queue.broker_name``). A handle whose delivery is over (acked already, or
received again after its invisible time) raises :class:`StaleReceiptHandle`; every other
failure :class:`SimpleConsumerError` with the broker's status.
"""

from __future__ import annotations

import itertools
import queue as queue_module
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from boltmq.client import PERM_READ, BoltMQError, ClientInstance, rpc_error_text
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import MessageQueue
from boltmq.v1 import broker_pb2
from boltmq.wire.body_compression import inflate_body
from boltmq.wire.record import PROPERTY_UNIQ_KEY

RECEIVE_MAX_MESSAGES = 32
"""Messages one receive returns at most (the broker's limit)."""
DEFAULT_INVISIBLE_MS = 30_000
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
"""The FIFO message group of a message (RocketMQ's property; see docs/pop.md)."""


class SimpleConsumerError(BoltMQError):
    """A receive, ack or change the broker refused, or could not be reached for."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


class StaleReceiptHandle(SimpleConsumerError):
    """The delivery a handle names is over: the message was acked or dead-lettered, or
    its invisible time ran out and it was received again (a newer handle holds it)."""


@dataclass
class SimpleMessage:
    """A message received by POP: its fields, and the handle that acks it."""

    topic: str
    body: bytes
    tags: str | None
    keys: list[str]
    properties: Mapping[str, str]
    msg_id: str
    """The offset id of the stored copy."""
    unique_id: str | None
    """The producer's id (``UNIQ_KEY``)."""
    queue: MessageQueue
    queue_offset: int
    born_timestamp_ms: int
    store_timestamp_ms: int
    delivery_attempt: int
    """1 on the first delivery."""
    receipt_handle: str
    """Names this delivery; :meth:`SimpleConsumer.change_invisible_duration` replaces it."""
    invisible_until_ms: int
    """Received again after this time (ms since the epoch) unless acked."""
    message_group: str | None = field(default=None)
    """The FIFO message group, when the message has one."""


def _message(broker_name: str, received: broker_pb2.ReceivedMessage) -> SimpleMessage:
    m = received.message
    properties = dict(m.properties)
    return SimpleMessage(
        topic=m.topic,
        body=bytes(inflate_body(m.body, m.sys_flag)),
        tags=m.tags or None,
        keys=list(m.keys),
        properties=properties,
        msg_id=m.msg_id,
        unique_id=properties.get(PROPERTY_UNIQ_KEY),
        queue=MessageQueue(m.topic, broker_name, m.queue_id),
        queue_offset=m.queue_offset,
        born_timestamp_ms=m.born_timestamp_ms,
        store_timestamp_ms=m.store_timestamp_ms,
        delivery_attempt=received.delivery_attempt,
        receipt_handle=received.receipt_handle,
        invisible_until_ms=received.invisible_until_ms,
        message_group=properties.get(PROPERTY_MESSAGE_GROUP) or None,
    )


class SimpleConsumer:
    """A POP consumer of one group (see the module docstring)."""

    def __init__(
        self,
        registry: str | Sequence[str],
        group: str,
        *,
        subscriptions: Mapping[str, str] | None = None,
        rpc_timeout_ms: int = 5_000,
        tls: ClientTLS | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if not group:
            raise ValueError("consumer group must not be empty")
        self.group = group
        self.client = ClientInstance(
            registry, rpc_timeout_s=rpc_timeout_ms / 1000, tls=tls, credentials=credentials
        )
        self._subscriptions: dict[str, str] = dict(subscriptions or {})
        self._turn = itertools.count()

    @property
    def subscriptions(self) -> dict[str, str]:
        """Tag expression by topic."""
        return dict(self._subscriptions)

    def subscribe(self, topic: str, tag_expression: str = "*") -> None:
        """Receive ``topic``'s messages whose tag matches (``*``, or ``tagA || tagB``)."""
        if not topic:
            raise ValueError("topic must not be empty")
        self._subscriptions[topic] = tag_expression

    def unsubscribe(self, topic: str) -> None:
        self._subscriptions.pop(topic, None)

    def receive(
        self,
        max_messages: int = 16,
        invisible_ms: int = DEFAULT_INVISIBLE_MS,
        wait_ms: int = 0,
    ) -> list[SimpleMessage]:
        """Up to ``max_messages`` messages of the subscribed topics, each invisible to the
        group for ``invisible_ms``; with ``wait_ms``, waits that long for one when none is
        there (module docstring)."""
        if not self._subscriptions:
            raise ValueError("subscribe to a topic before receiving")
        if not 0 < max_messages <= RECEIVE_MAX_MESSAGES or invisible_ms <= 0 or wait_ms < 0:
            raise ValueError(
                f"max_messages 1..{RECEIVE_MAX_MESSAGES}, invisible_ms > 0 and wait_ms >= 0 "
                "are required"
            )
        targets = self._targets()
        if not targets:
            raise SimpleConsumerError(
                f"no live master serves any of {sorted(self._subscriptions)}",
                grpc.StatusCode.UNAVAILABLE,
            )
        start = next(self._turn) % len(targets)
        targets = targets[start:] + targets[:start]
        received: list[SimpleMessage] = []
        failures: list[SimpleConsumerError] = []
        for topic, broker_name, address in targets:
            want = max_messages - len(received)
            try:
                received += self._receive_at(topic, broker_name, address, want, invisible_ms)
            except SimpleConsumerError as exc:  # another broker group may still answer
                failures.append(exc)
                continue
            if len(received) >= max_messages:
                return received
        if len(failures) == len(targets):
            raise failures[0]
        if received or not wait_ms:
            return received
        return self._wait_any(targets, max_messages, invisible_ms, wait_ms)

    def ack(self, message: SimpleMessage) -> None:
        """The message is done: never delivered to the group again."""
        request = broker_pb2.AckMessageRequest(
            group=self.group, topic=message.topic, receipt_handle=message.receipt_handle
        )
        self._call(message, "AckMessage", request)

    def change_invisible_duration(self, message: SimpleMessage, invisible_ms: int) -> None:
        """The message stays invisible for ``invisible_ms`` from now; its receipt handle is
        replaced by the new one (the old one is stale from here on)."""
        if invisible_ms <= 0:
            raise ValueError("invisible_ms must be > 0")
        request = broker_pb2.ChangeInvisibleDurationRequest(
            group=self.group,
            topic=message.topic,
            receipt_handle=message.receipt_handle,
            invisible_ms=invisible_ms,
        )
        response = self._call(message, "ChangeInvisibleDuration", request)
        message.receipt_handle = response.receipt_handle
        message.invisible_until_ms = response.invisible_until_ms

    def forward_to_dead_letter(self, message: SimpleMessage) -> None:
        """Give up on the message: it goes to the group's dead-letter queue now."""
        request = broker_pb2.ForwardToDeadLetterRequest(
            group=self.group, topic=message.topic, receipt_handle=message.receipt_handle
        )
        self._call(message, "ForwardToDeadLetter", request)

    # ------------------------------------------------------------------ internals
    def _targets(self) -> list[tuple[str, str, str]]:
        """``(topic, broker_name, master address)`` of every readable broker group of the
        subscribed topics, sorted."""
        targets = []
        for topic in sorted(self._subscriptions):
            route = self.client.route(topic)
            for data in route.queues:
                address = self.client.broker_address(route, data.broker_name)
                if data.perm & PERM_READ and data.read_queue_nums > 0 and address:
                    targets.append((topic, data.broker_name, address))
        return sorted(set(targets))

    def _request(
        self, topic: str, max_messages: int, invisible_ms: int, wait_ms: int
    ) -> broker_pb2.ReceiveMessagesRequest:
        return broker_pb2.ReceiveMessagesRequest(
            group=self.group,
            topic=topic,
            subscription=self._subscriptions.get(topic, "*"),
            max_messages=max_messages,
            invisible_ms=invisible_ms,
            wait_ms=wait_ms,
        )

    def _receive_at(
        self,
        topic: str,
        broker_name: str,
        address: str,
        max_messages: int,
        invisible_ms: int,
    ) -> list[SimpleMessage]:
        request = self._request(topic, max_messages, invisible_ms, 0)
        try:
            response = self.client.broker(address).ReceiveMessages(
                request, timeout=self.client.rpc_timeout_s
            )
        except grpc.RpcError as exc:
            raise _failed(f"receive {topic} at {broker_name}", exc) from None
        return [_message(broker_name, m) for m in response.messages]

    def _wait_any(
        self,
        targets: list[tuple[str, str, str]],
        max_messages: int,
        invisible_ms: int,
        wait_ms: int,
    ) -> list[SimpleMessage]:
        """Every target at once, each waiting up to ``wait_ms``; the first answer with
        messages cancels the others."""
        done: queue_module.Queue[tuple[str, grpc.Future]] = queue_module.Queue()
        calls: list[grpc.Future] = []
        for topic, broker_name, address in targets:
            request = self._request(topic, max_messages, invisible_ms, wait_ms)
            call = self.client.broker(address).ReceiveMessages.future(
                request, timeout=self.client.rpc_timeout_s + wait_ms / 1000
            )
            call.add_done_callback(lambda c, name=broker_name: done.put((name, c)))
            calls.append(call)
        received: list[SimpleMessage] = []
        failure: SimpleConsumerError | None = None
        try:
            for _ in calls:
                broker_name, call = done.get()
                if call.cancelled():
                    continue
                try:
                    response = call.result()
                except grpc.RpcError as exc:
                    failure = failure or _failed(f"receive at {broker_name}", exc)
                    continue
                received += [_message(broker_name, m) for m in response.messages]
                if received:
                    break
        finally:
            for call in calls:
                call.cancel()
        if not received and failure is not None:
            raise failure
        return received

    def _call(self, message: SimpleMessage, method: str, request: object) -> Any:
        try:
            stub = self.client.broker(self.client.address_of(message.queue))
            return getattr(stub, method)(request, timeout=self.client.rpc_timeout_s)
        except grpc.RpcError as exc:
            raise _failed(f"{method} of {message.msg_id}", exc) from None

    def shutdown(self) -> None:
        self.client.close()

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _failed(what: str, exc: grpc.RpcError) -> SimpleConsumerError:
    code = exc.code() if hasattr(exc, "code") else None
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    stale = code == grpc.StatusCode.FAILED_PRECONDITION and details.startswith("receipt_handle")
    text = f"{what} failed: {rpc_error_text(exc)}"
    return (StaleReceiptHandle if stale else SimpleConsumerError)(text, code)
