"""PopWakeups: where POP receives of a (group, topic) wait, and what wakes them.

A receive with nothing to deliver waits for the first of: an arrival on one of the
topic's queues (the long-poll hub, :mod:`services.broker.arrivals.long_poll`), a change
of the group's state on the topic (an ack, a change of invisibility, a burial: a FIFO
message group may be free now, or a message visible sooner), or its timeout (the
caller's deadline, or the next invisible time to run out). ``generation`` counts the
changes, so a receive that saw one while it was looking goes round again instead of
waiting for the next.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from boltmq.kernel import runtime
from services.broker.arrivals.long_poll import ArrivalToken, LongPollHub

GroupTopic = tuple[str, str]


class PopWakeups:
    """Per (group, topic) change counters and the receives waiting on them."""

    def __init__(self, hub: LongPollHub) -> None:
        self._hub = hub
        self._nudges: dict[GroupTopic, asyncio.Future[None]] = {}
        """Receives of a (group, topic) waiting for a change: resolved at the next one."""
        self._generations: dict[GroupTopic, int] = {}

    @property
    def closed(self) -> bool:
        """The broker is stopping: receives answer at once."""
        return self._hub.closed

    def generation(self, key: GroupTopic) -> int:
        """Changes of ``key``'s state so far."""
        return self._generations.get(key, 0)

    def changed(self, key: GroupTopic) -> None:
        """``key``'s state changed: wake its waiting receives."""
        self._generations[key] = self._generations.get(key, 0) + 1
        nudge = self._nudges.pop(key, None)
        if nudge is not None and not nudge.done():
            nudge.set_result(None)

    async def wait(
        self,
        key: GroupTopic,
        waits: Sequence[tuple[str, int, int, ArrivalToken]],
        timeout_s: float,
    ) -> None:
        """Until an arrival on one of ``waits`` (``(topic, queue_id, queue_offset, token)``,
        as :meth:`LongPollHub.wait_any` takes them), a change of ``key``, or the timeout."""
        if timeout_s <= 0:
            return
        nudge = self._nudges.get(key)
        if nudge is None or nudge.done():
            nudge = self._nudges[key] = asyncio.get_running_loop().create_future()
        arrival = asyncio.ensure_future(self._hub.wait_any(waits, timeout_s))
        try:
            await asyncio.wait((arrival, nudge), timeout=timeout_s, return_when="FIRST_COMPLETED")
            if arrival.done() and not arrival.result() and not nudge.done() and not self.closed:
                # the hub is full: wait for a change of the group's state only
                await asyncio.wait((nudge,), timeout=timeout_s)
        finally:
            await runtime.cancel_and_wait(arrival)
