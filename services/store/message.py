"""Message: what a producer hands to the store for appending.

Returned messages are :class:`services.store.record.RecordView` objects (alias
``MessageExt``) that carry every field of the stored record.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.store.record import RecordView

MessageExt = RecordView


@dataclass(slots=True)
class Message:
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
