"""Producer: sends messages to the brokers that serve a topic.

- ``send`` picks a writable queue round-robin (or by ``sharding_key``, so one
  key always lands in one queue and stays ordered) and retries a retriable
  failure on the next queue of another broker (tenacity); with none left, once
  that broker's channel has reconnected or failed anew. A group whose send
  failed that way is avoided for ``fault_avoidance_ms`` by later sends
  (:mod:`boltmq.fault_avoidance`). A sharded send retries the queue its first
  attempt chose, never another: when that queue's group has no live master it
  fails (SendError) rather than move the key and reorder it.
- ``send(msg, selector=fn, arg=x)`` lets the application choose the queue
  (RocketMQ's ``MessageQueueSelector``): ``fn(queues, msg, arg)`` gets the
  topic's writable queues, sorted, and returns one of them; the send then stays
  on it, as a sharded one does.
- ``send_batch`` sends one list as one request to one queue.
- Each request goes, by default, as one message on the open SendStream of its
  broker (:mod:`boltmq.send_stream`; ``send_path="unary"``: a SendMessage call
  each); a stream that breaks fails its waiting sends as a failed call would,
  and they are retried the same way (same bytes, same ``UNIQ_KEY``).
- Every message gets its unique id (``UNIQ_KEY``, :mod:`boltmq.unique_id`;
  one it names in its properties is kept) before it is encoded, once, before
  the first attempt: retries send the same bytes, so every copy a retried send
  leaves carries the id, which ``SendResult.unique_id`` shows and
  :meth:`Producer.find_message` looks up.
- Natural batching (``natural_batching``, on by default): while a send's call
  to a broker is in flight, the sends of other threads for that broker and
  topic (and, when sharded, queue) wait and then leave together as one call;
  a send that finds no call in flight leaves at once (no linger). Each keeps
  its own results, errors, retries and fault avoidance, and its own span and
  trace context, made before it joins (:mod:`boltmq.send_batcher`). An
  unsharded send joins whatever queue of that broker its batch goes to, and
  the sends of every topic when the broker takes one request of several
  (:mod:`boltmq.send_request`).
- ``send_async`` and ``send_oneway`` go through an accumulator: messages wait
  up to ``linger_ms`` or until ``batch_size`` of them are queued for a topic
  (both :class:`boltmq.options.ProducerOptions`), and leave as one batch
  (Kafka's linger/batch.size). Callbacks run on the sender thread.
- A topic no registry knows is sent through the brokers that serve the
  auto-create template ``TBW102``; the broker creates it (when enabled). So
  that an auto-created topic reaches every broker group that auto-creates,
  not only the one its first send landed on, the producer keeps adding the
  template's queues of the groups the topic's route still lacks to its
  round-robin until the route has them all (each such send creates the topic
  there and refreshes the route). Sharded sends never get these queues: a
  key's queue must not change under it. A group that refuses the creation is
  dropped from this spreading and the send retried on the route's queues.
- While started, it heartbeats its group to every master it knows
  (:mod:`boltmq.producer_heartbeat`); ``shutdown`` unregisters it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import grpc
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from boltmq.client import (
    DEFAULT_TOPIC,
    BoltMQError,
    BrokerUnavailable,
    ClientInstance,
    is_retryable,
    rpc_error_text,
)
from boltmq.fault_avoidance import FaultAvoidance
from boltmq.kernel import telemetry
from boltmq.kernel.registry_client import TopicNotFound
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import (
    Message,
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
    batch_records,
    check_messages,
    message_unique_ids,
)
from boltmq.message_lookup import find_by_unique_id
from boltmq.options import ProducerOptions
from boltmq.producer_heartbeat import ProducerHeartbeat
from boltmq.request_reply import ReplyCallback, Requester
from boltmq.send_batcher import BatchMismatch, SendBatcher
from boltmq.send_request import (
    SECTIONS_MAX,
    Outcome,
    SendPart,
    outcome_results,
    send_batched,
    send_parts,
)
from boltmq.unique_id import record_unique_ids
from boltmq.v1 import message_pb2
from boltmq.wire.record import java_string_hash

log = logging.getLogger(__name__)

BATCH_MAX_BYTES = 4 * 1024 * 1024
"""Record bytes a natural batch of concurrent sends carries at most (a bigger send goes alone)."""
RETRY_FIRST_WAIT_S = 0.05  # before a send's first retry; doubled for each further one, to 1 s
UNSHARDED_LANES = 2  # natural batches of unsharded sends in flight to one broker at once

SendCallback = Callable[[SendResult | None, BaseException | None], None]
QueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""``selector(queues, msg, arg)``: the queue to send ``msg`` to, one of ``queues`` (the
topic's writable queues, sorted); ``arg`` is what the send was given (RocketMQ's
``MessageQueueSelector.select``)."""
Pin = Callable[[Sequence[MessageQueue]], MessageQueue]
"""Chooses the one queue a sharded or selected send stays on."""


