"""Offset resets not yet seen by the group's consumers (``boltmq admin group reset-offset``).

A reset commits the new offset of each queue at once
(:class:`~services.broker.metadata.consumer_offset.ConsumerOffsetManager`), but a
live PushConsumer keeps its own next offset in memory and would go on from it,
and commit it over the reset. So the broker also remembers the reset here,
``(group, topic, queue_id) -> offset``, until a pull of the group on that queue
starts at that offset:

- a pull (PullQueues or PullMessage) of the group from any other offset is
  answered ``OFFSET_RESET`` with ``next_begin_offset`` the reset offset, and no
  messages; the SDK's consumer moves its queue there, exactly as it does after a
  filtered answer, and commits it;
- the first pull from the reset offset drops the entry and is answered as usual.

Commits are never refused meanwhile: a consumer that committed its old progress
before its next pull is moved back by that pull and commits the reset offset
then; if it dies first, the queue's next owner starts from the old commit and
its first pull is moved the same way. The table lives in memory only (a broker
restart forgets resets not yet seen, keeping the committed offsets).
"""

from __future__ import annotations

ResetKey = tuple[str, str, int]
"""``(group, topic, queue_id)``."""


class OffsetResets:
    """Reset offsets the group's consumers have not pulled from yet."""

    def __init__(self) -> None:
        self._pending: dict[ResetKey, int] = {}

    def reset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The group's consumers must go on from ``offset`` on the queue."""
        self._pending[(group, topic, queue_id)] = offset

    def moved_to(self, group: str, topic: str, queue_id: int, queue_offset: int) -> int | None:
        """Where a pull of the group from ``queue_offset`` must go instead (None: pull as
        asked); a pull from the reset offset itself ends the reset."""
        key = (group, topic, queue_id)
        offset = self._pending.get(key)
        if offset is None:
            return None
        if offset == queue_offset:
            del self._pending[key]
            return None
        return offset

    def __len__(self) -> int:
        return len(self._pending)
