"""POP consumption state (popState.json): per (group, topic, queue) progress and in-flight
messages; and the secret receipt handles are signed with (popSecret.json).

A group consuming by POP (:mod:`services.broker.pop.pop_service`) keeps its own state,
apart from the committed offsets of pull groups (consumerOffset.json):

- ``pop_offset``: the next queue offset this group has never read by POP (None: not read
  yet; the first receive starts at the group's committed offset, else the queue's min);
- ``in_flight``: every message read past which ``pop_offset`` moved and not yet acked or
  dead-lettered, by queue offset: its commitlog offset, when it becomes visible again
  (``visible_at_ms``, wall clock, so it survives restarts; 0: at once), deliveries so far
  (``attempt``; 0: read but not delivered yet, a FIFO message held behind an earlier one
  of its message group), the ``token`` of its current delivery (random 63 bits, new at each
  delivery and each change of invisibility: a receipt handle is good only while its token
  is the record's) and its FIFO message group (``""``: none).

The table lives in memory and is written like consumer offsets: every
``offset_persist_interval_ms`` when it changed (``version``), and at shutdown; replicas copy
it with the other metadata (:mod:`services.broker.cluster.metadata_sync`). A broker that
crashes loses at most one interval of changes: the messages received in it are received
again (at-least-once) and their handles are refused as stale (their tokens are gone).

popState.json (``inFlight`` values are ``[commitlog_offset, visible_at_ms, attempt, token,
message_group]``)::

    {"popTable": {"Topic@Group": {"0": {"popOffset": 12,
                                        "inFlight": {"10": [4096, 1700000030000, 1,
                                                            812..., ""]}}}}}

popSecret.json holds the key of the handles' HMAC, 32 random bytes in hex, created at the
broker's first start, written at once and kept for good::

    {"secret": "9f..."}

The secret is never in GetMetadata's answer in the clear: popState.json is, like every
metadata document, but the secret travels only sealed for the brokers' own account
(``popSecret.json.sealed``, :mod:`services.broker.access.acl_seal`), as the ACL does, so
a promoted replica accepts the handles its master issued. Without access control there
is no such account: replicas do not get the secret, and after a failover the old
handles are refused (their messages come back after their invisible time).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from boltmq.wire.topic import is_group, is_topic
from services.broker.errors import CorruptMetadata
from services.broker.metadata import json_document
from services.broker.metadata.consumer_offset import KEY_SEPARATOR, offset_key
from services.broker.metadata.names import dropped_at_load

POP_STATE_FILE = "popState.json"
POP_SECRET_FILE = "popSecret.json"
SEALED_POP_SECRET_FILE = "popSecret.json.sealed"
"""Name of the sealed secret in GetMetadata's answer (never a file in the store)."""
SECRET_BYTES = 32
TOKEN_BITS = 63
_RECORD_FIELDS = 5

PopKey = tuple[str, str, int]
"""``(group, topic, queue_id)``."""


def new_token() -> int:
    """A delivery's token: random, so no restart can issue one a handle already holds."""
    return secrets.randbits(TOKEN_BITS) or 1


@dataclass(slots=True)
class InFlight:
    """One message read by POP and not yet acked or dead-lettered."""

    commitlog_offset: int
    visible_at_ms: int = 0
    attempt: int = 0
    token: int = 0
    message_group: str = ""

    def to_list(self) -> list[Any]:
        return [
            self.commitlog_offset,
            self.visible_at_ms,
            self.attempt,
            self.token,
            self.message_group,
        ]


@dataclass(slots=True)
class PopQueue:
    """One (group, topic, queue)'s POP progress."""

    pop_offset: int | None = None
    in_flight: dict[int, InFlight] = field(default_factory=dict)


