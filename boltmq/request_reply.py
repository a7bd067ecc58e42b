"""Request-reply: ``Producer.request`` sends a message and waits for its reply.

RocketMQ 4.6's RPC mode, with replies pulled instead of pushed:

- The request carries ``CORRELATION_ID`` (fresh per request),
  ``REPLY_TO_CLIENT`` (the requester's client id), ``MESSAGE_TTL`` (the
  timeout, ms) and ``CLUSTER`` (the cluster of the brokers serving the
  request's topic). A replying consumer calls :func:`reply`, which sends the
  reply to ``<CLUSTER>_REPLY_TOPIC`` (a system topic every broker creates,
  one queue per broker) with the same correlation id and client id, and the
  requester's client id as its **tag**.
- The requester long-polls every queue of that reply topic with its own
  client id as the subscription, so the broker filters by tag (hash in the
  consume queue, then the real tag) and only this requester's replies come
  back. A per-client subscription group was the alternative; it would leave
  one group per requester process in the broker's metadata forever. Polling
  starts at each queue's end when the first request to a cluster is made
  (before that request is sent, so its reply cannot be missed).
- A reply is matched by correlation id to a waiting request. A request that
  times out raises :class:`RequestTimeout` and forgets its id at once, so a
  reply arriving later finds nobody waiting and is dropped (counted in
  ``late_replies``): nothing is kept per request beyond its wait.
- ``Producer.request_async`` (RocketMQ's ``request(msg, RequestCallback, timeout)``)
  returns a :class:`concurrent.futures.Future` of the reply at once and calls
  ``callback(reply, error)`` when it ends: the request is sent through the
  producer's async sends, and one timer thread per producer fails every
  request still waiting at its deadline with :class:`RequestTimeout` (a
  failed send fails it with the send's error). Callbacks run on the reply
  poller's thread (a reply), the timer thread (a timeout) or the producer's
  sender thread (a failed send): they must not block. ``shutdown`` fails the
  requests still waiting.

Limits: reply-topic queues of brokers that join after the first request to a
cluster are not polled until the producer restarts.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Protocol

import grpc

from boltmq.client import DEFAULT_TOPIC, BoltMQError, ClientInstance
from boltmq.kernel.registry_client import TopicNotFound
from boltmq.message import Message, MessageError, MessageQueue, ReceivedMessage, SendResult
from boltmq.pull_consumer import PullError, PullStatus, pull_queue

log = logging.getLogger(__name__)

PROPERTY_CORRELATION_ID = "CORRELATION_ID"
PROPERTY_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL = "MESSAGE_TTL"
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_MESSAGE_TYPE = "MSG_TYPE"
REPLY_TOPIC_SUFFIX = "_REPLY_TOPIC"
REPLY_CONSUMER_GROUP = "CID_RMQ_SYS_REPLY"
"""The group the requesters' reply pulls name (they commit no offsets)."""
REPLY_LONG_POLL_MS = 5_000
"""How long one reply pull is parked at the broker when no reply is there."""
REPLY_PULL_MAX_MESSAGES = 64
REPLY_RETRY_PAUSE_S = 0.2
"""Pause after a failed reply pull before the next one."""


class RequestTimeout(BoltMQError):
    """No reply within the request's timeout."""


ReplyCallback = Callable[[ReceivedMessage | None, BaseException | None], None]
"""``callback(reply, error)``: one of them is None (Producer.request_async)."""
AsyncSend = Callable[[Message], "Future[SendResult]"]


class Sender(Protocol):
    """What :func:`reply` sends the reply with: a started :class:`boltmq.Producer`.

    A protocol, not the Producer class: the producer builds its Requester from
    this module, and this module names no producer back (one-way imports)."""

    def send(self, msg: Message, sharding_key: str | None = None) -> SendResult:
        """Send one message and wait for the broker's answer."""
        ...


def reply(
    producer: Sender,
    request: ReceivedMessage,
    body: bytes,
    properties: Mapping[str, str] | None = None,
) -> SendResult:
    """Send ``body`` as the reply to ``request`` (a message that came from
    ``Producer.request``) through its cluster's reply topic; MessageError when
    ``request`` is not a request message."""
    props = request.properties
    missing = [
        k
        for k in (PROPERTY_CORRELATION_ID, PROPERTY_REPLY_TO_CLIENT, PROPERTY_CLUSTER)
        if not props.get(k)
    ]
    if missing:
        raise MessageError(f"not a request message: no {', '.join(missing)} property")
    reply_properties = dict(properties or {})
    reply_properties.update(
        {
            PROPERTY_CORRELATION_ID: props[PROPERTY_CORRELATION_ID],
            PROPERTY_REPLY_TO_CLIENT: props[PROPERTY_REPLY_TO_CLIENT],
            PROPERTY_MESSAGE_TTL: props.get(PROPERTY_MESSAGE_TTL, ""),
            PROPERTY_MESSAGE_TYPE: "reply",
        }
    )
    return producer.send(
        Message(
            topic=props[PROPERTY_CLUSTER] + REPLY_TOPIC_SUFFIX,
            body=body,
            tags=props[PROPERTY_REPLY_TO_CLIENT],
            properties=reply_properties,
        )
    )


