"""PushConsumer: the broker's messages delivered to a listener.

Every ``rebalance_interval_ms`` (and at start) the consumer heartbeats to the
brokers of its topics, reads the group's live members from a broker and takes
its share of the queues by average allocation (RocketMQ's
AllocateMessageQueueAveragely) in CLUSTERING, or every queue in BROADCASTING.
``consume_threads`` threads (4) share the owned queues, every n-th queue to
each: a thread pulls all of its queues that have nothing pending in one
PullQueues call per broker (long-polling them together: an arrival in any
queue answers it), then hands each queue's messages to the listener in queue
order. A thread of 1,000 queues costs one call where a thread per queue cost
1,000 calls and threads (bench/RESULTS.md, session 14). The listener runs on
these threads: at most ``consume_threads`` calls of it at once. Offsets:

- CLUSTERING: committed to the broker every ``commit_interval_ms``, when a
  queue is handed to another member and at shutdown; a restarted consumer
  resumes from the committed offset.
- BROADCASTING: each member keeps its own offsets in memory (every member
  reads everything).
- A queue with no committed offset starts at ``consume_from``: ``"FIRST"``
  (everything retained, the default) or ``"LAST"`` (only new messages).

The listener gets a list of messages and returns ``ConsumeResult.SUCCESS`` (or
None). ``RECONSUME_LATER`` or an exception sends each message of the batch back
to the broker (CLUSTERING, concurrent): it is stored in ``%RETRY%<group>`` and
delivered again after the delay of level ``3 + reconsume_times``, and after
``max_reconsume_times`` failures (0: the group's ``retry_max_times``, 16) it goes
to ``%DLQ%<group>`` for good. Every such consumer subscribes to its group's
retry topic; a retried message reaches the listener with its original
topic and ``reconsume_times`` counting its failures. A message the broker does
not take back is offered to the listener again after ``suspend_on_failure_ms``
(never skipped: the queue's offset does not pass it). Orderly consumption
locks each queue on the broker first, passes one message at a time, and
retries a failed message in place (that queue waits; the other queues go on),
never sending it back; BROADCASTING retries in place too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import grpc

from boltmq.client import BrokerUnavailable, ClientInstance, rpc_error_text
from boltmq.kernel import telemetry
from boltmq.kernel.registry_client import RegistryError, TopicNotFound
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import ConsumeResult, MessageQueue, ReceivedMessage
from boltmq.pull_consumer import PullError, PullStatus, pull_queues
from boltmq.v1 import broker_pb2
from boltmq.wire.topic import InvalidSubscription, parse_subscription

log = logging.getLogger(__name__)

Listener = Callable[[list[ReceivedMessage]], ConsumeResult | None]
MODELS = ("CLUSTERING", "BROADCASTING")
CONSUME_FROM = ("FIRST", "LAST")
PULL_MAX_BYTES = 4 * 1024 * 1024
"""Record bytes one PullQueues call of a thread may return, all its queues together
(``pull_max_bytes``); each queue gives at most ``pull_batch_size`` messages."""
CONSUME_THREADS = 4
"""Threads that pull and call the listener; each serves every n-th owned queue."""
OFFSETS_PER_QUERY = 4096
"""Queues one QueryConsumerOffsets names (the broker's QUERY_OFFSETS_MAX)."""
PULL_BACKOFF_S = 1.0
"""Pause after a failed pull (broker down, route changing) before the next one."""
RETRY_PREFIX = "%RETRY%"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"


def allocate_average(
    queues: Sequence[MessageQueue], members: Sequence[str], me: str
) -> list[MessageQueue]:
    """My contiguous share of ``queues`` among sorted ``members`` (RocketMQ's average)."""
    if me not in members or not queues:
        return []
    index = members.index(me)
    total, count = len(queues), len(members)
    mod = total % count
    if total <= count:
        size = 1
    else:
        size = total // count + 1 if mod > 0 and index < mod else total // count
    start = index * size if mod > 0 and index < mod else index * size + mod
    return list(queues[start : start + min(size, total - start)]) if start < total else []


class _QueueState:
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


class _Puller:
    """A thread that pulls its share of the owned queues, one PullQueues call per
    broker, and hands each queue's messages to the listener in queue order."""

    def __init__(self, owner: PushConsumer, index: int) -> None:
        self.owner = owner
        self.index = index
        self.parked = False
        """At the start of a pass, waiting while the owner reassigns the queues."""
        self.wake = threading.Event()
        """Set to end the current wait or long poll (cleared by :meth:`PushConsumer.share`)."""
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
        owner = self.owner
        while True:
            states = owner.share(self)
            if states is None:
                return
            try:
                self._pass(states)
            except Exception:  # never lose the thread (and its queues) to a surprise
                log.exception("consuming %d queue(s) failed; trying again", len(states))
                self.wake.wait(PULL_BACKOFF_S)

    def _pass(self, states: list[_QueueState]) -> None:
        """Deliver what is due, then pull every queue with nothing pending."""
        owner = self.owner
        now = time.monotonic()
        for state in states:
            if state.pending and state.due <= now and not self.wake.is_set():
                self._deliver(state)
        now = time.monotonic()
        ready = {s.queue: s for s in states if not s.pending and s.due <= now}
        later = [s.due for s in states if s.due > now]
        wait_s = min(later) - now if later else owner.long_poll_ms / 1000
        if not ready or self.wake.is_set():
            self.wake.wait(wait_s if states else None)
            return
        failures: dict[MessageQueue, Exception] = {}
        try:
            results = pull_queues(
                owner.client,
                owner.group,
                {q: s.offset for q, s in ready.items()},
                max_messages=owner.pull_batch_size,
                subscriptions=owner.expressions,
                wait_ms=int(min(owner.long_poll_ms, wait_s * 1000)),
                max_bytes=owner.pull_max_bytes,
                track=self._track,
                failures=failures,
            )
        except (PullError, RegistryError, OSError) as exc:
            if isinstance(exc, PullError) and exc.code is grpc.StatusCode.CANCELLED:
                return
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
        for queue, result in results.items():
            state = ready[queue]
            if result.status is PullStatus.FOUND and result.messages:
                state.pending, state.after = result.messages, result.next_begin_offset
            else:
                state.offset = result.next_begin_offset
        for queue in results:
            if ready[queue].pending and not self.wake.is_set():
                self._deliver(ready[queue])

    def _deliver(self, state: _QueueState) -> None:
        """Hand ``state``'s pending messages to the listener, a batch at a time, until
        done, reassigned or a batch fails (then the queue waits suspend_on_failure)."""
        owner = self.owner
        size = 1 if owner.orderly else owner.consume_batch_max_size
        while state.pending and not self.wake.is_set():
            chunk = state.pending[:size]
            if not owner.deliver(chunk):
                left = owner.send_back(state.queue, chunk) if owner.sends_back else chunk
                if left:  # retried in place: the queue's offset does not pass them
                    state.pending[: len(chunk)] = left
                    state.due = time.monotonic() + owner.suspend_on_failure_s
                    return
            del state.pending[: len(chunk)]
            state.offset = chunk[-1].queue_offset + 1
        if not state.pending:
            state.offset = state.after


class PushConsumer:
    """A consumer whose listener is called with messages (see the module docstring)."""

    def __init__(
        self,
        registry: str | Sequence[str],
        group: str,
        subscriptions: Mapping[str, str],
        listener: Listener,
        *,
        model: str = "CLUSTERING",
        orderly: bool = False,
        consume_from: str = "FIRST",
        pull_batch_size: int = 32,
        pull_max_bytes: int = PULL_MAX_BYTES,
        consume_batch_max_size: int = 32,
        consume_threads: int = CONSUME_THREADS,
        long_poll_ms: int = 15_000,
        rebalance_interval_ms: int = 20_000,
        commit_interval_ms: int = 5_000,
        suspend_on_failure_ms: int = 1_000,
        rpc_timeout_ms: int = 5_000,
        max_reconsume_times: int = 0,
        tls: ClientTLS | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if not group:
            raise ValueError("consumer group must not be empty")
        if model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, not {model!r}")
        if consume_from not in CONSUME_FROM:
            raise ValueError(f"consume_from must be one of {CONSUME_FROM}")
        if not subscriptions:
            raise ValueError("subscribe to at least one topic")
        for topic, expression in subscriptions.items():
            try:
                parse_subscription(expression)
            except InvalidSubscription as exc:
                raise ValueError(f"subscription of {topic!r}: {exc}") from None
        if not callable(listener):
            raise ValueError("listener must be callable")
        if (
            min(
                pull_batch_size,
                pull_max_bytes,
                consume_batch_max_size,
                consume_threads,
                rebalance_interval_ms,
                commit_interval_ms,
            )
            <= 0
            or long_poll_ms < 0
            or suspend_on_failure_ms < 0
        ):
            raise ValueError("batch sizes and intervals must be positive")
        if type(max_reconsume_times) is not int or max_reconsume_times < 0:
            raise ValueError("max_reconsume_times must be a non-negative int (0: the group's)")
        self.max_reconsume_times = max_reconsume_times
        self.retry_topic = RETRY_PREFIX + group
        """The group's retry topic, consumed beside the subscriptions (concurrent CLUSTERING)."""
        self.sends_back = model == "CLUSTERING" and not orderly
        """Failed messages go back to the broker (else they are retried in place)."""
        self.group = group
        self.subscriptions = dict(subscriptions)
        self.listener = listener
        self.model = model
        self.orderly = orderly
        self.consume_from = consume_from
        self.pull_batch_size = pull_batch_size
        self.pull_max_bytes = pull_max_bytes
        self.consume_batch_max_size = consume_batch_max_size
        self.consume_threads = consume_threads
        self.long_poll_ms = long_poll_ms
        self.rebalance_interval_s = rebalance_interval_ms / 1000
        self.commit_interval_s = commit_interval_ms / 1000
        self.suspend_on_failure_s = suspend_on_failure_ms / 1000
        self.client = ClientInstance(
            registry, rpc_timeout_s=rpc_timeout_ms / 1000, tls=tls, credentials=credentials
        )
        self.expressions = {topic: self.expression_of(topic) for topic in self._topics()}
        self.states: dict[MessageQueue, _QueueState] = {}
        """The owned queues (held under ``_lock``; their pullers change the states)."""
        self._shares: list[list[_QueueState]] = [[] for _ in range(consume_threads)]
        self._pullers = [_Puller(self, n) for n in range(consume_threads)]
        self._reassigning = False
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Condition()
        self._rebalancing = threading.Lock()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> PushConsumer:
        """Heartbeat, take queues and start consuming."""
        missing = self.client.routes(self.subscriptions)
        if missing:
            more = f" (nor {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise TopicNotFound(missing[0], f"topic {missing[0]!r}: no live broker serves it{more}")
        self._heartbeat()
        for puller in self._pullers:
            puller.start()
        self.rebalance()
        self._thread = threading.Thread(
            target=self._housekeeping, name="boltmq-rebalance", daemon=True
        )
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop pulling, commit offsets, leave the group (others take over at once)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._lock.notify_all()
        for puller in self._pullers:
            puller.kick()
        for puller in self._pullers:
            puller.join(self.client.rpc_timeout_s + 1)
        with self._lock:
            states = list(self.states.values())
            self.states.clear()
        self._release(states)
        self._unregister()
        self.client.close()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def assigned(self) -> list[MessageQueue]:
        """Queues of the subscribed topics this member consumes now (its share of the
        group's retry topic is consumed too, but not listed)."""
        return sorted(q for q in self.states if q.topic != self.retry_topic)

    # ---------------------------------------------------------------- delivery
    def _topics(self) -> list[str]:
        """Subscribed topics, plus the retry topic when failed messages are sent back."""
        topics = list(self.subscriptions)
        if self.sends_back and self.retry_topic not in self.subscriptions:
            topics.append(self.retry_topic)
        return topics

    def expression_of(self, topic: str) -> str:
        """The subscription expression of ``topic`` (every tag of the retry topic)."""
        return self.subscriptions.get(topic, "*")

    def send_back(
        self, queue: MessageQueue, messages: list[ReceivedMessage]
    ) -> list[ReceivedMessage]:
        """Send failed messages back to the broker; return those it did not take."""
        kept = []
        for message in messages:
            try:
                self.client.broker(self.client.address_of(queue)).ConsumerSendBack(
                    broker_pb2.ConsumerSendBackRequest(
                        group=self.group,
                        commitlog_offset=message.commitlog_offset,
                        max_reconsume_times=self.max_reconsume_times,
                    ),
                    timeout=self.client.rpc_timeout_s,
                )
            except (grpc.RpcError, RegistryError, BrokerUnavailable) as exc:
                log.warning(
                    "send-back of %s failed (consuming it again here later): %s",
                    message.msg_id,
                    exc,
                )
                kept.append(message)
        return kept

    def deliver(self, messages: list[ReceivedMessage]) -> bool:
        """Call the listener; True when the messages count as consumed."""
        for message in messages:
            if message.topic == self.retry_topic:  # the listener sees the original topic
                message.topic = message.properties.get(PROPERTY_RETRY_TOPIC, message.topic)
        try:
            with telemetry.process_span(messages, self.group):  # no-op without tracing
                outcome = self.listener(messages)
        except Exception:
            log.exception(
                "listener failed on %d message(s); they will be offered again", len(messages)
            )
            return False
        return outcome is None or outcome is ConsumeResult.SUCCESS

    # ---------------------------------------------------------------- rebalance
    def _housekeeping(self) -> None:
        last_rebalance = last_commit = time.monotonic()
        tick = min(self.rebalance_interval_s, self.commit_interval_s, 1.0)
        while not self._stop.wait(tick):
            now = time.monotonic()
            try:
                if now - last_commit >= self.commit_interval_s:
                    last_commit = now
                    self.commit_offsets()
                if now - last_rebalance >= self.rebalance_interval_s or self._kick.is_set():
                    last_rebalance = now
                    self._kick.clear()
                    self._heartbeat()
                    self.rebalance()
            except Exception:
                log.exception("consumer housekeeping failed")

    def rebalance(self) -> None:
        """Take this member's share of every subscribed topic's queues now."""
        with self._rebalancing:
            self._rebalance()

    def _rebalance(self) -> None:
        wanted: set[MessageQueue] = set()
        members: dict[str, list[str]] = {}  # the group's members, asked once a broker
        topics = self._topics()
        try:
            self.client.routes(topics)  # stale routes in one call; unknown topics: below
        except RegistryError as exc:
            log.warning("rebalance skipped (the queues stay as they are): %s", exc)
            return
        for topic in topics:
            try:
                queues = self.client.read_queues(topic)
            except RegistryError as exc:
                if topic != self.retry_topic:  # created by the broker on our heartbeat
                    log.warning("rebalance of %s skipped: %s", topic, exc)
                wanted.update(q for q in self.states if q.topic == topic)
                continue
            if self.model == "BROADCASTING":
                wanted.update(queues)
                continue
            wanted.update(
                allocate_average(queues, self._members(topic, members), self.client.client_id)
            )
        if self.orderly:
            wanted = self._lock_queues(wanted)
        starts = self._start_offsets(sorted(wanted - set(self.states)))
        new = [_QueueState(q, offset) for q, offset in starts.items()]
        gone = self._reassign(wanted, new)
        self._release(gone)

    def _reassign(self, wanted: set[MessageQueue], new: list[_QueueState]) -> list[_QueueState]:
        """Own the ``wanted`` queues (``new`` are the states of those not owned yet) and
        deal them to the pullers; the states of the queues given up.

        The pullers are held at the start of their next pass while the shares
        change, so no queue is ever pulled or delivered by two threads. A puller
        whose listener does not return in time leaves everything as it was,
        until the next rebalance.
        """
        gone = [s for q, s in self.states.items() if q not in wanted]
        if not gone and not new:
            return []
        with self._lock:
            self._reassigning = True
            for puller in self._pullers:
                puller.kick()
            held = self._lock.wait_for(
                lambda: self._stop.is_set() or all(p.parked for p in self._pullers),
                self.client.rpc_timeout_s + 1,
            )
            if held and not self._stop.is_set():
                for state in gone:
                    del self.states[state.queue]
                self.states.update((s.queue, s) for s in new)
                owned = sorted(self.states.values(), key=lambda s: s.queue)
                count = len(self._pullers)
                self._shares = [owned[n::count] for n in range(count)]
            self._reassigning = False
            self._lock.notify_all()
        if self._stop.is_set():
            return []  # shutdown releases every queue
        if not held:
            log.warning("a listener is still busy: the queues are reassigned at the next rebalance")
            return []
        return gone

    def share(self, puller: _Puller) -> list[_QueueState] | None:
        """The states ``puller`` serves for its next pass (None: the consumer stops);
        waits while the queues are being reassigned."""
        with self._lock:
            while self._reassigning and not self._stop.is_set():
                puller.parked = True
                self._lock.notify_all()
                self._lock.wait()
            puller.parked = False
            puller.wake.clear()  # under the lock: a reassignment's kick comes after it
            return None if self._stop.is_set() else self._shares[puller.index]

    def _members(self, topic: str, known: dict[str, list[str]]) -> list[str]:
        """The group's members as a broker of ``topic`` sees them (``known``: by broker)."""
        for address in sorted(self.client.brokers_of([topic])):
            if address in known:
                return known[address]
            try:
                response = self.client.broker(address).GetConsumerList(
                    broker_pb2.GetConsumerListRequest(group=self.group),
                    timeout=self.client.rpc_timeout_s,
                )
            except grpc.RpcError as exc:
                log.warning("consumer list from %s: %s", address, rpc_error_text(exc))
                continue
            return known.setdefault(address, sorted(response.client_ids))
        return []

    def _lock_queues(self, wanted: set[MessageQueue]) -> set[MessageQueue]:
        """Orderly: keep only the queues the broker lets this member lock."""
        locked: set[MessageQueue] = set()
        by_broker: dict[str, list[MessageQueue]] = {}
        for queue in wanted:
            by_broker.setdefault(self.client.address_of(queue), []).append(queue)
        for address, queues in by_broker.items():
            request = broker_pb2.LockQueuesRequest(
                group=self.group,
                client_id=self.client.client_id,
                queues=[broker_pb2.QueueId(topic=q.topic, queue_id=q.queue_id) for q in queues],
            )
            try:
                response = self.client.broker(address).LockQueues(
                    request, timeout=self.client.rpc_timeout_s
                )
            except grpc.RpcError as exc:
                log.warning("lock queues on %s: %s", address, rpc_error_text(exc))
                continue
            granted = {(q.topic, q.queue_id) for q in response.locked}
            locked.update(q for q in queues if (q.topic, q.queue_id) in granted)
        return locked

    def _start_offsets(self, queues: Sequence[MessageQueue]) -> dict[MessageQueue, int]:
        """Where each of ``queues`` starts: its committed offset (CLUSTERING), else
        ``consume_from``. One QueryConsumerOffsets per broker (and per
        OFFSETS_PER_QUERY queues), all in flight at once: a consumer of 1,024
        topics takes 4,096 queues at start."""
        timeout = self.client.rpc_timeout_s
        starts: dict[MessageQueue, int] = {}
        by_broker: dict[str, list[MessageQueue]] = {}
        for queue in queues if self.model == "CLUSTERING" else ():
            by_broker.setdefault(self.client.address_of(queue), []).append(queue)
        calls = [
            (
                chunk,
                self.client.broker(address).QueryConsumerOffsets.future(
                    broker_pb2.QueryConsumerOffsetsRequest(
                        group=self.group,
                        queues=[
                            broker_pb2.QueueId(topic=q.topic, queue_id=q.queue_id) for q in chunk
                        ],
                    ),
                    timeout=timeout,
                ),
            )
            for address, owned in by_broker.items()
            for chunk in (
                owned[n : n + OFFSETS_PER_QUERY] for n in range(0, len(owned), OFFSETS_PER_QUERY)
            )
        ]
        for chunk, call in calls:
            for queue, found in zip(chunk, call.result().offsets, strict=True):
                if found.found:
                    starts[queue] = int(found.offset)
        rest = [queue for queue in queues if queue not in starts]
        if self.consume_from == "FIRST":  # a pull below the minimum gets the minimum
            return starts | dict.fromkeys(rest, 0)
        ends: dict[tuple[str, str], dict[int, int]] = {}  # one TopicStatus a topic and broker
        for queue in rest:
            address = self.client.address_of(queue)
            if (queue.topic, address) not in ends:
                status = self.client.broker(address).TopicStatus(
                    broker_pb2.TopicStatusRequest(topic=queue.topic), timeout=timeout
                )
                ends[queue.topic, address] = {q.queue_id: int(q.max_offset) for q in status.queues}
            starts[queue] = ends[queue.topic, address].get(queue.queue_id, 0)
        return starts

    # ---------------------------------------------------------------- offsets
    def commit_offsets(self, states: Sequence[_QueueState] | None = None) -> None:
        """Commit every owned queue's progress that changed (CLUSTERING only)."""
        if self.model != "CLUSTERING":
            return
        with self._lock:
            todo = list(self.states.values()) if states is None else list(states)
        for state in todo:
            offset = state.offset
            if offset == state.committed:
                continue
            queue = state.queue
            try:
                self.client.broker(self.client.address_of(queue)).UpdateConsumerOffset(
                    broker_pb2.UpdateConsumerOffsetRequest(
                        group=self.group, topic=queue.topic, queue_id=queue.queue_id, offset=offset
                    ),
                    timeout=self.client.rpc_timeout_s,
                )
                state.committed = offset
            except (grpc.RpcError, RegistryError) as exc:
                log.warning("commit %s@%d failed: %s", queue, offset, exc)

    def _release(self, states: Sequence[_QueueState]) -> None:
        """Commit and (orderly) unlock queues no puller serves any more."""
        self.commit_offsets(states)
        if self.orderly and states:
            self._unlock([s.queue for s in states])

    def _unlock(self, queues: Sequence[MessageQueue]) -> None:
        for queue in queues:
            try:
                self.client.broker(self.client.address_of(queue)).UnlockQueues(
                    broker_pb2.LockQueuesRequest(
                        group=self.group,
                        client_id=self.client.client_id,
                        queues=[broker_pb2.QueueId(topic=queue.topic, queue_id=queue.queue_id)],
                    ),
                    timeout=self.client.rpc_timeout_s,
                )
            except (grpc.RpcError, RegistryError) as exc:
                log.warning("unlock %s failed: %s", queue, exc)

    # ---------------------------------------------------------------- membership
    def _heartbeat(self) -> None:
        request = broker_pb2.HeartbeatRequest(
            client_id=self.client.client_id,
            consumer_groups=[
                broker_pb2.ConsumerGroupHeartbeat(
                    group=self.group,
                    model=self.model,
                    orderly=self.orderly,
                    subscriptions=[
                        broker_pb2.ConsumerSubscription(topic=t, expression=self.expression_of(t))
                        for t in self._topics()
                    ],
                )
            ],
        )
        for address in self.client.brokers_of(list(self.subscriptions)):
            try:
                self.client.broker(address).Heartbeat(request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                log.warning("heartbeat to %s: %s", address, rpc_error_text(exc))

    def _unregister(self) -> None:
        request = broker_pb2.UnregisterClientRequest(
            client_id=self.client.client_id, consumer_groups=[self.group]
        )
        for address in self.client.brokers_of(list(self.subscriptions)):
            try:
                self.client.broker(address).UnregisterClient(request, timeout=2.0)
            except grpc.RpcError as exc:
                log.warning("unregister from %s: %s", address, rpc_error_text(exc))