class PopState:
    """Every group's POP queues, the handle secret, and a change counter."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._queues: dict[PopKey, PopQueue] = {}
        self.secret = secret or b""
        """Key of the receipt handles' HMAC (empty until loaded or created)."""
        self.version = 0
        """Incremented on every change; the persister writes when it moved."""

    def ensure_secret(self) -> bool:
        """Create the secret when there is none; True when it was created (save it now)."""
        if self.secret:
            return False
        self.secret = secrets.token_bytes(SECRET_BYTES)
        self.version += 1
        return True

    def queue(self, group: str, topic: str, queue_id: int) -> PopQueue:
        """The queue's state, created empty on first use (changes go through
        :meth:`changed`)."""
        key = (group, topic, queue_id)
        state = self._queues.get(key)
        if state is None:
            state = self._queues[key] = PopQueue()
        return state

    def find(self, group: str, topic: str, queue_id: int) -> PopQueue | None:
        """The queue's state, or None when the group never received from it."""
        return self._queues.get((group, topic, queue_id))

    def changed(self) -> None:
        """Something in a queue's state changed: the next persist round writes it."""
        self.version += 1

    def queues_of(self, group: str, topic: str) -> Iterator[tuple[int, PopQueue]]:
        """``(queue_id, state)`` of every queue the group received from on ``topic``."""
        for (owner, name, queue_id), state in list(self._queues.items()):
            if owner == group and name == topic:
                yield queue_id, state

    def delete_topic(self, topic: str) -> bool:
        """Forget every group's POP state on a deleted topic; False when there was none."""
        keys = [key for key in self._queues if key[1] == topic]
        for key in keys:
            del self._queues[key]
        if keys:
            self.version += 1
        return bool(keys)

    def to_json(self) -> bytes:
        """popState.json as written to the store."""
        table: dict[str, dict[str, Any]] = {}
        for (group, topic, queue_id), state in sorted(self._queues.items()):
            if state.pop_offset is None and not state.in_flight:
                continue
            entry: dict[str, Any] = {
                "inFlight": {str(o): r.to_list() for o, r in sorted(state.in_flight.items())}
            }
            if state.pop_offset is not None:
                entry["popOffset"] = state.pop_offset
            table.setdefault(offset_key(topic, group), {})[str(queue_id)] = entry
        return json_document.dump({"popTable": table})

    def secret_json(self) -> bytes:
        """popSecret.json as written to the store."""
        return json_document.dump({"secret": self.secret.hex()})

    def load_secret_json(self, data: bytes) -> None:
        """Take the secret from popSecret.json."""
        file = POP_SECRET_FILE
        secret = json_document.parse_object(file, data).get("secret", "")
        try:
            key = bytes.fromhex(secret) if isinstance(secret, str) else b"?"
        except ValueError:
            key = b"?"
        if len(key) != SECRET_BYTES:
            raise CorruptMetadata(f"{file}: secret is not {SECRET_BYTES} bytes of hex")
        self.secret = key

    def load_json(self, data: bytes) -> None:
        """Replace the table with popState.json's content."""
        file = POP_STATE_FILE
        document = json_document.parse_object(file, data)
        queues: dict[PopKey, PopQueue] = {}
        for name, raw in json_document.get_object(file, document, "popTable").items():
            topic, sep, group = name.partition(KEY_SEPARATOR)
            if dropped_at_load(file, "group", group) or dropped_at_load(file, "topic", topic):
                continue
            if not sep or not is_topic(topic) or not is_group(group) or not isinstance(raw, dict):
                raise CorruptMetadata(f"{file}: bad entry {name!r:.80}")
            for queue_text, entry in raw.items():
                queues[(group, topic, _number(name, queue_text))] = _pop_queue(name, entry)
        self._queues = queues
        self.version += 1


def _number(where: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise CorruptMetadata(f"{POP_STATE_FILE}: {where}: bad number {text!r:.24}")
    return int(text)


def _pop_queue(where: str, entry: object) -> PopQueue:
    file = POP_STATE_FILE
    if not isinstance(entry, dict):
        raise CorruptMetadata(f"{file}: {where}: queue entry is not an object")
    pop_offset = entry.get("popOffset")
    if pop_offset is not None and (type(pop_offset) is not int or pop_offset < 0):
        raise CorruptMetadata(f"{file}: {where}: bad popOffset {pop_offset!r:.24}")
    in_flight: dict[int, InFlight] = {}
    for offset_text, record in json_document.get_object(file, entry, "inFlight").items():
        offset = _number(where, offset_text)
        if (
            not isinstance(record, list)
            or len(record) != _RECORD_FIELDS
            or any(type(value) is not int or value < 0 for value in record[:4])
            or not isinstance(record[4], str)
        ):
            raise CorruptMetadata(f"{file}: {where}: bad in-flight record at {offset}")
        in_flight[offset] = InFlight(*record)
    return PopQueue(pop_offset, in_flight)
