"""Hub: a pod's live connections and what each subscribed, on the event loop.

Messages reach devices three ways (docs/mqtt.md, "Message flow"):

- ordinary subscriptions of clean sessions: the pod's one fan-out
  :class:`~services.mqtt.readers.QueueReader` reads every BoltMQ topic such a
  subscription names, and the hub gives each message to every connection with a
  matching filter, once per connection at the highest QoS granted among its matches;
- persistent sessions: the session's own reader (its consumer group), owned by the
  connection (:mod:`services.mqtt.session_reader`);
- shared subscriptions: one :class:`~services.mqtt.shares.ShareGroup` per share group
  and topic.

The SDK's calls block: they run on the hub's thread pool (``sdk_threads``). Readers'
threads hand messages to the loop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import mqtt5

from boltmq.message import ReceivedMessage
from services.mqtt.bridge import GATEWAY_GROUP, Bridge
from services.mqtt.config import MqttConfig
from services.mqtt.delivery import Delivery
from services.mqtt.readers import QueueReader
from services.mqtt.retained import RETAINED_GROUP, RETAINED_TOPIC, RetainedMessages
from services.mqtt.shares import ShareGroup
from services.mqtt.takeover import Takeovers
from services.mqtt.topics import Filter, matches

log = logging.getLogger(__name__)
T = TypeVar("T")
CLOSE_WAIT_S = 5.0
"""How long a CONNECT waits for the close of the client id's previous connection."""


class Connection(Protocol):
    """A device's connection, as the hub sees it (:class:`services.mqtt.connection.Connection`)."""

    client_id: str
    version: int
    """The protocol level: 4 (3.1.1) or 5."""
    filters: dict[str, Any]
    """The connection's topic filters, by text."""

    def offer(self, delivery: Delivery, qos: int) -> concurrent.futures.Future[bool] | None: ...

    def close_later(self, reason: mqtt5.DisconnectReasonCode, text: str) -> None: ...


