"""Shared subscriptions (``$share/<group>/<filter>``) as BoltMQ consumer groups.

Each pod with a member of share group G on a filter of BoltMQ topic T runs one
:class:`~boltmq.push_consumer.PushConsumer` in the consumer group
``hashed_name("MQTT_SH_", "G/T")`` (new groups start at the end of the topic): the
brokers spread T's queues over the pods that have members, and each pod hands every
message to one of its own members whose filter matches, in turn. A QoS 1 message is
done once that member acknowledged it; a member that does not (gone, or silent for
``ACK_WAIT_S``) makes the consumer send it back, and the group gets it again later
(the SDK's retry topic: ``%RETRY%<group>``, first retry after 10 s).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from boltmq.client import TopicNotFound
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import ConsumeResult, ReceivedMessage
from boltmq.options import PushConsumerOptions
from boltmq.push_consumer import PushConsumer
from services.mqtt.delivery import Delivery
from services.mqtt.topics import Filter, hashed_name

log = logging.getLogger(__name__)

ACK_WAIT_S = 30.0
START_RETRY_S = 1.0
SHARE_GROUP_PREFIX = "MQTT_SH_"


class Member(Protocol):
    """A device's connection, as a share group sees it."""

    def offer(self, delivery: Delivery, qos: int) -> concurrent.futures.Future[bool] | None: ...


class ShareGroup:
    """One share group's members on this pod for one BoltMQ topic, and its consumer."""

    def __init__(
        self,
        share: str,
        topic: str,
        registry: str,
        tls: ClientTLS | None,
        credentials: Credentials | None,
        post: Callable[[Callable[[], None]], None],
    ) -> None:
        self.group = hashed_name(SHARE_GROUP_PREFIX, f"{share}/{topic}")
        self.topic = topic
        self.members: list[tuple[Member, Filter, int]] = []
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._post = post
        """Runs a callable on the event loop (the members live there)."""
        self._consumer = PushConsumer(
            registry,
            self.group,
            {topic: "*"},
            self._listen,
            options=PushConsumerOptions(consume_from="LAST", consume_threads=2),
            tls=tls,
            credentials=credentials,
        )
        self._starter = threading.Thread(
            target=self._start, name=f"mqtt-share-{share}", daemon=True
        )
        self._starter.start()

    def _start(self) -> None:
        """Start the consumer once the topic exists (a filter may come before the topic)."""
        while not self._stop.is_set():
            try:
                self._consumer.start()
                return
            except TopicNotFound:
                self._stop.wait(START_RETRY_S)
            except Exception as exc:
                log.warning("share group %s: %s", self.group, exc)
                self._stop.wait(START_RETRY_S)

    def add(self, member: Member, filter_: Filter, qos: int) -> None:
        with self._lock:
            self.members = [m for m in self.members if m[0] is not member or m[1] != filter_]
            self.members.append((member, filter_, qos))

    def remove(self, member: Member, filter_text: str | None = None) -> bool:
        """Drop ``member``'s filter (all its filters when None); True when none is left."""
        with self._lock:
            self.members = [
                m
                for m in self.members
                if m[0] is not member or (filter_text is not None and m[1].text != filter_text)
            ]
            return not self.members

    def stop(self) -> None:
        self._stop.set()
        self._starter.join(START_RETRY_S + 1)
        self._consumer.shutdown()

    def _pick(self, delivery: Delivery) -> tuple[Member, int] | None:
        with self._lock:
            members = [m for m in self.members if m[1].matches(delivery.topic)]
            if not members:
                return None
            member, _, qos = members[next(self._turn) % len(members)]
        return member, qos

    def _listen(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        """The consumer's listener (its threads): one member each; wait for QoS 1 acks."""
        waits: list[concurrent.futures.Future[bool]] = []
        for message in messages:
            delivery = Delivery.from_received(message)
            if delivery is None or delivery.expired():
                continue
            picked = self._pick(delivery)
            if picked is None:
                continue  # no member's filter matches (another level of the topic)
            waits += self._offer(picked[0], delivery, picked[1])
        if not waits:
            return ConsumeResult.SUCCESS
        done, pending = concurrent.futures.wait(waits, timeout=ACK_WAIT_S)
        if pending or not all(f.result() for f in done):
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    def _offer(
        self, member: Member, delivery: Delivery, qos: int
    ) -> Sequence[concurrent.futures.Future[bool]]:
        handed: concurrent.futures.Future[bool] = concurrent.futures.Future()

        def offer() -> None:
            acked = member.offer(delivery, qos)
            if acked is None:
                handed.set_result(True)
            else:
                acked.add_done_callback(lambda f: handed.set_result(bool(f.result())))

        self._post(offer)
        return [handed]
