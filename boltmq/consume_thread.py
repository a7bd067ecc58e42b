"""ConsumeThread: one of a PushConsumer's threads, pulling its share of the owned queues.

Each pass delivers the pending messages of its queues that are due, then pulls
every queue of its share with nothing pending in one PullQueues call per
broker (long-polling them together: an arrival in any queue answers the
call), and hands each queue's messages to the listener in queue order. A
queue's offset moves only when the listener has taken its messages, so a
pass that is cut short (a rebalance kicks the thread) loses nothing.

The thread is handed what it uses, not the consumer: its share of the queues
comes from ``share`` at the start of every pass (None: stop), a batch goes to
the listener through ``deliver`` and, when the consumer sends failed messages
back to the broker, through ``send_back``.

A queue an operator reset (``boltmq admin group reset-offset``) is answered
``OFFSET_RESET`` by the broker with the reset offset, which the broker has
committed already: the queue goes on from there, like after a filtered answer,
and its later progress is committed over the reset as usual.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

import grpc

from boltmq.client import ClientInstance
from boltmq.kernel.registry_client import RegistryError
from boltmq.message import MessageQueue, ReceivedMessage
from boltmq.message_selector import MessageSelector
from boltmq.options import PushConsumerOptions
from boltmq.pull_consumer import PullError, PullResult, PullStatus, pull_queues

log = logging.getLogger(__name__)

PULL_BACKOFF_S = 1.0
"""Pause after a failed pull (broker down, route changing) before the next one."""


class QueueState:
    """One owned queue: where its next pull starts and what the listener has yet to take."""

    __slots__ = ("queue", "offset", "committed", "pending", "after", "due")

    def __init__(self, queue: MessageQueue, offset: int) -> None:
        self.queue = queue
        self.offset = offset
        """The next message to consume (what a commit records)."""
        self.committed = offset
        self.pending: list[ReceivedMessage] = []
        """Pulled messages the listener has not taken yet (the queue is not pulled)."""
        self.after = offset
        """Where the queue goes on once ``pending`` is consumed (filtered messages skipped)."""
        self.due = 0.0
        """``time.monotonic()`` before which the queue is left alone (after a failure)."""


Share = Callable[["ConsumeThread"], "list[QueueState] | None"]
"""The queue states a thread serves in its next pass (None: the consumer stops)."""
Deliver = Callable[[list[ReceivedMessage]], bool]
"""Call the listener; True when the messages count as consumed."""
SendBack = Callable[[MessageQueue, list[ReceivedMessage]], list[ReceivedMessage]]
"""Send failed messages back to the broker; those it did not take."""


class ConsumeThread:
    """A thread that pulls its share of the owned queues (see the module docstring)."""

    def __init__(
        self,
        index: int,
        client: ClientInstance,
        group: str,
        expressions: Mapping[str, MessageSelector],
        options: PushConsumerOptions,
        share: Share,
        deliver: Deliver,
        send_back: SendBack | None,
    ) -> None:
        self.index = index
        """Which share of the owned queues this thread serves."""
        self.parked = False
        """At the start of a pass, waiting while the owner reassigns the queues."""
        self.wake = threading.Event()
        """Set to end the current wait or long poll (cleared by ``share``)."""
        self._client = client
        self._group = group
        self._expressions = expressions
        self._options = options
        self._share = share
        self._deliver_batch = deliver
        self._send_back = send_back
        self._suspend_on_failure_s = options.suspend_on_failure_ms / 1000
        self._calls: list[grpc.Future] | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"boltmq-consume-{index}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def kick(self) -> None:
        """End the current wait or long poll at once (nothing pulled is lost: the
        queues' offsets move only when the listener has taken their messages)."""
        self.wake.set()
        for call in self._calls or ():
            call.cancel()

    def join(self, timeout_s: float) -> None:
        if self._thread.ident is not None:  # started
            self._thread.join(timeout_s)

    def _track(self, calls: list[grpc.Future] | None) -> None:
        self._calls = calls
        if calls is not None and self.wake.is_set():
            for call in calls:
                call.cancel()

    def _run(self) -> None:
        while True:
            states = self._share(self)
            if states is None:
                return
            try:
                self._pass(states)
            except Exception:  # never lose the thread (and its queues) to a surprise
                log.exception("consuming %d queue(s) failed; trying again", len(states))
                self.wake.wait(PULL_BACKOFF_S)

    def _pass(self, states: list[QueueState]) -> None:
        """Deliver what is due, then pull every queue with nothing pending."""
        now = time.monotonic()
        for state in states:
            if state.pending and state.due <= now and not self.wake.is_set():
                self._deliver(state)
        now = time.monotonic()
        ready = {s.queue: s for s in states if not s.pending and s.due <= now}
        later = [s.due for s in states if s.due > now]
        wait_s = min(later) - now if later else self._options.long_poll_ms / 1000
        if not ready or self.wake.is_set():
            self.wake.wait(wait_s if states else None)
            return
        results = self._pull(ready, wait_s)
        for queue, result in results.items():
            state = ready[queue]
            if result.status is PullStatus.FOUND and result.messages:
                state.pending, state.after = result.messages, result.next_begin_offset
            else:
                state.offset = result.next_begin_offset
                if result.status is PullStatus.OFFSET_RESET:  # the broker committed it
                    state.committed = result.next_begin_offset
        for queue in results:
            if ready[queue].pending and not self.wake.is_set():
                self._deliver(ready[queue])

    def _pull(
        self, ready: dict[MessageQueue, QueueState], wait_s: float
    ) -> dict[MessageQueue, PullResult]:
        """One pull of the ``ready`` queues; the queues whose pull failed wait a while."""
        options = self._options
        failures: dict[MessageQueue, Exception] = {}
        try:
            results = pull_queues(
                self._client,
                self._group,
                {q: s.offset for q, s in ready.items()},
                max_messages=options.pull_batch_size,
                subscriptions=self._expressions,
                wait_ms=int(min(options.long_poll_ms, wait_s * 1000)),
                max_bytes=options.pull_max_bytes,
                track=self._track,
                failures=failures,
            )
        except (PullError, RegistryError, OSError) as exc:
            if isinstance(exc, PullError) and exc.code is grpc.StatusCode.CANCELLED:
                return {}
            failures, results = dict.fromkeys(ready, exc), {}
        if failures:
            log.warning(
                "%s (%d queue(s) wait %.1f s)",
                next(iter(failures.values())),
                len(failures),
                PULL_BACKOFF_S,
            )
            for queue in failures:
                ready[queue].due = time.monotonic() + PULL_BACKOFF_S
        return results

    def _deliver(self, state: QueueState) -> None:
        """Hand ``state``'s pending messages to the listener, a batch at a time, until
        done, reassigned or a batch fails (then the queue waits suspend_on_failure)."""
        size = 1 if self._options.orderly else self._options.consume_batch_max_size
        while state.pending and not self.wake.is_set():
            chunk = state.pending[:size]
            if not self._deliver_batch(chunk):
                left = self._send_back(state.queue, chunk) if self._send_back else chunk
                if left:  # retried in place: the queue's offset does not pass them
                    state.pending[: len(chunk)] = left
                    state.due = time.monotonic() + self._suspend_on_failure_s
                    return
            del state.pending[: len(chunk)]
            state.offset = chunk[-1].queue_offset + 1
        if not state.pending:
            state.offset = state.after
