"""StoreMessage: what a producer hands to an embedded store for appending.

Named apart from the SDK's :class:`boltmq.message.Message` (what a client
sends to a broker): the store's carries the store-side fields too (flag,
sys_flag, born host and port, prepared transaction offset).

Returned messages are :class:`boltmq.wire.record.RecordView` objects (alias
``MessageExt``) that carry every field of the stored record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from boltmq.wire.record import RecordView

MessageExt = RecordView


@dataclass(slots=True)
class StoreMessage:
    """A message to append. ``tags`` and ``keys`` become the TAGS and KEYS properties."""

    topic: str
    body: bytes = b""
    queue_id: int = 0
    tags: str | None = None
    keys: list[str] | None = None
    properties: dict[str, str] | None = None
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    """Milliseconds; 0 means "now" at append time."""
    born_host: str = "127.0.0.1"
    born_port: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class MessageLike(Protocol):
    """What the engine reads of a message to append: a :class:`StoreMessage`, or a
    ``boltmq.v1.Message`` protobuf as it arrived (born host given per batch)."""

    @property
    def topic(self) -> str: ...
    @property
    def body(self) -> bytes: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def tags(self) -> str | None: ...
    @property
    def keys(self) -> Iterable[str] | None: ...
    @property
    def properties(self) -> Mapping[str, str] | None: ...
    @property
    def flag(self) -> int: ...
    @property
    def sys_flag(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def reconsume_times(self) -> int: ...
    @property
    def prepared_transaction_offset(self) -> int: ...