class SendError(BoltMQError):
    """A send the broker refused or that could not reach any broker."""

    def __init__(self, message: str, result: SendResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class _Retry(Exception):
    """A failure worth another attempt on another queue."""


@dataclass(slots=True)
class _Attempts:
    """What the attempts of one send share: the groups tried, a sharded send's queue."""

    tried: set[str] = field(default_factory=set)
    pinned: MessageQueue | None = None
    waited: bool = False  # for the channel of a group already tried to connect again


class Producer:
    """A producer of one producer group (see the module docstring)."""

    def __init__(
        self,
        registry: str | Sequence[str],
        group: str = "DEFAULT_PRODUCER",
        *,
        options: ProducerOptions | None = None,
        tls: ClientTLS | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if not group:
            raise ValueError("producer group must not be empty")
        self.options = options if options is not None else ProducerOptions()
        """How this producer sends (defaults: :class:`ProducerOptions`)."""
        options = self.options
        self.group = group
        self.client = ClientInstance(
            registry,
            route_refresh_ms=options.route_refresh_ms,
            rpc_timeout_s=options.send_timeout_ms / 1000,
            tls=tls,
            credentials=credentials,
            stream_in_flight_max=options.stream_in_flight_max,
        )
        self._send_timeout_s = options.send_timeout_ms / 1000
        self._linger_s = options.linger_ms / 1000
        # A random start: short-lived producers (one CLI send each) still spread out.
        self._counter = itertools.count(random.randrange(1 << 16))
        self._pending: dict[str, list[_Pending]] = {}  # topic -> queued async messages
        self._pending_count = 0
        self._cond = threading.Condition()
        self._sender: threading.Thread | None = None
        self._running = False
        self._requester: Requester | None = None
        self._creating: set[str] = set()
        """Topics this producer's sends auto-create, until every template group has them."""
        self.avoidance = FaultAvoidance(options.fault_avoidance_ms)
        """Broker groups sends skip for a while after a failure there."""
        self._batcher: SendBatcher[SendPart, SendResult] | None = (
            SendBatcher(options.batch_size, BATCH_MAX_BYTES, max_sends=SECTIONS_MAX)
            if options.natural_batching
            else None
        )
        """Groups concurrent sends to one broker (:mod:`boltmq.send_batcher`); None: off."""
        self._heartbeat = ProducerHeartbeat(self.client, group, options.heartbeat_interval_ms)
        """Heartbeats the group to the masters this producer knows while it runs."""

    # ---------------------------------------------------------------- lifecycle
    def start(self, topics: Iterable[str] = ()) -> Producer:
        """Start sending. ``topics``: those this producer sends to, their routes fetched now
        in one registry call (RegistryUnavailable if no registry answers); otherwise each
        topic's first send looks its route up (1,024 topics: ~1 s of lookups spread over the
        first sends). A topic no broker serves is left to its first send to auto-create."""
        self.client.routes(topics)
        self._running = True
        self._sender = threading.Thread(target=self._send_loop, name="boltmq-producer", daemon=True)
        self._sender.start()
        self._heartbeat.start()
        return self

    def shutdown(self) -> None:
        """Send what is pending, then close connections."""
        with self._cond:
            if not self._running:
                return
            self._running = False
            self._cond.notify_all()
        if self._sender is not None:
            self._sender.join()
        self._heartbeat.stop()
        if self._requester is not None:
            self._requester.close()
        self.client.close()

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _check_running(self) -> None:
        if not self._running:
            raise BoltMQError("producer is not started (call start())")

    # ---------------------------------------------------------------- sync sends
    def send(
        self,
        msg: Message,
        sharding_key: str | None = None,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer; SendError if refused.
        ``selector(queues, msg, arg)`` chooses the queue (module docstring)."""
        result = self.send_batch([msg], sharding_key=sharding_key, selector=selector, arg=arg)[0]
        if result.status is SendStatus.SEND_FAILED:
            raise SendError(
                f"send to {msg.topic!r} refused: {result.put_status}: {result.error}", result
            )
        return result

    def send_batch(
        self,
        msgs: Sequence[Message],
        sharding_key: str | None = None,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> list[SendResult]:
        """Send messages of one topic as one request to one queue; one result each
        (``selector`` is given the first message)."""
        self._check_running()
        if not msgs:
            return []
        check_messages(msgs)
        topic = msgs[0].topic
        if len(msgs) > 1 and any(m.topic != topic for m in msgs):
            raise ValueError("every message of a batch must have the same topic")
        pin = _pin(sharding_key, selector, msgs[0], arg)
        born_ms = time.time_ns() // 1_000_000
        with telemetry.producer_span(topic, len(msgs), msgs[0].body) as span:
            context = telemetry.message_context(span)  # {} without tracing
            unique_ids = message_unique_ids(msgs)  # before the first attempt
            records = batch_records(
                msgs, born_ms, context, unique_ids, self.options.compress_body_over
            )
            results = self._send_records(topic, records, len(msgs), pin, unique_ids)
            telemetry.record_send(span, results)
        return results

    def send_records(
        self, topic: str, records: bytes, count: int, sharding_key: str | None = None
    ) -> list[SendResult]:
        """Send ``count`` messages already encoded as CommitLog records, back to back
        (:meth:`Message.record_parts` of each, joined; all of ``topic``), as one request
        to one queue; one result each.

        For connectors that encode straight from their own columns (the Spark sink):
        no Message objects. The broker checks every record as it checks a batch's. The
        records carry no trace context (they were encoded before the send's span).
        Each result's ``unique_id`` is its record's ``UNIQ_KEY`` property (give
        ``unique_id`` to :func:`boltmq.wire.record_batch.send_record_parts`).
        """
        self._check_running()
        if count <= 0 or not records:
            raise ValueError("send_records needs at least one record")
        with telemetry.producer_span(topic, count, None) as span:
            ids = record_unique_ids(records, count)
            results = self._send_records(topic, records, count, _pin(sharding_key, None), ids)
            telemetry.record_send(span, results)
        return results

    def _send_records(
        self, topic: str, records: bytes, count: int, pin: Pin | None, ids: Sequence[str]
    ) -> list[SendResult]:
        """The results of ``count`` records (``ids``: their unique ids), retried as the
        options say."""
        part = SendPart(topic, -1, records, count, ids)  # the queue is picked per attempt
        attempts = _Attempts()
        try:  # the first attempt without tenacity's bookkeeping (most sends need one)
            return self._send_once(part, pin, attempts)
        except _Retry as exc:
            if self.options.retry_times == 0:
                raise SendError(f"send to {topic!r} failed after 1 attempts: {exc}") from None
        time.sleep(RETRY_FIRST_WAIT_S)
        retrying = Retrying(  # then waits of 0.1, 0.2, ... 1 s between the retries
            stop=stop_after_attempt(self.options.retry_times),
            wait=wait_exponential(multiplier=2 * RETRY_FIRST_WAIT_S, max=1.0),
            retry=retry_if_exception(lambda e: isinstance(e, _Retry)),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._send_once(part, pin, attempts)
        except _Retry as exc:
            raise SendError(
                f"send to {topic!r} failed after {self.options.retry_times + 1} attempts: {exc}"
            ) from None
        raise AssertionError("unreachable")

    def _send_once(self, part: SendPart, pin: Pin | None, attempts: _Attempts) -> list[SendResult]:
        topic = part.topic
        queue, address, creating = self._pick(topic, pin, attempts)
        if queue.broker_name in attempts.tried and not attempts.waited:  # no other group left
            attempts.waited = True  # once: a channel that stays down is not waited for again
            self.client.await_broker(address)
        part = SendPart(topic, queue.queue_id, part.records, part.record_count, part.unique_ids)
        stream = self.client.send_stream(address) if self.options.send_path == "stream" else None
        sending = stream.send if stream else self.client.send_encoded(address)

        def call(parts: Sequence[SendPart], timeout_s: float) -> list[Outcome]:
            return send_parts(
                sending, self.group, self.options.default_topic_queue_nums, parts, timeout_s
            )

        deadline = time.monotonic() + self._send_timeout_s
        try:  # a send alone, or in a natural batch
            if self._batcher is None:
                results = outcome_results(call([part], self._send_timeout_s)[0])
            else:
                # An unsharded send joins the broker's batch of its topic (any queue), or of
                # every topic when it takes several (boltmq.send_request), in 2 lanes.
                key: tuple[Any, ...] = (address, topic, queue.queue_id if pin else -1)
                if pin is None and stream is not None and stream.takes_sections:
                    key = (address,)
                lanes = 1 if pin else UNSHARDED_LANES  # a sharded send keeps its queue's order
                results = send_batched(self._batcher, key, part, deadline, call, lanes)
        except grpc.RpcError as exc:
            attempts.tried.add(queue.broker_name)
            if is_retryable(exc):
                self.avoidance.failed(queue.broker_name)
                self.client.forget_route(topic)
                raise _Retry(f"{address}: {rpc_error_text(exc)}") from None
            if creating:  # that group does not create it: the route's groups take the send
                self._creating.discard(topic)
                raise _Retry(f"{address}: {rpc_error_text(exc)}") from None
            raise SendError(f"send to {topic!r} refused: {rpc_error_text(exc)}") from None
        except BatchMismatch as exc:
            raise SendError(f"send to {topic!r}: broker at {address} answered {exc}") from None
        if creating:
            self.client.forget_route(topic)  # the next send sees the group it reached
        failed = [r for r in results if r.status is SendStatus.SEND_FAILED]
        if failed and failed[0].put_status == "SERVICE_NOT_AVAILABLE":
            attempts.tried.add(queue.broker_name)
            self.avoidance.failed(queue.broker_name)
            raise _Retry(f"{address}: {failed[0].error}")
        self.avoidance.succeeded(queue.broker_name)
        return results

    def _pick(
        self, topic: str, pin: Pin | None, attempts: _Attempts
    ) -> tuple[MessageQueue, str, bool]:
        """A queue, its broker's address, and whether the send creates the topic, which
        exists elsewhere, on a group the topic's route lacks (the module docstring)."""
        if not (pin or attempts.tried or self.avoidance.avoiding or topic in self._creating):
            with contextlib.suppress(TopicNotFound):  # the usual case: the route's next queue
                targets = self.client.write_targets(topic)
                if targets:
                    return (*targets[next(self._counter) % len(targets)], False)
        uncreated: set[str] = set()  # groups the existing route lacks, from the template
        found = True
        try:
            queues = self.client.write_queues(topic)
        except TopicNotFound:
            queues = self._template_queues(topic)
            found = False
            self._creating.add(topic)
        else:
            if topic in self._creating and pin is None:
                extra = self._template_queues(topic, {q.broker_name for q in queues})
                if not extra:
                    self._creating.discard(topic)
                uncreated = {q.broker_name for q in extra}
                queues += extra
        if not queues:
            raise SendError(f"no writable queue for topic {topic!r}")
        if pin is not None:
            if attempts.pinned is None:
                attempts.pinned = pin(queues)
            return self._pinned(attempts.pinned, found)
        start = next(self._counter)
        if not attempts.tried and not self.avoidance.avoiding:  # the usual case
            queue = queues[start % len(queues)]
        else:
            candidates = [queues[(start + i) % len(queues)] for i in range(len(queues))]
            fresh = [q for q in candidates if q.broker_name not in attempts.tried]
            queue = self.avoidance.order(fresh or candidates, attrgetter("broker_name"))[0]
        creating = queue.broker_name in uncreated
        # A group that lacks the topic is found through the template's route.
        route_topic = DEFAULT_TOPIC if creating or not found else topic
        try:
            return (
                queue,
                self.client.address_of(
                    MessageQueue(route_topic, queue.broker_name, queue.queue_id)
                ),
                creating,
            )
        except BrokerUnavailable as exc:
            raise _Retry(str(exc)) from None

    def _pinned(self, queue: MessageQueue, found: bool) -> tuple[MessageQueue, str, bool]:
        """A sharded send's queue and address; SendError when its group has no live master
        (moving the key to another group would reorder it)."""
        route_topic = queue.topic if found else DEFAULT_TOPIC
        try:
            address = self.client.address_of(
                MessageQueue(route_topic, queue.broker_name, queue.queue_id)
            )
        except BrokerUnavailable as exc:
            raise SendError(
                f"sharded send to {queue} failed: {exc}; a sharded send stays on its queue "
                "(moving it to another broker group would reorder its key)"
            ) from None
        return queue, address, False

    def _template_queues(self, topic: str, skip: set[str] | None = None) -> list[MessageQueue]:
        """Queues an auto-created ``topic`` will have on the template's brokers (but those
        in ``skip``, which have it already). SendError when no broker auto-creates and
        none has the topic."""
        try:
            route = self.client.route(DEFAULT_TOPIC)
        except TopicNotFound:
            if skip is not None:
                self._creating.discard(topic)
                return []
            raise SendError(f"topic {topic!r} does not exist and no broker auto-creates") from None
        template = self.client.write_queues(DEFAULT_TOPIC, route)
        brokers = sorted({q.broker_name for q in template} - (skip or set()))
        count = self.options.default_topic_queue_nums
        return [MessageQueue(topic, b, q) for b in brokers for q in range(count)]

    def request(self, msg: Message, timeout_ms: int = 3_000) -> ReceivedMessage:
        """Send ``msg`` and wait for the reply a consumer sends with
        :func:`boltmq.reply`; RequestTimeout after ``timeout_ms`` (boltmq.request_reply)."""
        return self._requester_of().request(msg, timeout_ms)

    def request_async(
        self, msg: Message, timeout_ms: int = 3_000, callback: ReplyCallback | None = None
    ) -> Future[ReceivedMessage]:
        """Send ``msg`` as a request without waiting: the future of its reply (RequestTimeout
        after ``timeout_ms``); ``callback(reply, error)`` when it ends (boltmq.request_reply)."""
        return self._requester_of().request_async(msg, timeout_ms, callback)

    def _requester_of(self) -> Requester:
        self._check_running()
        with self._cond:
            if self._requester is None:
                self._requester = Requester(self.client, self.send, self.send_async)
            return self._requester

    def find_message(self, topic: str, unique_id: str) -> list[message_pb2.MessageExt]:
        """Every stored copy of the message of ``topic`` whose unique id (``SendResult.
        unique_id``) is ``unique_id`` (:func:`boltmq.message_lookup.find_by_unique_id`)."""
        return find_by_unique_id(self.client, topic, unique_id)

    # ---------------------------------------------------------------- async sends
    def send_async(self, msg: Message, callback: SendCallback | None = None) -> Future[SendResult]:
        """Queue ``msg`` for the sender thread; ``callback(result, error)`` when done."""
        self._check_running()
        check_messages((msg,))
        context = telemetry.create_context(msg.topic, msg.body)  # {} without tracing
        unique_id = msg.unique_id()
        # encoded (checked) here, once: a retry sends the same bytes, the same id
        record = msg.to_record(
            time.time_ns() // 1_000_000, context, unique_id, self.options.compress_body_over
        )
        future: Future[SendResult] = Future()
        with self._cond:
            while self._pending_count >= self.options.max_pending and self._running:
                self._cond.wait(0.1)  # back-pressure: never buffer without bound
            self._pending.setdefault(msg.topic, []).append((record, unique_id, future, callback))
            self._pending_count += 1
            if self._pending_count == 1 or self._pending_count >= self.options.batch_size:
                self._cond.notify_all()  # the first starts the linger; a full batch ends it
        return future

    def send_oneway(self, msg: Message) -> None:
        """Fire and forget: no result, failures only logged."""
        self.send_async(msg)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued async message has been sent (or failed)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while self._pending_count and time.monotonic() < deadline:
                self._cond.wait(0.01)

    def _send_loop(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._pending:
                    self._cond.wait()  # idle: until the first queued message or shutdown
                if self._running and self._pending_count < self.options.batch_size:
                    self._cond.wait(self._linger_s)  # later messages may join the batch
                if not self._pending:
                    return  # stopped, everything sent
                topic, items = next(iter(self._pending.items()))
                batch, rest = items[: self.options.batch_size], items[self.options.batch_size :]
                if rest:
                    self._pending[topic] = rest
                else:
                    del self._pending[topic]
            self._send_accumulated(topic, batch)
            with self._cond:
                self._pending_count -= len(batch)
                self._cond.notify_all()

    def _send_accumulated(self, topic: str, batch: list[_Pending]) -> None:
        try:
            records, ids = b"".join([r for r, _, _, _ in batch]), [u for _, u, _, _ in batch]
            results = self._send_records(topic, records, len(batch), None, ids)
        except BaseException as exc:  # every waiter must hear how its message ended
            for _, _, future, callback in batch:
                future.set_exception(exc)
                _call(callback, None, exc)
            if not any(cb for _, _, _, cb in batch):
                log.warning("async send to %s failed: %s", topic, exc)
            return
        for (_, _, future, callback), result in zip(batch, results, strict=False):
            future.set_result(result)
            _call(callback, result, None)


_Pending = tuple[bytes, str, "Future[SendResult]", "SendCallback | None"]
"""A queued async message: its encoded record, unique id, future and callback."""


def _pin(
    sharding_key: str | None,
    selector: QueueSelector | None,
    msg: Message | None = None,
    arg: Any = None,
) -> Pin | None:
    """How a send chooses its one queue: by the key's hash, by the application's selector
    (which must return one of the queues it is given), or None (round-robin)."""
    if sharding_key is not None and selector is not None:
        raise ValueError("give a sharding_key or a selector, not both")
    if sharding_key is not None:
        key = sharding_key
        return lambda queues: queues[abs(java_string_hash(key)) % len(queues)]
    if selector is None:
        return None
    if not callable(selector):
        raise ValueError(f"selector must be callable, not {selector!r}")
    assert msg is not None

    def select(queues: Sequence[MessageQueue]) -> MessageQueue:
        ordered = sorted(queues)
        try:
            chosen = selector(ordered, msg, arg)
        except Exception as exc:
            raise SendError(f"queue selector failed: {exc!r}") from exc
        if chosen not in ordered:
            raise SendError(
                f"queue selector returned {chosen!r}, not one of the {len(ordered)} writable "
                f"queues of {msg.topic!r}"
            )
        return chosen

    return select


def _call(
    callback: SendCallback | None, result: SendResult | None, error: BaseException | None
) -> None:
    try:
        if callback is not None:
            callback(result, error)
    except Exception:
        log.exception("send callback failed")
