"""Persistent sessions kept in the cluster, not in a gateway pod (docs/mqtt.md, "Sessions").

A device that connects with Clean Start 0 and a Session Expiry Interval above 0 has a
persistent session: its subscriptions, and the QoS 1 messages it did not acknowledge,
survive its disconnect and the restart (or loss) of the gateway pod it used, so it may
come back through any pod.

- **Subscriptions**: a JSON record on the system topic ``MQTT_SESSIONS``, written at
  every change and at disconnect, with the key ``hashed_name("S", client_id)`` (a client
  id may hold characters a key may not); the newest record is the session. Format::

      {"client_id": "dev-1", "generation": "9f2c...", "filters": [["a/b/#", 1]],
       "expiry_s": 3600, "saved_ms": 1767225600000, "ended": false}

  ``ended`` true means no session. ``generation`` is new for every new session (a
  clean start), so a new session never inherits an old one's offsets.
- **Undelivered messages**: the session's consumer group ``hashed_name("MQTT_S_",
  client_id + "/" + generation)`` and its committed offsets: the session's reader
  commits a batch only once the device acknowledged its QoS 1 messages
  (:mod:`services.mqtt.readers`).

A session expires ``expiry_s`` after ``saved_ms`` of its last record while no device is
connected (a pod that died without writing the disconnect leaves the last record's time).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from boltmq.client import ClientInstance, TopicNotFound
from boltmq.message import Message
from boltmq.v1 import store_pb2
from services.mqtt.topics import hashed_name

log = logging.getLogger(__name__)

SESSION_TOPIC = "MQTT_SESSIONS"
SESSION_GROUP_PREFIX = "MQTT_S_"
LOOKUP_MAX = 64
"""Records of one key asked of each broker group's index."""


@dataclass
class SessionRecord:
    """What a persistent session keeps between connections."""

    client_id: str
    filters: list[tuple[str, int]]
    expiry_s: int
    saved_ms: int = 0
    ended: bool = False
    generation: str = ""

    @property
    def group(self) -> str:
        """The session's consumer group (its committed offsets)."""
        return hashed_name(SESSION_GROUP_PREFIX, f"{self.client_id}/{self.generation}")

    def expired(self, now_ms: int) -> bool:
        return self.ended or now_ms > self.saved_ms + self.expiry_s * 1000

    def encode(self) -> bytes:
        return json.dumps(
            {
                "client_id": self.client_id,
                "generation": self.generation,
                "filters": [list(f) for f in self.filters],
                "expiry_s": self.expiry_s,
                "saved_ms": self.saved_ms,
                "ended": self.ended,
            }
        ).encode()

    @classmethod
    def decode(cls, body: bytes) -> SessionRecord:
        raw = json.loads(body)
        return cls(
            str(raw["client_id"]),
            [(str(text), int(qos)) for text, qos in raw["filters"]],
            int(raw["expiry_s"]),
            int(raw["saved_ms"]),
            bool(raw["ended"]),
            str(raw["generation"]),
        )


def session_key(client_id: str) -> str:
    return hashed_name("S", client_id)


def save(send: Callable[[Message], object], record: SessionRecord) -> None:
    """Write ``record`` with ``send`` (the gateway's producer's)."""
    record.saved_ms = _stamp_ms()
    key = session_key(record.client_id)
    send(Message(topic=SESSION_TOPIC, body=record.encode(), keys=[key]))


class _Stamps:
    """The wall clock in ms, above every stamp this process gave before: of two records a
    pod saves in one millisecond, the later is still the newer (``load`` keeps the newest)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def next(self) -> int:
        with self._lock:
            self._last = max(int(time.time() * 1000), self._last + 1)
            return self._last


_stamp_ms = _Stamps().next


def load(client: ClientInstance, client_id: str) -> SessionRecord | None:
    """The newest record of ``client_id``'s session (None: never saved)."""
    try:
        route = client.route(SESSION_TOPIC)
    except TopicNotFound:
        return None
    key = session_key(client_id)
    request = store_pb2.QueryByKeyRequest(topic=SESSION_TOPIC, key=key, max_count=LOOKUP_MAX)
    newest: SessionRecord | None = None
    for name in sorted({b.broker_name for b in route.brokers}):
        address = client.broker_address(route, name)
        if address is None:
            raise ConnectionError(f"broker group {name!r} of {SESSION_TOPIC} has no live master")
        try:
            response = client.broker(address).QueryMessageByKey(
                request, timeout=client.rpc_timeout_s
            )
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.NOT_FOUND:
                continue
            raise
        for message in response.messages:
            if key not in message.keys:
                continue
            try:
                record = SessionRecord.decode(message.body)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("session record of %s unreadable: %s", key, exc)
                continue
            if record.client_id == client_id and (
                newest is None or record.saved_ms >= newest.saved_ms
            ):
                newest = record
    return newest