class Requester:
    """The requests of one producer waiting for replies, and the reply pollers.

    ``client``: the producer's routes and broker connections (its client id is
    the reply tag); ``send``: the producer's :meth:`~boltmq.Producer.send`.
    """

    def __init__(
        self,
        client: ClientInstance,
        send: Callable[[Message], SendResult],
        send_async: AsyncSend | None = None,
    ) -> None:
        self._send = send
        self._send_async = send_async
        self._deadlines: list[tuple[float, str]] = []
        """Heap of (monotonic deadline, correlation id) of the async requests."""
        self._timer: threading.Thread | None = None
        self._timer_wake = threading.Condition(threading.Lock())
        self._client = client
        self._waiting: dict[str, Future[ReceivedMessage]] = {}
        self._lock = threading.Lock()
        self._listening: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._calls: dict[MessageQueue, grpc.Future | None] = {}
        self._timeouts: dict[str, tuple[Message, int]] = {}
        """Correlation id -> (message, timeout) of the async requests still waiting."""
        self._stop = threading.Event()
        self.late_replies = 0
        """Replies that came after their request gave up (or were never asked for)."""

    @property
    def waiting(self) -> int:
        """Requests waiting for a reply now."""
        return len(self._waiting)

    def request(self, msg: Message, timeout_ms: int) -> ReceivedMessage:
        """Send ``msg`` and return its reply; RequestTimeout after ``timeout_ms``."""
        request, correlation_id, future = self._prepare(msg, timeout_ms)
        try:
            self._send(request)
            return future.result(timeout=timeout_ms / 1000)
        except FutureTimeout:
            raise _timeout(msg, timeout_ms, correlation_id) from None
        finally:
            self._waiting.pop(correlation_id, None)

    def request_async(
        self, msg: Message, timeout_ms: int, callback: ReplyCallback | None = None
    ) -> Future[ReceivedMessage]:
        """Send ``msg`` without waiting: the future of its reply (module docstring)."""
        if self._send_async is None:
            raise BoltMQError("this requester sends synchronously only")
        if callback is not None and not callable(callback):
            raise ValueError(f"callback must be callable, not {callback!r}")
        request, correlation_id, future = self._prepare(msg, timeout_ms)
        if callback is not None:
            future.add_done_callback(lambda done: _call_back(callback, done))
        with self._timer_wake:
            deadline = time.monotonic() + timeout_ms / 1000
            heapq.heappush(self._deadlines, (deadline, correlation_id))
            self._timeouts[correlation_id] = (msg, timeout_ms)
            if self._timer is None:
                self._timer = threading.Thread(
                    target=self._expire, daemon=True, name="boltmq-request-timer"
                )
                self._timer.start()
            self._timer_wake.notify()
        try:
            sent = self._send_async(request)
        except BaseException as exc:
            self._fail(correlation_id, exc)
            raise
        sent.add_done_callback(
            lambda done: (
                None if done.exception() is None else self._fail(correlation_id, done.exception())
            )
        )
        return future

    def _prepare(
        self, msg: Message, timeout_ms: int
    ) -> tuple[Message, str, Future[ReceivedMessage]]:
        """The request message (``msg`` with the request properties), its correlation id
        and the future of its reply, registered as waiting."""
        if type(timeout_ms) is not int or timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be a positive int, not {timeout_ms!r}")
        cluster = self._cluster_of(msg.topic)
        self._listen(cluster)
        correlation_id = uuid.uuid4().hex
        properties = dict(msg.properties)
        properties.update(
            {
                PROPERTY_CORRELATION_ID: correlation_id,
                PROPERTY_REPLY_TO_CLIENT: self._client.client_id,
                PROPERTY_MESSAGE_TTL: str(timeout_ms),
                PROPERTY_CLUSTER: cluster,
                PROPERTY_MESSAGE_TYPE: "request",
            }
        )
        future: Future[ReceivedMessage] = Future()
        self._waiting[correlation_id] = future
        return dataclasses.replace(msg, properties=properties), correlation_id, future

    def _fail(self, correlation_id: str, error: BaseException | None) -> None:
        """End a waiting async request with ``error`` (nothing when it ended already)."""
        future = self._waiting.pop(correlation_id, None)
        with self._timer_wake:
            self._timeouts.pop(correlation_id, None)
        if future is not None and error is not None and not future.done():
            future.set_exception(error)

    def _expire(self) -> None:
        """The timer thread: fails each async request still waiting at its deadline."""
        with self._timer_wake:
            while not self._stop.is_set():
                now = time.monotonic()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, correlation_id = heapq.heappop(self._deadlines)
                    future = self._waiting.pop(correlation_id, None)
                    asked = self._timeouts.pop(correlation_id, None)
                    if future is not None and asked is not None and not future.done():
                        future.set_exception(_timeout(*asked, correlation_id))
                wait = self._deadlines[0][0] - now if self._deadlines else None
                self._timer_wake.wait(wait)

    def close(self) -> None:
        """Stop polling for replies; waiting requests time out (async ones fail now)."""
        self._stop.set()
        with self._timer_wake:
            self._timer_wake.notify()
            pending = list(self._timeouts)
        for correlation_id in pending:
            self._fail(correlation_id, BoltMQError("the producer shut down before the reply"))
        if self._timer is not None:
            self._timer.join()
        for call in list(self._calls.values()):
            if call is not None:
                call.cancel()
        for thread in self._threads:
            thread.join()

    def _cluster_of(self, topic: str) -> str:
        try:
            route = self._client.route(topic)
        except TopicNotFound:  # auto-created by the template's brokers
            route = self._client.route(DEFAULT_TOPIC)
        if not route.brokers:
            raise BoltMQError(f"no broker serves {topic!r}")
        return route.brokers[0].cluster_name

    def _listen(self, cluster: str) -> None:
        """Start polling the cluster's reply queues at their ends (once per cluster)."""
        with self._lock:
            if cluster in self._listening:
                return
            queues = self._client.read_queues(cluster + REPLY_TOPIC_SUFFIX)
            starts = [self._end_of(queue) for queue in queues]
            for queue, start in zip(queues, starts, strict=True):
                thread = threading.Thread(
                    target=self._poll,
                    args=(queue, start),
                    daemon=True,
                    name=f"boltmq-reply-{queue}",
                )
                thread.start()
                self._threads.append(thread)
            self._listening.add(cluster)

    def _end_of(self, queue: MessageQueue) -> int:
        result = pull_queue(
            self._client,
            REPLY_CONSUMER_GROUP,
            queue,
            0,
            max_messages=1,
            subscription=self._client.client_id,
            wait_ms=0,
        )
        return result.max_offset

    def _poll(self, queue: MessageQueue, offset: int) -> None:
        client_id = self._client.client_id
        while not self._stop.is_set():
            try:
                result = pull_queue(
                    self._client,
                    REPLY_CONSUMER_GROUP,
                    queue,
                    offset,
                    max_messages=REPLY_PULL_MAX_MESSAGES,
                    subscription=client_id,
                    wait_ms=REPLY_LONG_POLL_MS,
                    track=lambda call: self._calls.__setitem__(queue, call),
                )
            except PullError as exc:
                if self._stop.is_set():
                    return
                log.debug("reply pull failed: %s", exc)
                self._stop.wait(REPLY_RETRY_PAUSE_S)
                continue
            for message in result.messages:
                self._deliver(message, client_id)
            if result.status is PullStatus.OFFSET_ILLEGAL:
                offset = result.max_offset
            else:
                offset = max(offset, result.next_begin_offset)

    def _deliver(self, message: ReceivedMessage, client_id: str) -> None:
        props = message.properties
        if props.get(PROPERTY_REPLY_TO_CLIENT) != client_id:
            return  # another requester's tag with the same hash
        future = self._waiting.pop(props.get(PROPERTY_CORRELATION_ID, ""), None)
        if future is None:
            self.late_replies += 1
            log.debug(
                "reply %s came after its request gave up; dropped",
                props.get(PROPERTY_CORRELATION_ID),
            )
            return
        with self._timer_wake:
            self._timeouts.pop(props.get(PROPERTY_CORRELATION_ID, ""), None)
        if not future.done():  # an async request its caller cancelled
            future.set_result(message)


def _timeout(msg: Message, timeout_ms: int, correlation_id: str) -> RequestTimeout:
    return RequestTimeout(
        f"no reply to the request to {msg.topic!r} within "
        f"{timeout_ms} ms (correlation id {correlation_id})"
    )


def _call_back(callback: ReplyCallback, done: Future[ReceivedMessage]) -> None:
    """Call ``callback`` with how the request ended; its failure is only logged."""
    error = CancelledError() if done.cancelled() else done.exception()
    try:
        callback(None if error is not None else done.result(), error)
    except Exception:
        log.exception("request callback failed")
