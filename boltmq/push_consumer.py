"""PushConsumer: the broker's messages delivered to a listener.

The consumer's tuning (the ``*_ms``, sizes and modes named below) is a
:class:`boltmq.options.PushConsumerOptions`. Every ``rebalance_interval_ms``
(and at start) the consumer heartbeats to the
brokers of its topics, reads the group's live members from a broker and takes
its share of the queues by average allocation (RocketMQ's
AllocateMessageQueueAveragely) in CLUSTERING, or every queue in BROADCASTING.
``consume_threads`` threads (4; :mod:`boltmq.consume_thread`) share the owned
queues, every n-th queue to each: a thread pulls all of its queues that have nothing pending in one
PullQueues call per broker (long-polling them together: an arrival in any
queue answers it), then hands each queue's messages to the listener in queue
order. A thread of 1,000 queues costs one call where a thread per queue cost
1,000 calls and threads (bench/RESULTS.md, the PushConsumer on PullQueues). The
listener runs on
these threads: at most ``consume_threads`` calls of it at once. Offsets:

- CLUSTERING: committed to the broker every ``commit_interval_ms``, when a
  queue is handed to another member and at shutdown; a restarted consumer
  resumes from the committed offset.
- BROADCASTING: each member reads everything and keeps its own offsets in a
  local file (:mod:`boltmq.offset_store`, written every ``commit_interval_ms``
  and at shutdown); a restarted member continues where it stopped.
- A queue with no committed offset starts at ``consume_from``: ``"FIRST"``
  (everything retained, the default), ``"LAST"`` (only new messages) or
  ``"TIMESTAMP"`` (the first message stored at or after ``consume_timestamp_ms``,
  asked of the queue's master: SearchOffset); RocketMQ's ``FIRST_OFFSET`` and
  ``LAST_OFFSET`` are ``FIRST`` and ``LAST``. A committed offset always wins.
- An operator's reset (``boltmq admin group reset-offset``) reaches a live
  consumer on its next pull of each queue (:mod:`boltmq.consume_thread`).

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

from boltmq.client import BrokerUnavailable, ClientInstance, heartbeat_request, rpc_error_text
from boltmq.consume_thread import ConsumeThread, QueueState
from boltmq.group_offsets import commit_offsets, query_offsets
from boltmq.kernel import telemetry
from boltmq.kernel.registry_client import RegistryError, TopicNotFound
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import ConsumeResult, MessageQueue, ReceivedMessage
from boltmq.message_selector import EVERY_TAG, MessageSelector, Selection, selectors
from boltmq.offset_store import LocalFileOffsetStore, offsets_path
from boltmq.options import PushConsumerOptions
from boltmq.pull_consumer import search_offset
from boltmq.v1 import broker_pb2
from boltmq.wire.topic import RETRY_PREFIX

log = logging.getLogger(__name__)

Listener = Callable[[list[ReceivedMessage]], ConsumeResult | None]
"""Queues one QueryConsumerOffsets names (the broker's QUERY_OFFSETS_MAX)."""
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


class PushConsumer:
    """A consumer whose listener is called with messages (see the module docstring)."""

    def __init__(
        self,
        registry: str | Sequence[str],
        group: str,
        subscriptions: Mapping[str, Selection],
        listener: Listener,
        *,
        options: PushConsumerOptions | None = None,
        tls: ClientTLS | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if not group:
            raise ValueError("consumer group must not be empty")
        if not subscriptions:
            raise ValueError("subscribe to at least one topic")
        checked = selectors(subscriptions)  # ValueError (InvalidFilter) naming the topic
        if not callable(listener):
            raise ValueError("listener must be callable")
        self.options = options if options is not None else PushConsumerOptions()
        """How this consumer consumes (defaults: :class:`PushConsumerOptions`)."""
        options = self.options
        self.retry_topic = RETRY_PREFIX + group
        """The group's retry topic, consumed beside the subscriptions (concurrent CLUSTERING)."""
        self.sends_back = options.model == "CLUSTERING" and not options.orderly
        """Failed messages go back to the broker (else they are retried in place)."""
        self.group = group
        self.subscriptions = checked
        """Each topic's selector (a tag expression given as a string is a TAG selector)."""
        self.listener = listener
        self.client = ClientInstance(
            registry,
            route_refresh_ms=options.route_refresh_ms,
            rpc_timeout_s=options.rpc_timeout_ms / 1000,
            tls=tls,
            credentials=credentials,
        )
        self.expressions = {topic: self.expression_of(topic) for topic in self._topics()}
        self.local_offsets = LocalFileOffsetStore(
            offsets_path(options.offset_store_dir, options.instance_name, group),
            group,
            options.instance_name,
        )
        """BROADCASTING: where this member's offsets are kept."""
        self.states: dict[MessageQueue, QueueState] = {}
        """The owned queues (held under ``_lock``; their threads change the states)."""
        self._shares: list[list[QueueState]] = [[] for _ in range(options.consume_threads)]
        self._pullers = [
            ConsumeThread(
                n,
                self.client,
                group,
                self.expressions,
                options,
                self.share,
                self.deliver,
                self.send_back if self.sends_back else None,
            )
            for n in range(options.consume_threads)
        ]
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

    def expression_of(self, topic: str) -> MessageSelector:
        """The selector of ``topic`` (every tag of the retry topic)."""
        return self.subscriptions.get(topic) or EVERY_TAG

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
                        max_reconsume_times=self.options.max_reconsume_times,
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
        rebalance_interval_s = self.options.rebalance_interval_ms / 1000
        commit_interval_s = self.options.commit_interval_ms / 1000
        last_rebalance = last_commit = time.monotonic()
        tick = min(rebalance_interval_s, commit_interval_s, 1.0)
        while not self._stop.wait(tick):
            now = time.monotonic()
            try:
                if now - last_commit >= commit_interval_s:
                    last_commit = now
                    self.commit_offsets()
                if now - last_rebalance >= rebalance_interval_s or self._kick.is_set():
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
            if self.options.model == "BROADCASTING":
                wanted.update(queues)
                continue
            wanted.update(
                allocate_average(queues, self._members(topic, members), self.client.client_id)
            )
        if self.options.orderly:
            wanted = self._lock_queues(wanted)
        starts = self._start_offsets(sorted(wanted - set(self.states)))
        new = [QueueState(q, offset) for q, offset in starts.items()]
        gone = self._reassign(wanted, new)
        self._release(gone)

    def _reassign(self, wanted: set[MessageQueue], new: list[QueueState]) -> list[QueueState]:
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

    def share(self, puller: ConsumeThread) -> list[QueueState] | None:
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
            ids = known.setdefault(address, sorted(response.client_ids))
            if ids and self.client.client_id not in ids:
                log.warning(
                    "group %s at %s shares its queues without this member: it subscribes "
                    "unlike most members (boltmq admin group show %s)",
                    self.group,
                    address,
                    self.group,
                )
            return ids
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
        ``consume_from`` (:mod:`boltmq.group_offsets`: a consumer of 1,024 topics
        takes 4,096 queues at start)."""
        timeout = self.client.rpc_timeout_s
        clustering = self.options.model == "CLUSTERING"
        starts = query_offsets(self.client, self.group, queues) if clustering else {}
        if self.options.model == "BROADCASTING":
            stored = self.local_offsets.load()
            starts.update((q, stored[q]) for q in queues if q in stored)
        rest = [queue for queue in queues if queue not in starts]
        consume_from = self.options.consume_from
        if consume_from in ("FIRST", "FIRST_OFFSET"):  # a pull below the minimum gets it
            return starts | dict.fromkeys(rest, 0)
        if consume_from == "TIMESTAMP":
            moment = self.options.consume_timestamp_ms
            return starts | {queue: search_offset(self.client, queue, moment) for queue in rest}
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
    def commit_offsets(self, states: Sequence[QueueState] | None = None) -> None:
        """Commit every owned queue's progress that changed (BROADCASTING: to the file)."""
        with self._lock:
            todo = list(self.states.values()) if states is None else list(states)
        if self.options.model == "BROADCASTING":
            changed = {s: s.offset for s in todo if s.offset != s.committed}
            try:
                if changed:  # the file is rewritten whole: every owned queue's offset
                    self.local_offsets.persist({s.queue: s.offset for s in todo})
            except OSError as exc:
                log.warning("offsets not written to %s: %s", self.local_offsets.path, exc)
                return
            for state, offset in changed.items():
                state.committed = offset
            return
        moved = {s.queue: (s, s.offset) for s in todo if s.offset != s.committed}
        offsets = {queue: offset for queue, (_, offset) in moved.items()}
        for queue in commit_offsets(self.client, self.group, offsets) if offsets else ():
            state, offset = moved[queue]
            state.committed = offset

    def _release(self, states: Sequence[QueueState]) -> None:
        """Commit and (orderly) unlock queues no puller serves any more."""
        self.commit_offsets(states)
        if self.options.orderly and states:
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
        request = heartbeat_request(
            self.client.client_id,
            consumer_groups=[
                broker_pb2.ConsumerGroupHeartbeat(
                    group=self.group,
                    model=self.options.model,
                    orderly=self.options.orderly,
                    subscriptions=[
                        broker_pb2.ConsumerSubscription(
                            topic=t,
                            expression=self.expression_of(t).expression,
                            expression_type=self.expression_of(t).wire_type,
                        )
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