class Hub:
    """Connections by client id, ordinary subscriptions by BoltMQ topic, share groups."""

    def __init__(self, config: MqttConfig, bridge: Bridge, pod: str = "pod") -> None:
        self.config = config
        self.bridge = bridge
        self.loop = asyncio.get_running_loop()
        self.pool = concurrent.futures.ThreadPoolExecutor(
            config.sdk_threads, thread_name_prefix="mqtt-sdk"
        )
        self.connections: dict[str, Connection] = {}
        self.subscribers: dict[str, dict[Connection, dict[str, tuple[Filter, int]]]] = {}
        """BoltMQ topic -> connection -> filter text -> (filter, granted QoS)."""
        self.shares: dict[tuple[str, str], ShareGroup] = {}
        self.wills: dict[str, asyncio.Task[None]] = {}
        """Will messages waiting for their delay, by client id (a reconnect cancels)."""
        self.retained = RetainedMessages()
        self.fanout = QueueReader(bridge.consumer(GATEWAY_GROUP), self._from_fanout, name="fanout")
        self.retained_reader = QueueReader(
            bridge.consumer(RETAINED_GROUP), self.retained.take, name="retained", from_start=True
        )
        self.dropped = 0
        """QoS 0 messages dropped for slow devices (their queue was full)."""
        self.closing: dict[str, asyncio.Event] = {}
        """Client ids whose connection is closing (its session not saved yet): set when done."""
        self.connected_ms: dict[str, int] = {}
        """When each live connection attached, by client id (takeovers compare it)."""
        self.takeovers = Takeovers(
            pod,
            bridge.producer,
            lambda handler: QueueReader(bridge.consumer(GATEWAY_GROUP), handler, name="takeover"),
            lambda client_id, at_ms: self.post(lambda: self._taken_over(client_id, at_ms)),
        )

    async def start(self) -> None:
        self.fanout.start()
        self.retained_reader.start()
        self.takeovers.start()
        await self.call(self.retained_reader.add_topic, RETAINED_TOPIC)
        await self.call(self.takeovers.add_topic)

    async def stop(self) -> None:
        for task in self.wills.values():
            task.cancel()
        stops: list[Callable[[], None]] = [self.fanout.stop, self.retained_reader.stop]
        stops += [self.takeovers.stop, *(s.stop for s in self.shares.values())]
        self.shares.clear()
        await asyncio.gather(*(self.call(stop) for stop in stops))
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking SDK call on the pool."""
        return await self.loop.run_in_executor(self.pool, fn, *args)

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop (from any thread)."""
        self.loop.call_soon_threadsafe(fn)

    @property
    def full(self) -> bool:
        return len(self.connections) >= self.config.max_connections

    # ------------------------------------------------------------------ connections
    def attach(self, connection: Connection) -> Connection | None:
        """Register ``connection`` under its client id; the one it takes over, if any."""
        client_id = connection.client_id
        will = self.wills.pop(client_id, None)
        if will is not None:
            will.cancel()  # the device is back before its will delay ran out
        old = self.connections.get(client_id)
        self.connections[client_id] = connection
        now_ms = time.time_ns() // 1_000_000
        self.connected_ms[client_id] = now_ms
        self.pool.submit(self.takeovers.announce, client_id, now_ms)  # other pods' old ones
        return old

    @asynccontextmanager
    async def leaving(self, connection: Connection) -> AsyncIterator[bool]:
        """Unregister ``connection`` for its close; yields whether it was its client id's
        connection (then it saves the session, and a new CONNECT of the id waits meanwhile)."""
        client_id = connection.client_id
        if self.connections.get(client_id) is not connection:
            yield False
            return
        del self.connections[client_id]
        self.connected_ms.pop(client_id, None)
        done = self.closing[client_id] = asyncio.Event()
        try:
            yield True
        finally:
            done.set()
            if self.closing.get(client_id) is done:
                del self.closing[client_id]

    async def settle(self, client_id: str) -> None:
        """Wait until the client id's previous connection has closed (its session saved, so
        the new one reads it, not a save racing it), at most :data:`CLOSE_WAIT_S`."""
        done = self.closing.get(client_id)
        if done is None:
            return
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                await done.wait()
        except TimeoutError:
            log.warning(
                "%s: the previous connection did not close in %s s", client_id, CLOSE_WAIT_S
            )
        will = self.wills.pop(client_id, None)
        if will is not None:
            will.cancel()  # scheduled by the closing connection: the device is back

    def _taken_over(self, client_id: str, announced_ms: int) -> None:
        """Another pod announced a connect of ``client_id``: close an older one here."""
        connection = self.connections.get(client_id)
        if connection is not None and self.connected_ms.get(client_id, announced_ms) < announced_ms:
            connection.close_later(
                mqtt5.DisconnectReasonCode.SESSION_TAKEN_OVER,
                "the client id connected through another gateway pod",
            )

    # ------------------------------------------------------------------ subscriptions
    async def subscribe(self, connection: Connection, filter_: Filter, qos: int) -> None:
        """Deliver what ``filter_`` matches to ``connection`` from now on (an ordinary
        subscription of a clean session, or a shared one)."""
        if filter_.share is not None:
            key = (filter_.share, filter_.topic)
            group = self.shares.get(key)
            if group is None:
                group = await self.call(
                    ShareGroup,
                    filter_.share,
                    filter_.topic,
                    self.bridge.registry,
                    self.bridge.tls,
                    self.bridge.credentials,
                    self.post,
                )
                self.shares[key] = group
            group.add(connection, filter_, qos)
            return
        first = filter_.topic not in self.subscribers
        by_connection = self.subscribers.setdefault(filter_.topic, {})
        by_connection.setdefault(connection, {})[filter_.text] = (filter_, qos)
        if first or filter_.topic not in self.fanout.topics:
            await self.call(self.fanout.add_topic, filter_.topic)

    async def unsubscribe(self, connection: Connection, filter_: Filter) -> None:
        if filter_.share is not None:
            key = (filter_.share, filter_.topic)
            group = self.shares.get(key)
            if group is not None and group.remove(connection, filter_.text):
                del self.shares[key]
                await self.call(group.stop)
            return
        by_connection = self.subscribers.get(filter_.topic, {})
        filters = by_connection.get(connection, {})
        filters.pop(filter_.text, None)
        if not filters:
            by_connection.pop(connection, None)
        if not by_connection and filter_.topic in self.subscribers:
            del self.subscribers[filter_.topic]
            await self.call(self.fanout.remove_topic, filter_.topic)

    async def drop(self, connection: Connection) -> None:
        """Forget every subscription of ``connection`` (it closed)."""
        for topic in [t for t, c in self.subscribers.items() if connection in c]:
            for filter_, _ in list(self.subscribers[topic][connection].values()):
                await self.unsubscribe(connection, filter_)
        for key, group in list(self.shares.items()):
            if group.remove(connection):
                del self.shares[key]
                await self.call(group.stop)

    # ------------------------------------------------------------------ delivery
    def _from_fanout(
        self, messages: Sequence[ReceivedMessage]
    ) -> Sequence[concurrent.futures.Future[bool]]:
        """The fan-out reader's handler (its thread): decode, then dispatch on the loop."""
        deliveries = [d for m in messages if (d := Delivery.from_received(m)) is not None]
        if deliveries:
            self.post(lambda: self.dispatch(deliveries))
        return ()

    def dispatch(self, deliveries: Sequence[Delivery]) -> None:
        """Give each delivery to every connection with a matching ordinary subscription."""
        for delivery in deliveries:
            if delivery.expired():
                continue
            boltmq_topic = delivery.topic.split("/", 1)[0]
            levels = delivery.topic.split("/")
            for connection, filters in list(self.subscribers.get(boltmq_topic, {}).items()):
                granted = [q for f, q in filters.values() if matches(f.levels, levels)]
                if granted:
                    connection.offer(delivery, max(granted))
