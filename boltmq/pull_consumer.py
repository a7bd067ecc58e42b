"""PullConsumer: explicit queues, offsets and commits.

The caller chooses queues (:meth:`PullConsumer.queues`), pulls from an offset
(optionally long-polling up to ``wait_ms``) and commits what it has processed.
Messages arrive as raw CommitLog records and are decoded here, so a pull of
many messages costs one gRPC call and one decode per record.

:meth:`PullConsumer.offset_for_time` answers where a queue's messages of a time
begin (RocketMQ's searchOffset): the first offset stored at or after
``timestamp_ms``, asked of the master of the queue's broker group (SearchOffset).
A pull of a queue an operator reset for the group (``boltmq admin group
reset-offset``) answers ``PullStatus.OFFSET_RESET``, no messages, and the reset
offset as ``next_begin_offset``, until the group pulls from there.
"""

from __future__ import annotations

import enum
import math
import queue as queue_module
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from boltmq.client import BoltMQError, ClientInstance, rpc_error_text
from boltmq.kernel import telemetry
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import MessageQueue, ReceivedMessage
from boltmq.message_selector import Selection, on_the_wire
from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.pull_answer import PULL_QUEUES_MAX, split_records
from boltmq.wire.pulled_records import decode_pulled

PULL_MAX_MESSAGES = 32
"""Default messages per pull (RocketMQ's pullBatchSize)."""


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"
    OFFSET_RESET = "OFFSET_RESET"
    """The group's offset of the queue was reset: go on from ``next_begin_offset``."""


_STATUS = {
    message_pb2.FOUND: PullStatus.FOUND,
    message_pb2.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,
    message_pb2.OFFSET_FOUND_NULL: PullStatus.NO_MATCHED_MSG,
    message_pb2.MESSAGE_WAS_REMOVING: PullStatus.NO_MATCHED_MSG,
    message_pb2.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,
    message_pb2.NO_MESSAGE_IN_QUEUE: PullStatus.NO_NEW_MSG,
    message_pb2.NO_MATCHED_LOGIC_QUEUE: PullStatus.NO_NEW_MSG,
    message_pb2.OFFSET_OVERFLOW_BADLY: PullStatus.OFFSET_ILLEGAL,
    message_pb2.OFFSET_TOO_SMALL: PullStatus.OFFSET_ILLEGAL,
    message_pb2.OFFSET_RESET: PullStatus.OFFSET_RESET,
}


class PullError(BoltMQError):
    """A pull the broker refused (unknown topic, no permission) or could not answer."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class PullResult:
    """Messages from one pull and where the next pull starts."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[ReceivedMessage] = field(default_factory=list)


def decode_records(data: bytes | memoryview) -> list[ReceivedMessage]:
    """Decode records laid back to back (a pull's ``records``); CorruptRecord if damaged.
    A compressed body is inflated when first read (:func:`boltmq.wire.body_compression.
    inflating`): one that does not inflate raises CorruptBody there, for that message."""
    return decode_pulled(data, check_crc=True, inflate=True)


