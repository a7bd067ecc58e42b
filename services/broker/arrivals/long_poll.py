"""Parked pulls, woken the moment the store reports an arrival on their queue.

A pull that finds nothing new is parked under ``(topic, queue_id)`` with the
queue offset it asked for, and the hub tells the store it waits on that
queue (the ``on_wait`` callback: ``arrival_watcher`` sends it on the store's
WatchQueues stream) when the queue had no parked pull yet or this one waits
below the others. The store answers with the queue's new max offset
(:meth:`LongPollHub.notify`); every pull parked below it wakes at once and
pulls again, and the pulls still waiting are named to the store again. A pull
nobody wakes times out and is answered with the store's empty status. There
is no sleep-and-retry loop: RocketMQ's PullRequestHoldService re-checks every
parked pull every 5 s as a safety net, which this design replaces with the
token below.

The race between "the store answered: nothing" and "the pull is parked" is
closed by a token: the caller takes :meth:`LongPollHub.token` *before* asking
the store, and :meth:`LongPollHub.wait` returns at once when any arrival for
the queue (or a reconnect of the stream) happened since. Such a wake-up may be
for a message the caller already saw; it then pulls once more and parks again,
so a stale arrival costs one extra pull, never a lost wake-up.

The store keeps a named queue until its next arrival (one arrival per
interest), so the hub names a queue only when the store is not watching it
already at or below the offset (``_watched``): a consumer of 1,024 queues
that parks again after each answer sends nothing for the 1,023 that stayed
quiet. While the store watches a queue, nothing can have arrived on it unseen,
so the store's last "nothing new" answer for it (:meth:`LongPollHub.remember_idle`)
still holds; a PullQueues pass takes it instead of asking the store again
(:meth:`LongPollHub.idle_answers`) and reads only the queues that may have news.
An arrival (which the store also reports for a queue a replica's truncation
shortened), a reconnect of the stream and :meth:`close` forget both.

The store's report of an arrival travels on the watch stream, apart from the
append's answer, and may come after it: a producer told "stored" could pull
through this broker at once and be answered from a "nothing new" that no
longer holds. So the broker's own appends count too (:meth:`LongPollHub.written`,
told by the store client whether the append was answered or not): the queue's
kept answer is forgotten and its arrival counter moves, so a read already in
flight keeps nothing and a pull about to park pulls once more. Only the
store's report wakes parked pulls and ends its watch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]
"""``(topic, queue_id)``."""


ArrivalToken = tuple[int, int]
"""What the hub had seen of a queue when a pull asked the store: ``(epoch, arrivals)``
(a plain tuple: a pull of 1,024 queues takes one per queue and pass)."""


@dataclass(slots=True, eq=False)
class _Parked:
    queue_offset: int
    future: asyncio.Future[bool] = field(repr=False)


class LongPollHub:
    """Parked pulls by queue, and the arrival counters that wake them."""

    def __init__(
        self, max_parked: int, on_wait: Callable[[str, int, int], None] | None = None
    ) -> None:
        self._max_parked = max_parked
        self._on_wait = on_wait or _nobody
        """``(topic, queue_id, queue_offset)``: a pull now waits on the queue past the offset."""
        self._epoch = 0
        self._arrivals: dict[QueueKey, int] = {}
        self._parked: dict[QueueKey, list[_Parked]] = {}
        self._parked_count = 0
        self._closed = False
        self._watched: dict[QueueKey, int] = {}
        """Queues the store watches for the hub (named, no arrival since): the offset named."""
        self._idle: dict[QueueKey, tuple[int, Any]] = {}
        """The store's last "nothing new" answer of a queue, with the offset it answered."""

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (shutdown): nothing parks any more."""
        return self._closed

    @property
    def parked_count(self) -> int:
        """Pulls parked right now."""
        return self._parked_count

    def token(self, topic: str, queue_id: int) -> ArrivalToken:
        """Take before asking the store; pass to :meth:`wait`."""
        return self._epoch, self._arrivals.get((topic, queue_id), 0)

    def tokens(self, queues: Sequence[tuple[str, int, int]]) -> list[ArrivalToken]:
        """:meth:`token` of each ``(topic, queue_id, queue_offset)``."""
        epoch, arrivals = self._epoch, self._arrivals
        return [(epoch, arrivals.get((topic, queue_id), 0)) for topic, queue_id, _ in queues]

    def watching(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """True while the store watches the queue from ``queue_offset`` or below for the hub
        (named, no arrival since): any message past the offset will reach :meth:`notify`."""
        named = self._watched.get((topic, queue_id))
        return named is not None and named <= queue_offset

    def remember_idle(
        self, topic: str, queue_id: int, queue_offset: int, token: ArrivalToken, answer: Any
    ) -> None:
        """Keep the store's answer "nothing new at ``queue_offset``", read after ``token``
        was taken, unless an arrival came since (then it may be out of date already)."""
        if token == self.token(topic, queue_id):
            self._idle[(topic, queue_id)] = (queue_offset, answer)

    def idle_answers(self, queues: Sequence[tuple[str, int, int]]) -> list[Any]:
        """For each ``(topic, queue_id, queue_offset)``, the answer kept by
        :meth:`remember_idle` for that offset while it still holds (the store watches
        the queue from that offset, no arrival since); else None."""
        watched, idle = self._watched, self._idle
        answers = []
        for topic, queue_id, queue_offset in queues:
            key = (topic, queue_id)
            kept = idle.get(key) if watched.get(key) == queue_offset else None
            answers.append(kept[1] if kept is not None and kept[0] == queue_offset else None)
        return answers

    def notify(self, topic: str, queue_id: int, max_offset: int) -> int:
        """The queue now ends at ``max_offset``: wake the pulls parked below it."""
        key = (topic, queue_id)
        self._arrivals[key] = self._arrivals.get(key, 0) + 1
        self._watched.pop(key, None)  # the store forgets a queue at its arrival
        self._idle.pop(key, None)
        parked = self._parked.get(key)
        if not parked:
            return 0
        waiting = [p for p in parked if p.queue_offset >= max_offset]
        woken = _resolve([p for p in parked if p.queue_offset < max_offset], True)
        if waiting:
            self._parked[key] = waiting
            self._watch(key, min(p.queue_offset for p in waiting))
        else:
            del self._parked[key]
        return woken

    def written(self, topic: str, queue_id: int) -> None:
        """This broker appended to the queue (answered or not): the store's last "nothing
        new" answer may be out of date before its arrival report comes (module docstring)."""
        key = (topic, queue_id)
        self._arrivals[key] = self._arrivals.get(key, 0) + 1
        self._idle.pop(key, None)

    def wake(self, topic: str, queue_id: int) -> int:
        """Wake every pull parked on the queue to pull again (its offset was reset)."""
        return self.notify(topic, queue_id, 1 << 63)

    def wake_all(self) -> int:
        """Wake every parked pull to pull again (arrivals may have been missed)."""
        self._forget_store()
        parked, self._parked = self._parked, {}
        return sum(_resolve(entries, True) for entries in parked.values())

    def close(self) -> None:
        """Answer every parked pull now and park no more (shutdown)."""
        self._closed = True
        self._forget_store()
        parked, self._parked = self._parked, {}
        for entries in parked.values():
            _resolve(entries, False)

    async def wait(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        token: ArrivalToken,
        timeout_s: float,
        *,
        counted: bool = True,
    ) -> bool:
        """Park until the queue passes ``queue_offset``; True to pull again, False on timeout.

        Returns True at once when an arrival or reconnect happened since ``token``
        was taken, and False at once when the hub is closed or full. ``counted``
        False is for the broker's own waits (the delay scheduler's, one per
        level): they hold no client call, so they neither count against
        ``max_parked`` nor are refused by it.
        """
        return await self.wait_any(
            [(topic, queue_id, queue_offset, token)], timeout_s, counted=counted
        )

    async def wait_any(
        self,
        waits: Sequence[tuple[str, int, int, ArrivalToken]],
        timeout_s: float,
        *,
        counted: bool = True,
    ) -> bool:
        """:meth:`wait` on several queues at once (``(topic, queue_id, queue_offset, token)``
        each): True as soon as one of them passes its offset; one parked pull."""
        if self._closed or timeout_s <= 0:
            return False
        if any(token != self.token(topic, queue_id) for topic, queue_id, _, token in waits):
            return True
        if counted and self._parked_count >= self._max_parked:
            log.warning("long poll: %d pulls parked already; answering at once", self._parked_count)
            return False
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entries = []
        parked = self._parked
        for topic, queue_id, queue_offset, _ in waits:
            key = (topic, queue_id)
            entry = _Parked(queue_offset, future)
            self._watch(key, queue_offset)
            parked.setdefault(key, []).append(entry)
            entries.append((key, entry))
        self._parked_count += counted
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            return False
        finally:
            self._parked_count -= counted
            for key, entry in entries:
                self._forget(key, entry)

    def _watch(self, key: QueueKey, queue_offset: int) -> None:
        """Have the store watch the queue past ``queue_offset`` unless it does from lower."""
        named = self._watched.get(key)
        if named is None or queue_offset < named:
            self._watched[key] = queue_offset
            self._on_wait(key[0], key[1], queue_offset)

    def _forget_store(self) -> None:
        """A new stream (or none): the store watches nothing; earlier arrivals may be unseen."""
        self._epoch += 1
        self._watched.clear()
        self._idle.clear()

    def _forget(self, key: QueueKey, entry: _Parked) -> None:
        entries = self._parked.get(key)
        if entries is not None and entry in entries:
            entries.remove(entry)
            if not entries:
                del self._parked[key]


def _nobody(topic: str, queue_id: int, queue_offset: int) -> None:
    """The default ``on_wait``: nobody to tell."""


def _resolve(entries: list[_Parked], value: bool) -> int:
    count = 0
    for entry in entries:
        if not entry.future.done():
            entry.future.set_result(value)
            count += 1
    return count
