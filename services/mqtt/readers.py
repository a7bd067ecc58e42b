"""QueueReader: one thread long-polling every queue of a set of BoltMQ topics.

The gateway reads the cluster with the SDK's :class:`~boltmq.pull_consumer.PullConsumer`
(``PullQueues``: one call per broker for all the queues it serves). Three uses:

- the pod's fan-out reader (``commits=False``): every topic an ordinary subscription of
  a device on this pod names, from the end of each queue when the topic was added (a
  topic no broker serves yet is read from its first message once it appears); nothing
  is committed: a restarted pod starts at the end again, as MQTT's clean sessions do;
- a persistent session's reader (``commits=True``, the session's own consumer group):
  from the group's committed offsets, committing a batch only once its handler's
  acknowledgements (the device's PUBACKs) all came back, so what a device did not
  acknowledge is read again after a disconnect, on any gateway pod;
- the retained messages' reader (``from_start=True``): the whole retained topic.

:meth:`QueueReader.add_topic` blocks until the topic's start offsets are set, so a
SUBACK sent after it covers every message stored after it. The handler runs on the
reader's thread and returns the futures to wait for before a commit.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence

import grpc

from boltmq.client import TopicNotFound
from boltmq.message import MessageQueue, ReceivedMessage
from boltmq.pull_consumer import PullConsumer, PullError, pull_queue, pull_queues

log = logging.getLogger(__name__)

WAIT_MS = 1_000
"""Long-poll time of one pull; also how soon a stopped reader notices."""
REFRESH_S = 5.0
"""How often the queues of the topics are looked up again (new queues, new brokers)."""
ACK_WAIT_S = 60.0
"""Longest wait for a batch's acknowledgements before the batch is read again."""
RETRY_S = 1.0
BATCH = 32

Handler = Callable[[Sequence[ReceivedMessage]], Sequence["concurrent.futures.Future[bool]"]]


class QueueReader:
    """Reads the queues of ``topics`` and hands each pulled batch to ``handler``."""

    def __init__(
        self,
        consumer: PullConsumer,
        handler: Handler,
        *,
        name: str,
        commits: bool = False,
        from_start: bool = False,
    ) -> None:
        self.consumer = consumer
        self.handler = handler
        self.commits = commits
        self.from_start = from_start
        self._offsets: dict[MessageQueue, int] = {}
        self._topics: dict[str, bool] = {}
        """Topic -> whether its queues were found (False: read from 0 once they are)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._calls: list[grpc.Future] = []
        self._refreshed = 0.0
        self._thread = threading.Thread(target=self._run, name=f"mqtt-{name}", daemon=True)

    def start(self) -> QueueReader:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading (a batch waiting for acknowledgements is not committed)."""
        self._stop.set()
        self._cancel_polls()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(WAIT_MS / 1000 + 5)

    @property
    def topics(self) -> list[str]:
        with self._lock:
            return list(self._topics)

    def add_topic(self, topic: str, resumed: bool = False) -> None:
        """Read ``topic`` too, from now on (blocking: its start offsets are set on return).

        ``resumed``: a persistent session's topic subscribed before: a queue without a
        committed offset is read from its start (it did not exist at the subscription,
        so all of it came after)."""
        with self._lock:
            if topic in self._topics:
                return
        found = self._start_offsets(topic, initial=not resumed)
        with self._lock:
            self._topics[topic] = found is not None
            for queue, offset in (found or {}).items():
                self._offsets.setdefault(queue, offset)
        self._cancel_polls()

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            self._topics.pop(topic, None)
            for queue in [q for q in self._offsets if q.topic == topic]:
                del self._offsets[queue]
        self._cancel_polls()

    # ------------------------------------------------------------------ the thread
    def _start_offsets(self, topic: str, *, initial: bool) -> dict[MessageQueue, int] | None:
        """Where each queue of ``topic`` starts; None when no broker serves it yet."""
        try:
            queues = self.consumer.queues(topic)
        except TopicNotFound:
            return None
        starts = {}
        for queue in queues:
            committed = self.consumer.committed(queue) if self.commits else -1
            if committed >= 0:
                starts[queue] = committed
            elif self.from_start or not initial:
                starts[queue] = 0
            else:
                starts[queue] = self._end_of(queue)
                if self.commits:  # kept from now on, even if the device goes away at once
                    self.consumer.commit(queue, starts[queue])
        return starts

    def _end_of(self, queue: MessageQueue) -> int:
        result = pull_queue(
            self.consumer.client,
            self.consumer.group,
            queue,
            0,
            max_messages=1,
            subscription="*",
            wait_ms=0,
        )
        return result.max_offset

    def _refresh(self) -> None:
        """Look up the topics' queues again: new queues start at 0 (all of theirs is new)."""
        self._refreshed = time.monotonic()
        for topic in self.topics:
            try:
                found = self._start_offsets(topic, initial=False)
            except (PullError, grpc.RpcError) as exc:
                log.warning("queues of %s: %s", topic, exc)
                continue
            if found is None:
                continue
            with self._lock:
                if topic not in self._topics:
                    continue
                self._topics[topic] = True
                for queue, offset in found.items():
                    self._offsets.setdefault(queue, offset)

    def _cancel_polls(self) -> None:
        with self._lock:
            calls = list(self._calls)
        for call in calls:
            call.cancel()

    def _track(self, calls: list[grpc.Future] | None) -> None:
        with self._lock:
            self._calls = list(calls or ())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except PullError as exc:
                if exc.code is not grpc.StatusCode.CANCELLED:  # cancelled: topics changed
                    log.warning("mqtt reader: %s", exc)
                    self._stop.wait(RETRY_S)
            except Exception as exc:  # a broker gone, a route changing: try again
                log.warning("mqtt reader: %s", exc)
                self._stop.wait(RETRY_S)

    def _step(self) -> None:
        if time.monotonic() - self._refreshed > REFRESH_S or not all(self._topics.values()):
            self._refresh()
        with self._lock:
            offsets = dict(self._offsets)
        if not offsets:
            self._stop.wait(WAIT_MS / 1000 / 4)
            return
        failures: dict[MessageQueue, Exception] = {}
        results = pull_queues(
            self.consumer.client,
            self.consumer.group,
            offsets,
            max_messages=BATCH,
            subscriptions={},
            wait_ms=WAIT_MS,
            track=self._track,
            failures=failures,
        )
        if failures and not results:  # a broker down, or the poll cancelled for a new topic
            self._stop.wait(WAIT_MS / 1000 / 5)
        for queue, result in results.items():
            if self._stop.is_set():
                return
            if result.messages and not self._deliver(queue, result.messages):
                return
            with self._lock:
                if queue in self._offsets and self._offsets[queue] == offsets[queue]:
                    self._offsets[queue] = result.next_begin_offset
            if self.commits and result.next_begin_offset != offsets[queue]:
                self.consumer.commit(queue, result.next_begin_offset)

    def _deliver(self, queue: MessageQueue, messages: Sequence[ReceivedMessage]) -> bool:
        """Hand a batch over; False when its acknowledgements did not all come back."""
        futures = self.handler(messages)
        if not futures:
            return True
        done, pending = concurrent.futures.wait(futures, timeout=ACK_WAIT_S)
        if pending or not all(f.result() for f in done):
            log.info("%s: a batch of %s was not acknowledged; read again", self._thread.name, queue)
            self._stop.set()  # the device is gone: its session reads it again when it is back
            return False
        return True