def pull_queue(
    client: ClientInstance,
    group: str,
    queue: MessageQueue,
    offset: int,
    *,
    max_messages: int,
    subscription: Selection,
    wait_ms: int,
    commit_offset: int = -1,
    max_bytes: int = 0,
    timeout_s: float | None = None,
    track: Callable[[grpc.Future | None], None] | None = None,
) -> PullResult:
    """One PullMessage call to the queue's broker (shared by both consumers).

    ``max_bytes`` bounds the records' bytes (0: the store's default, 256 KiB).
    ``track`` receives the in-flight call (and None when it is over) so a
    consumer shutting down can cancel a parked long poll at once.
    """
    expression, expression_type = on_the_wire(subscription)
    request = broker_pb2.BrokerPullRequest(
        consumer_group=group,
        topic=queue.topic,
        queue_id=queue.queue_id,
        queue_offset=offset,
        max_messages=max_messages,
        max_bytes=max_bytes,
        subscription=expression,
        expression_type=expression_type,
        suspend_timeout_ms=wait_ms,
        raw_records=True,
    )
    if commit_offset >= 0:
        request.commit_offset = commit_offset
    deadline = timeout_s if timeout_s is not None else client.rpc_timeout_s + wait_ms / 1000
    address = client.read_address_of(queue)
    try:
        call = client.pull_encoded(address).future(request, timeout=deadline)
        if track is not None:
            track(call)
        try:
            encoded = call.result()
        finally:
            if track is not None:
                track(None)
    except grpc.FutureCancelledError:
        raise PullError(f"pull {queue} cancelled", grpc.StatusCode.CANCELLED) from None
    except grpc.RpcError as exc:
        raise _failed(client, [queue], f"pull {queue}", exc) from None
    try:
        response, records = split_records(encoded)
    except DecodeError as exc:
        raise PullError(
            f"pull {queue}: the broker's answer is not a PullResponse: {exc}",
            grpc.StatusCode.INTERNAL,
        ) from None
    if response.suggest_broker_id:  # far behind: the master asks us to read elsewhere
        client.read_from_replica(queue.broker_name)
    return _result(response, records)


def pull_queues(
    client: ClientInstance,
    group: str,
    offsets: Mapping[MessageQueue, int],
    *,
    max_messages: int,
    subscriptions: Mapping[str, Selection],
    wait_ms: int,
    max_bytes: int = 0,
    track: Callable[[list[grpc.Future] | None], None] | None = None,
    failures: dict[MessageQueue, Exception] | None = None,
) -> dict[MessageQueue, PullResult]:
    """PullQueues calls, one per broker (and per PULL_QUEUES_MAX queues), all in flight at once.

    A result for every queue a broker answered; the queues a call's ``max_bytes``
    left out are absent. With ``wait_ms``, the first call answering messages
    ends the wait: the calls still parked are cancelled and their queues are
    absent too (else one idle broker would hold back another's messages until
    its long poll ran out). ``subscriptions`` maps each topic to its expression
    (a topic missing from it: ``*``). A failed call raises PullError, or, when
    ``failures`` is given, puts the error there under each of its queues and
    the other calls' results are still returned. ``track`` receives the calls
    in flight (and None when they are over), as in :func:`pull_queue`; a
    cancelled call raises PullError (CANCELLED).
    """
    wire = {topic: on_the_wire(selection) for topic, selection in subscriptions.items()}
    calls: dict[str, list[MessageQueue]] = {}
    # Asked once per broker, not per queue or topic: a broker's address (master, or a
    # replica while it is skipped) is the same in every topic's route.
    addresses: dict[str, str] = {}
    for queue in offsets:
        broker = queue.broker_name
        address = addresses.get(broker)
        if address is None:
            address = addresses[broker] = client.read_address_of(queue)
        calls.setdefault(address, []).append(queue)
    pending = []
    for address, queues in calls.items():
        size = math.ceil(len(queues) / math.ceil(len(queues) / PULL_QUEUES_MAX))  # equal calls
        for start in range(0, len(queues), size):
            chunk = queues[start : start + size]
            request = broker_pb2.BrokerPullQueuesRequest(
                consumer_group=group,
                max_messages=max_messages,
                max_bytes=max_bytes,
                suspend_timeout_ms=wait_ms,
                pulls=[
                    broker_pb2.QueuePull(
                        topic=q.topic,
                        queue_id=q.queue_id,
                        queue_offset=offsets[q],
                        subscription=wire.get(q.topic, ("*", ""))[0],
                        expression_type=wire.get(q.topic, ("*", ""))[1],
                    )
                    for q in chunk
                ],
            )
            pending.append(
                (
                    chunk,
                    client.pull_queues_encoded(address).future(
                        request, timeout=client.rpc_timeout_s + wait_ms / 1000
                    ),
                )
            )
    if track is not None:
        track([call for _, call in pending])
    finished: queue_module.SimpleQueue[tuple[list[MessageQueue], grpc.Future]] = (
        queue_module.SimpleQueue()
    )
    for chunk, call in pending:
        call.add_done_callback(lambda done, chunk=chunk: finished.put((chunk, done)))

    def cancel_all() -> None:
        for _, other in pending:
            other.cancel()

    try:
        results: dict[MessageQueue, PullResult] = {}
        withdrawn = False  # the parked calls were cancelled here: messages came
        for _ in pending:
            chunk, call = finished.get()
            try:
                answered = _queues_answer(client, chunk, call)
            except PullError as exc:
                if withdrawn and exc.code is grpc.StatusCode.CANCELLED:
                    continue
                if failures is None or exc.code is grpc.StatusCode.CANCELLED:
                    cancel_all()
                    raise
                failures.update(dict.fromkeys(chunk, exc))
                continue
            results.update(answered)
            if wait_ms and not withdrawn and any(r.messages for r in answered.values()):
                withdrawn = True
                cancel_all()
        return results
    finally:
        if track is not None:
            track(None)


