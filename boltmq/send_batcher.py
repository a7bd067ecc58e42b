"""SendBatcher: synchronous sends that wait behind a call in flight leave together.

Natural batching (Kafka's producer, RocketMQ 5's auto-batching) without a
linger: many threads each calling ``Producer.send`` and waiting would pay one
SendMessage round trip per message. Here sends are keyed by where their call
goes (the producer's keys: broker address, topic and queue, or ``-1`` for the
queue of an unsharded send, which any queue of that broker takes; or the broker
address alone for unsharded sends of any topic, when the broker takes one request
of several topics):

- a send whose key has no call in flight leaves at once, alone (no added delay);
- sends that arrive while that key's call is in flight queue up, in arrival
  order, and leave together as the key's next call when it returns: the first
  of them makes the call for all (the others wait), so one call per key is in
  flight at a time and the messages of one key keep their call order;
- a key may be given more lanes (``lanes``): then a send that finds fewer calls
  than that in flight and nobody queued leaves at once in another call, so the
  next call is on its way while the last is still answered (the producer gives
  its unsharded sends two: they keep no order but their own thread's);
- a call takes at most ``max_messages`` messages, ``max_bytes`` of records and
  ``max_sends`` sends (one send bigger than that still goes, alone); the rest
  wait for the next.

Each send hands its part (what the call needs of it: its records, topic, queue),
the messages and record bytes it carries, and its deadline (monotonic seconds).
The call is made with the parts of the batch, in order, and a timeout up to the
earliest deadline of the batch; it answers one outcome per part, in order: the
part's results (one per message) or the exception that send is to raise (a key
may hold sends the call makes into one request of several sections, each
answered on its own). When the call itself raises, every send of the batch gets
that exception, which it handles as it would its own call's (the producer
retries or fails each message on its own). A call answering the wrong number of
outcomes, or of results for a part, fails those sends with :class:`BatchMismatch`.

The call function of a batch is that of its first send (every send of one key
makes the same kind of request, from its parts). The batcher knows nothing of
gRPC: tests drive it with a fake call and threads they release by hand.

Waking a batch: the thread that made the call first wakes the next batch's first
send (the next call leaves at once), then only the second send of its own batch;
each woken send wakes the one after it before it returns. Woken all at once, a
batch's threads all fought for the GIL, and each lost round was another sleep and
wake in the kernel: with 64 threads sharing a Producer the chain cut the client's
context switches from 4.3-4.6 to 3.0-3.9 a send and raised the rate 3-39 % in ten
alternated pairs (bench/history/side-by-side.md, "Waking a batch in a chain"). A
waiting send that a signal interrupts (KeyboardInterrupt) therefore still waits for
its batch to end, wakes the next and only then raises, so no later send of its batch
is left asleep; the wait is bounded by the batch's deadline. Should a signal still
break the chain (raised in the main thread's send between its queueing and its wait),
each later send of the batch finds its batch ended at its next look
(``WAKE_CHECK_S``) and goes on, waking the next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

P = TypeVar("P")
R = TypeVar("R")
Call = Callable[[Sequence[P], float], Sequence[Sequence[R] | BaseException]]
"""``call(parts, timeout_s)``: per part, in order, its results (one per message) or the
exception its send raises."""
Clock = Callable[[], float]
"""Monotonic seconds."""

MIN_TIMEOUT_S = 0.001
"""The timeout of a call whose earliest deadline has passed (the call then times out)."""
WAKE_CHECK_S = 1.0
"""How long a waiting send sleeps between looks at whether its batch has ended without
its wake (a chain a signal broke); the wake itself comes at once."""


class BatchMismatch(Exception):
    """A call answered another number of results than messages it carried."""


class _Send(Generic[P, R]):
    """One waiting send: its part, and how it ended (results or error)."""

    __slots__ = (
        "part",
        "count",
        "size",
        "deadline",
        "call",
        "done",
        "results",
        "error",
        "batch",
        "wake_next",
        "ended",
    )

    def __init__(self, part: P, count: int, size: int, deadline: float, call: Call[P, R]) -> None:
        self.part = part
        self.count = count
        self.size = size
        self.deadline = deadline
        self.call = call
        self.done = threading.Lock()
        """Released (once) when this send is woken: its batch ended (by the thread that
        made the call, or by the send before it in the batch), or it is to make its
        batch's call (``batch``); its thread waits by acquiring it: a bare lock costs a
        send less than an Event (no Condition, no waiter list)."""
        self.done.acquire()
        self.results: Sequence[R] = ()
        self.error: BaseException | None = None
        self.batch: list[_Send[P, R]] | None = None
        self.wake_next: _Send[P, R] | None = None
        """The send of the same batch this one wakes once woken (set before the first
        of the batch is woken)."""
        self.ended = False
        """Its batch's call has returned and its outcome is set (before any wake)."""


