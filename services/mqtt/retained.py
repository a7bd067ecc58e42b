"""Retained messages, kept on the system topic ``MQTT_RETAINED`` (docs/mqtt.md).

A PUBLISH with RETAIN 1 that the brokers accepted on its own topic is also written to
``MQTT_RETAINED`` by the gateway's account, with the properties of
:mod:`services.mqtt.delivery` and the key ``hashed_name("R", mqtt_topic)``; an empty
payload clears the topic's retained message (MQTT 3.3.1.3). One MQTT topic's records go
to one queue (the MQTT topic is the sharding key), so they are read in the order they
were written. Every gateway pod reads
the whole topic from its first message into a map (the newest message per MQTT topic
wins), so a pod that starts learns every retained message from the cluster, and a
subscription gets the matching ones at once. Expired ones are dropped as they are met.

The map costs one entry per retained MQTT topic in every pod; the topic's history is
bounded by the store's retention like any topic (a retained message older than the
retention is lost: set ``file_reserved_time`` accordingly, docs/operations.md).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Sequence

from boltmq.message import Message, ReceivedMessage
from services.mqtt.delivery import Delivery
from services.mqtt.topics import Filter, hashed_name

RETAINED_TOPIC = "MQTT_RETAINED"
RETAINED_GROUP = "MQTT_RETAINED_READER"


class RetainedMessages:
    """The newest retained message of every MQTT topic (filled by a reader thread)."""

    def __init__(self) -> None:
        self._by_topic: dict[str, Delivery] = {}
        self._written: dict[str, str] = {}
        """MQTT topic -> unique id of this pod's newest record of it, until the reader
        meets it (older records the reader meets meanwhile are not taken)."""
        self._lock = threading.Lock()
        self.loaded = threading.Event()
        """Set once the reader has caught up with the topic once."""

    def __len__(self) -> int:
        return len(self._by_topic)

    @staticmethod
    def message(delivery: Delivery) -> Message:
        """The record that retains ``delivery`` (clears its topic when the payload is empty)."""
        message = delivery.to_message(RETAINED_TOPIC)
        return Message(
            topic=RETAINED_TOPIC,
            body=message.body,
            keys=[hashed_name("R", delivery.topic)],
            properties=message.properties,
        )

    def take(
        self, messages: Sequence[ReceivedMessage]
    ) -> Sequence[concurrent.futures.Future[bool]]:
        """The reader's handler: keep the newest message of each topic."""
        with self._lock:
            for received in messages:
                delivery = Delivery.from_received(received, system=True)
                if delivery is None or delivery.topic == RETAINED_TOPIC:
                    continue
                written = self._written.get(delivery.topic)
                if written is not None:
                    if written != received.unique_id:
                        continue  # older than what this pod wrote and keeps already
                    del self._written[delivery.topic]
                if delivery.payload and not delivery.expired():
                    self._by_topic[delivery.topic] = delivery
                else:
                    self._by_topic.pop(delivery.topic, None)
        return ()

    def remember(self, delivery: Delivery, unique_id: str) -> None:
        """Keep ``delivery`` at once: this pod wrote it as ``unique_id`` (the reader
        meets it later)."""
        with self._lock:
            self._written[delivery.topic] = unique_id
            if delivery.payload:
                self._by_topic[delivery.topic] = delivery
            else:
                self._by_topic.pop(delivery.topic, None)

    def matching(self, filter_: Filter) -> list[Delivery]:
        """The unexpired retained messages whose topic ``filter_`` matches."""
        with self._lock:
            found = [d for t, d in self._by_topic.items() if filter_.matches(t)]
        return [d for d in found if not d.expired()]