def _queues_answer(
    client: ClientInstance, chunk: list[MessageQueue], call: grpc.Future
) -> dict[MessageQueue, PullResult]:
    """The results of one PullQueues call (PullError if it failed or was cancelled)."""
    what = f"pull of {len(chunk)} queues from {chunk[0]} on"
    try:
        encoded = call.result()
    except grpc.FutureCancelledError:
        raise PullError(f"{what} cancelled", grpc.StatusCode.CANCELLED) from None
    except grpc.RpcError as exc:
        raise _failed(client, chunk, what, exc) from None
    try:  # protobuf parses many small answers faster than split_records (pull_wire)
        answer = store_pb2.PullQueuesResponse.FromString(encoded)
    except DecodeError as exc:
        raise PullError(
            f"{what}: the broker's answer is not a PullQueuesResponse: {exc}",
            grpc.StatusCode.INTERNAL,
        ) from None
    if answer.suggest_broker_id:  # one queue far behind: read the group elsewhere
        for broker_name in {queue.broker_name for queue in chunk}:
            client.read_from_replica(broker_name)
    return {
        queue: _result(response, response.records)  # fewer answers: the budget ran out
        for queue, response in zip(chunk, answer.answers, strict=False)
    }


def _failed(
    client: ClientInstance, queues: Sequence[MessageQueue], what: str, exc: grpc.RpcError
) -> PullError:
    """The error for a pull call that failed; a broker that did not answer is
    skipped for a while, for reads from a replica."""
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        # The broker, or the store behind it, is down: a replica serves reads.
        for queue in queues:
            client.forget_route(queue.topic)
            client.read_from_replica(queue.broker_name)
    return PullError(f"{what} failed: {rpc_error_text(exc)}", exc.code())


def _result(response: store_pb2.PullResponse, records: bytes | memoryview) -> PullResult:
    """A pull's result from its answer and its records (decoded; CorruptRecord if damaged)."""
    messages = decode_records(records) if records else []
    return PullResult(
        _STATUS.get(response.status, PullStatus.NO_MATCHED_MSG),
        response.next_begin_offset,
        response.min_offset,
        response.max_offset,
        messages,
    )


def search_offset(client: ClientInstance, queue: MessageQueue, timestamp_ms: int) -> int:
    """The first offset of ``queue`` stored at or after ``timestamp_ms`` (epoch ms), from
    the master of its group: its max offset when nothing is that recent, its min offset
    when everything is. ValueError for a time that is no int >= 0; PullError when the
    broker refuses (unknown topic or queue, no right to consume the topic)."""
    if type(timestamp_ms) is not int or timestamp_ms < 0:
        raise ValueError(f"timestamp_ms must be an int >= 0 (epoch ms), not {timestamp_ms!r}")
    request = broker_pb2.SearchOffsetRequest(
        topic=queue.topic, queue_id=queue.queue_id, timestamp_ms=timestamp_ms
    )
    try:
        response = client.broker(client.address_of(queue)).SearchOffset(
            request, timeout=client.rpc_timeout_s
        )
    except grpc.RpcError as exc:
        raise PullError(
            f"SearchOffset for {queue} failed: {rpc_error_text(exc)}", exc.code()
        ) from None
    return int(response.queue_offset)