def _wait(me: _Send[P, R]) -> None:
    """Until ``me`` is woken (its batch ended, or it is to make the next call), or found
    so without its wake; then wake the send after it. An interruption while waiting is
    raised only after that."""
    interrupted: BaseException | None = None
    while True:
        try:
            if me.done.acquire(timeout=WAKE_CHECK_S) or me.ended or me.batch is not None:
                break
        except BaseException as exc:  # a signal's handler raised: wait on, raise below
            interrupted = exc
    after = me.wake_next
    if after is not None:
        after.done.release()
    if interrupted is not None:
        raise interrupted


class SendBatcher(Generic[P, R]):
    """Groups the sends of one key that wait behind that key's call in flight."""

    def __init__(
        self,
        max_messages: int,
        max_bytes: int,
        clock: Clock = time.monotonic,
        max_sends: int = 1 << 30,
    ) -> None:
        if min(max_messages, max_bytes, max_sends) < 1:
            raise ValueError("max_messages, max_bytes and max_sends must be positive")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.max_sends = max_sends
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[Hashable, list[_Send[P, R]]] = {}
        """Key -> sends queued behind its calls in flight; a key is here while busy."""
        self._flying: dict[Hashable, int] = {}
        """Key -> its calls in flight (while busy)."""
        self.calls = 0
        """Calls made (a batch is one)."""

    def queued(self, key: Hashable) -> int:
        """Sends waiting behind ``key``'s call in flight (0 when none is in flight)."""
        with self._lock:
            return len(self._waiting.get(key, ()))

    def send(
        self,
        key: Hashable,
        part: P,
        count: int,
        size: int,
        deadline: float,
        call: Call[P, R],
        lanes: int = 1,
    ) -> Sequence[R]:
        """The results of ``part``'s ``count`` messages (``size`` bytes of records), sent
        alone or in a batch of ``key``; raises what their call raised, or what it answered
        for this part. ``lanes``: the calls ``key`` may have in flight at once (1 keeps
        the key's call order)."""
        with self._lock:
            queued = self._waiting.get(key)
            if queued is None:  # the key is free: this send leaves at once, alone
                self._waiting[key] = []
                self._flying[key] = 1
                alone = True
            elif not queued and self._flying[key] < lanes:  # another lane is free
                self._flying[key] += 1
                alone = True
            else:
                alone = False
                me = _Send(part, count, size, deadline, call)
                queued.append(me)
            if alone:
                self.calls += 1
        if alone:
            return self._call_alone(key, part, count, deadline, call)
        _wait(me)
        if me.batch is not None:  # this send makes the call, for its whole batch
            self._call(key, me.batch)
        if me.error is not None:
            raise me.error
        return me.results

    def _call_alone(
        self, key: Hashable, part: P, count: int, deadline: float, call: Call[P, R]
    ) -> Sequence[R]:
        """The call of a send that found a lane of its key free: it carries that send
        alone (nothing to wait for or wake but the next batch)."""
        try:
            outcomes = call((part,), max(deadline - self._clock(), MIN_TIMEOUT_S))
        finally:
            leader = self._next(key)
            if leader is not None:
                leader.done.release()
        if len(outcomes) != 1:
            raise BatchMismatch(f"{len(outcomes)} outcomes for 1 sends")
        outcome = outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        if len(outcome) != count:
            raise BatchMismatch(f"{len(outcome)} results for {count} messages")
        return outcome

    def _call(self, key: Hashable, batch: list[_Send[P, R]]) -> None:
        timeout = max(min(s.deadline for s in batch) - self._clock(), MIN_TIMEOUT_S)
        try:
            with self._lock:
                self.calls += 1
            outcomes = batch[0].call([s.part for s in batch], timeout)
            if len(outcomes) != len(batch):
                raise BatchMismatch(f"{len(outcomes)} outcomes for {len(batch)} sends")
        except BaseException as exc:  # every send of the batch must hear how it ended
            for send in batch:
                send.error = exc
        else:
            for send, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    send.error = outcome
                elif len(outcome) != send.count:
                    send.error = BatchMismatch(f"{len(outcome)} results for {send.count} messages")
                else:
                    send.results = outcome
        leader = self._next(key)
        if leader is not None:  # first: the next call goes out while the others wake
            leader.done.release()
        woken = batch[1:]
        for send, after in zip(woken, woken[1:], strict=False):  # the last wakes none
            send.wake_next = after
        for send in woken:
            send.ended = True
        if woken:
            woken[0].done.release()

    def _next(self, key: Hashable) -> _Send[P, R] | None:
        """Hand the key to the next batch (its first send makes the call), or free it."""
        with self._lock:
            queued = self._waiting[key]
            if not queued:
                self._flying[key] -= 1
                if not self._flying[key]:
                    del self._waiting[key], self._flying[key]
                return None
            taken, messages, size = 0, 0, 0
            for send in queued:
                if taken and (
                    messages + send.count > self.max_messages
                    or size + send.size > self.max_bytes
                    or taken == self.max_sends
                ):
                    break
                taken += 1
                messages += send.count
                size += send.size
            batch = queued[:taken]
            del queued[:taken]
            batch[0].batch = batch
            return batch[0]
