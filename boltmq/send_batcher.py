"""SendBatcher: synchronous sends that wait behind a call in flight leave together.

Natural batching (Kafka's producer, RocketMQ 5's auto-batching) without a
linger: many threads each calling ``Producer.send`` and waiting would pay one
SendMessage round trip per message. Here sends are keyed by where their call
goes (the producer's key: broker address, topic and queue, or ``-1`` for the
queue of an unsharded send, which any queue of that broker takes):

- a send whose key has no call in flight leaves at once, alone (no added delay);
- sends that arrive while that key's call is in flight queue up, in arrival
  order, and leave together as the key's next call when it returns: the first
  of them makes the call for all (the others wait), so one call per key is in
  flight at a time and the messages of one key keep their call order;
- a call takes at most ``max_messages`` messages and ``max_bytes`` of records
  (one send bigger than that still goes, alone); the rest wait for the next.

Each send hands its records (CommitLog records back to back), their count and
its deadline (monotonic seconds). The call is made with the records of the
batch joined, ``count`` the sum, and a timeout up to the earliest deadline of
the batch; it must answer one result per message, in order. Every send then
gets its own slice of the results, or, when the call raised, the same
exception, which it handles as it would its own call's (the producer retries
or fails each message on its own). A call answering the wrong number of results
fails every send of it with :class:`BatchMismatch`.

The call function of a batch is that of its first send (every send of one key
makes the same request but for its records). The batcher knows nothing of
gRPC: tests drive it with a fake call and threads they release by hand.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

R = TypeVar("R")
Call = Callable[[bytes, int, float], Sequence[R]]
"""``call(records, count, timeout_s)``: one result per message, in order."""
Clock = Callable[[], float]
"""Monotonic seconds."""

MIN_TIMEOUT_S = 0.001
"""The timeout of a call whose earliest deadline has passed (the call then times out)."""


class BatchMismatch(Exception):
    """A call answered another number of results than messages it carried."""


class _Send(Generic[R]):
    """One waiting send: its records, and how it ended (results or error)."""

    __slots__ = ("records", "count", "deadline", "call", "done", "results", "error", "batch")

    def __init__(self, records: bytes, count: int, deadline: float, call: Call[R]) -> None:
        self.records = records
        self.count = count
        self.deadline = deadline
        self.call = call
        self.done = threading.Lock()
        """Released (once) when this send ended, or when it is to make its batch's call
        (``batch``); its thread waits by acquiring it: a bare lock costs a send less than
        an Event (no Condition, no waiter list)."""
        self.done.acquire()
        self.results: Sequence[R] = ()
        self.error: BaseException | None = None
        self.batch: list[_Send[R]] | None = None


class SendBatcher(Generic[R]):
    """Groups the sends of one key that wait behind that key's call in flight."""

    def __init__(self, max_messages: int, max_bytes: int, clock: Clock = time.monotonic) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("max_messages and max_bytes must be positive")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[Hashable, list[_Send[R]]] = {}
        """Key -> sends queued behind its call in flight; a key is here while busy."""
        self.calls = 0
        """Calls made (a batch is one)."""

    def queued(self, key: Hashable) -> int:
        """Sends waiting behind ``key``'s call in flight (0 when none is in flight)."""
        with self._lock:
            return len(self._waiting.get(key, ()))

    def send(
        self, key: Hashable, records: bytes, count: int, deadline: float, call: Call[R]
    ) -> Sequence[R]:
        """The results of ``count`` messages (``records``), sent alone or in a batch of
        ``key``; raises what their call raised."""
        me = _Send(records, count, deadline, call)
        with self._lock:
            queued = self._waiting.get(key)
            if queued is None:
                self._waiting[key] = []
                me.batch = [me]
            else:
                queued.append(me)
        if me.batch is None:
            me.done.acquire()
        if me.batch is not None:  # this send makes the call, for its whole batch
            self._call(key, me.batch)
        if me.error is not None:
            raise me.error
        return me.results

    def _call(self, key: Hashable, batch: list[_Send[R]]) -> None:
        count = sum(s.count for s in batch)
        timeout = max(min(s.deadline for s in batch) - self._clock(), MIN_TIMEOUT_S)
        records = batch[0].records if len(batch) == 1 else b"".join(s.records for s in batch)
        try:
            with self._lock:
                self.calls += 1
            results = batch[0].call(records, count, timeout)
            if len(results) != count:
                raise BatchMismatch(f"{len(results)} results for {count} messages")
        except BaseException as exc:  # every send of the batch must hear how it ended
            for send in batch:
                send.error = exc
        else:
            start = 0
            for send in batch:
                send.results = results[start : start + send.count]
                start += send.count
        leader = self._next(key)
        if leader is not None:  # first: the next call goes out while the others wake
            leader.done.release()
        for send in batch[1:]:
            send.done.release()

    def _next(self, key: Hashable) -> _Send[R] | None:
        """Hand the key to the next batch (its first send makes the call), or free it."""
        with self._lock:
            queued = self._waiting[key]
            if not queued:
                del self._waiting[key]
                return None
            taken, messages, size = 0, 0, 0
            for send in queued:
                if taken and (
                    messages + send.count > self.max_messages
                    or size + len(send.records) > self.max_bytes
                ):
                    break
                taken += 1
                messages += send.count
                size += len(send.records)
            batch = queued[:taken]
            del queued[:taken]
            batch[0].batch = batch
            return batch[0]