class PullConsumer:
    """A consumer that pulls explicitly (see the module docstring)."""

    def __init__(
        self,
        registry: str | Sequence[str],
        group: str,
        *,
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

    def queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic``."""
        return self.client.read_queues(topic)

    def pull(
        self,
        queue: MessageQueue,
        offset: int,
        max_messages: int = PULL_MAX_MESSAGES,
        subscription: Selection = "*",
        wait_ms: int = 0,
    ) -> PullResult:
        """Messages of ``queue`` from ``offset``; with ``wait_ms`` long-poll for new ones."""
        if offset < 0 or max_messages <= 0 or wait_ms < 0:
            raise ValueError("offset >= 0, max_messages > 0 and wait_ms >= 0 are required")
        return pull_queue(
            self.client,
            self.group,
            queue,
            offset,
            max_messages=max_messages,
            subscription=subscription,
            wait_ms=wait_ms,
        )

    def pull_queues(
        self,
        offsets: Mapping[MessageQueue, int],
        max_messages: int = PULL_MAX_MESSAGES,
        subscriptions: Mapping[str, Selection] | None = None,
        wait_ms: int = 0,
        max_bytes: int = 0,
    ) -> dict[MessageQueue, PullResult]:
        """Several queues at once, each from its offset: one call per broker (PullQueues).

        ``max_messages`` applies to each queue, ``max_bytes`` to each call's records
        together (0: the store's default, 4 MiB): the queues past it are absent from
        the result, to be pulled again. With ``wait_ms``, a broker with nothing new
        in any of its queues answers when one of them gets a message or the time
        is up; the first answer with messages ends the wait for all (the queues of
        calls still waiting are absent). ``subscriptions``: tag expression or
        :class:`~boltmq.message_selector.MessageSelector` by topic (default ``*``).
        """
        if not offsets:
            raise ValueError("name at least one queue")
        if (
            any(offset < 0 for offset in offsets.values())
            or max_messages <= 0
            or wait_ms < 0
            or max_bytes < 0
        ):
            raise ValueError(
                "offsets >= 0, max_messages > 0, wait_ms >= 0 and max_bytes >= 0 are required"
            )
        return pull_queues(
            self.client,
            self.group,
            offsets,
            max_messages=max_messages,
            subscriptions=subscriptions or {},
            wait_ms=wait_ms,
            max_bytes=max_bytes,
        )

    def offset_for_time(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The first offset of ``queue`` stored at or after ``timestamp_ms`` (epoch ms):
        pull from it to read the queue's messages of that time on (:func:`search_offset`)."""
        return search_offset(self.client, queue, timestamp_ms)

    def processing(self, messages: Sequence[ReceivedMessage]) -> AbstractContextManager[Any]:
        """``with consumer.processing(result.messages): ...``: the work as a ``process``
        span of the producers' traces (:mod:`boltmq.kernel.telemetry`; nothing without tracing)."""
        return telemetry.process_span(messages, self.group)

    def commit(self, queue: MessageQueue, offset: int) -> None:
        """Record ``offset`` (the next message to consume) for the group."""
        request = broker_pb2.UpdateConsumerOffsetRequest(
            group=self.group, topic=queue.topic, queue_id=queue.queue_id, offset=offset
        )
        self._call(queue, "UpdateConsumerOffset", request)

    def committed(self, queue: MessageQueue) -> int:
        """The group's committed offset of ``queue``; -1 when it has none."""
        request = broker_pb2.QueryConsumerOffsetRequest(
            group=self.group, topic=queue.topic, queue_id=queue.queue_id
        )
        response = self._call(queue, "QueryConsumerOffset", request)
        return response.offset if response.found else -1

    def _call(self, queue: MessageQueue, method: str, request: object) -> Any:
        stub = self.client.broker(self.client.address_of(queue))
        try:
            return getattr(stub, method)(request, timeout=self.client.rpc_timeout_s)
        except grpc.RpcError as exc:
            raise PullError(
                f"{method} for {queue} failed: {rpc_error_text(exc)}", exc.code()
            ) from None

    def shutdown(self) -> None:
        self.client.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
