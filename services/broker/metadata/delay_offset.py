"""Scheduler progress per delay level (delayOffset.json).

For each level, the offset in its ``SCHEDULE_TOPIC_XXXX`` queue of the first
entry not yet delivered. An offset moves only after the delivered copy was
acknowledged by the store; the table is written every
``offset_persist_interval_ms`` when it moved, and at shutdown. A crash between
a delivery and the next write is repaired by the scheduler, not here (see
:mod:`services.broker.delay.schedule_service`). The file keeps RocketMQ's shape::

    {"offsetTable": {"1": 12, "3": 7}}
"""

from __future__ import annotations

from services.broker.errors import CorruptMetadata
from services.broker.metadata import json_document

DELAY_OFFSET_FILE = "delayOffset.json"


class DelayOffsetManager:
    """``level -> next schedule-queue offset`` with a change counter."""

    def __init__(self) -> None:
        self._table: dict[int, int] = {}
        self.version = 0
        """Incremented on every change; the persister writes when it moved."""

    def get(self, level: int) -> int:
        """The next entry of ``level``'s queue to deliver (0 when never moved)."""
        return self._table.get(level, 0)

    def advance(self, level: int, offset: int) -> None:
        """Record that every entry of ``level`` below ``offset`` was delivered."""
        if self._table.get(level) != offset:
            self._table[level] = offset
            self.version += 1

    def to_json(self) -> bytes:
        """delayOffset.json as written to the store."""
        return json_document.dump(
            {"offsetTable": {str(level): offset for level, offset in sorted(self._table.items())}}
        )

    def load_json(self, data: bytes) -> None:
        """Replace the table with the file's content."""
        file = DELAY_OFFSET_FILE
        raw = json_document.get_object(file, json_document.parse_object(file, data), "offsetTable")
        table = {}
        for key in raw:
            if not (key.isascii() and key.isdigit()) or not 1 <= int(key) <= 1000:
                raise CorruptMetadata(f"{file}: bad delay level {key!r:.20}")
            offset = json_document.get_int(file, raw, key)
            if offset < 0:
                raise CorruptMetadata(f"{file}: level {key}: negative offset {offset}")
            table[int(key)] = offset
        self._table = table
        self.version += 1
