"""Committed consumer offsets (consumerOffset.json).

Offsets live in memory and are written to the store every
``offset_persist_interval_ms`` when something changed, and at shutdown, as
RocketMQ does; a crash loses at most one interval of commits, which consumers
re-read (at-least-once). ``version`` counts changes so the persister can tell
whether a write is due without comparing tables.

The file keeps RocketMQ's shape, queue ids as JSON object keys::

    {"offsetTable": {"TopicA@GroupA": {"0": 12, "1": 7}}}
"""

from __future__ import annotations

from boltmq.wire.topic import is_group, is_topic
from services.broker.errors import CorruptMetadata
from services.broker.metadata import json_document
from services.broker.metadata.names import dropped_at_load

CONSUMER_OFFSET_FILE = "consumerOffset.json"
KEY_SEPARATOR = "@"
"""Neither topic nor group names may contain '@', so ``topic@group`` splits unambiguously."""


def offset_key(topic: str, group: str) -> str:
    """The table key of a (topic, group) pair."""
    return f"{topic}{KEY_SEPARATOR}{group}"


class ConsumerOffsetManager:
    """``topic@group -> {queue_id: offset}`` with a change counter."""

    def __init__(self) -> None:
        self._table: dict[str, dict[int, int]] = {}
        self.version = 0
        """Incremented on every change; the persister writes when it moved."""

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next message the group will consume from the queue.

        The newest commit wins even when it is smaller: that is how an operator
        or a client resets a group (RocketMQ does the same).
        """
        queues = self._table.setdefault(offset_key(topic, group), {})
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.version += 1

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or None when the group never committed on the queue."""
        return self._table.get(offset_key(topic, group), {}).get(queue_id)

    def offsets_of_group(self, group: str) -> dict[str, dict[int, int]]:
        """``{topic: {queue_id: offset}}`` of one group (copies)."""
        result = {}
        for key, queues in self._table.items():
            topic, _, owner = key.partition(KEY_SEPARATOR)
            if owner == group:
                result[topic] = dict(queues)
        return result

    def snapshot(self) -> list[tuple[tuple[str, str], dict[int, int]]]:
        """``((group, topic), {queue_id: offset})`` copies, safe to take from another thread
        (metrics collection): only C-level copies of the dicts, no Python-level iteration
        over a live one."""
        result = []
        for key, queues in list(self._table.items()):
            topic, _, group = key.partition(KEY_SEPARATOR)
            result.append(((group, topic), dict(queues)))
        return result

    def groups(self) -> set[str]:
        """Every group with at least one committed offset."""
        return {key.partition(KEY_SEPARATOR)[2] for key in self._table}

    def delete_topic(self, topic: str) -> bool:
        """Forget every group's offsets on a deleted topic; False when there were none."""
        keys = [k for k in self._table if k.partition(KEY_SEPARATOR)[0] == topic]
        for key in keys:
            del self._table[key]
        if keys:
            self.version += 1
        return bool(keys)

    def to_json(self) -> bytes:
        """consumerOffset.json as written to the store."""
        table = {
            key: {str(q): off for q, off in sorted(queues.items())}
            for key, queues in sorted(self._table.items())
        }
        return json_document.dump({"offsetTable": table})

    def load_json(self, data: bytes) -> None:
        """Replace the table with the file's content."""
        file = CONSUMER_OFFSET_FILE
        document = json_document.parse_object(file, data)
        raw = json_document.get_object(file, document, "offsetTable")
        table: dict[str, dict[int, int]] = {}
        for key, queues in raw.items():
            topic, _, group = key.partition(KEY_SEPARATOR)
            if dropped_at_load(file, "group", group) or dropped_at_load(file, "topic", topic):
                continue
            _check_key(key)
            if not isinstance(queues, dict):
                raise CorruptMetadata(f"{file}: {key}: queues are not an object")
            table[key] = {_queue_id(key, q): json_document.get_int(file, queues, q) for q in queues}
        self._table = table
        self.version += 1


def _check_key(key: str) -> None:
    topic, sep, group = key.partition(KEY_SEPARATOR)
    if not sep or not is_topic(topic) or not is_group(group):
        raise CorruptMetadata(f"{CONSUMER_OFFSET_FILE}: bad key {key!r:.80} (want topic@group)")


def _queue_id(key: str, text: str) -> int:
    if not text.isdigit():
        raise CorruptMetadata(f"{CONSUMER_OFFSET_FILE}: {key}: bad queue id {text!r:.20}")
    return int(text)
