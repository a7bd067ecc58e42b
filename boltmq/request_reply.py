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

Limits: reply-topic queues of brokers that join after the first request to a
cluster are not polled until the producer restarts.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
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

    def __init__(self, client: ClientInstance, send: Callable[[Message], SendResult]) -> None:
        self._send = send
        self._client = client
        self._waiting: dict[str, Future[ReceivedMessage]] = {}
        self._lock = threading.Lock()
        self._listening: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._calls: dict[MessageQueue, grpc.Future | None] = {}
        self._stop = threading.Event()
        self.late_replies = 0
        """Replies that came after their request gave up (or were never asked for)."""

    @property
    def waiting(self) -> int:
        """Requests waiting for a reply now."""
        return len(self._waiting)

    def request(self, msg: Message, timeout_ms: int) -> ReceivedMessage:
        """Send ``msg`` and return its reply; RequestTimeout after ``timeout_ms``."""
        if timeout_ms <= 0:
            raise ValueError("timeout_ms must be positive")
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
        try:
            self._send(dataclasses.replace(msg, properties=properties))
            return future.result(timeout=timeout_ms / 1000)
        except FutureTimeout:
            raise RequestTimeout(
                f"no reply to the request to {msg.topic!r} within "
                f"{timeout_ms} ms (correlation id {correlation_id})"
            ) from None
        finally:
            self._waiting.pop(correlation_id, None)

    def close(self) -> None:
        """Stop polling for replies; waiting requests time out."""
        self._stop.set()
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
        future.set_result(message)
