"""PushConsumer: the broker's messages delivered to a listener.

Every ``rebalance_interval_ms`` (and at start) the consumer heartbeats to the
brokers of its topics, reads the group's live members from a broker and takes
its share of the queues by average allocation (RocketMQ's
AllocateMessageQueueAveragely) in CLUSTERING, or every queue in BROADCASTING.
Each queue it owns gets a worker thread that long-polls the broker and hands
batches to the listener, in queue order. Offsets:

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
retries a failed message in place (the queue waits), never sending it back;
BROADCASTING retries in place too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import grpc

from boltmq import telemetry
from boltmq.client import BrokerUnavailable, ClientInstance, rpc_error_text
from boltmq.message import ConsumeResult, MessageQueue, ReceivedMessage
from boltmq.pull_consumer import PullError, PullStatus, pull_queue
from boltmq.registry_client import RegistryError
from boltmq.signing import Credentials
from boltmq.tls import ClientTLS
from boltmq.v1 import broker_pb2
from services.store.topic import InvalidSubscription, parse_subscription

log = logging.getLogger(__name__)

Listener = Callable[[list[ReceivedMessage]], ConsumeResult | None]
MODELS = ("CLUSTERING", "BROADCASTING")
CONSUME_FROM = ("FIRST", "LAST")
PULL_MAX_BYTES = 4 * 1024 * 1024
"""Record bytes one pull may return (the store's own default, 256 KiB, would cut a
pull of 256 x 1 KiB messages short)."""
PULL_BACKOFF_S = 1.0
"""Pause after a failed pull (broker down, route changing) before the next one."""
RETRY_PREFIX = "%RETRY%"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"


def allocate_average(queues: Sequence[MessageQueue], members: Sequence[str], me: str
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
    return list(queues[start:start + min(size, total - start)]) if start < total else []


class _QueueWorker:
    """Pulls one queue and feeds the listener, strictly in order."""

    def __init__(self, owner: PushConsumer, queue: MessageQueue, offset: int) -> None:
        self.owner = owner
        self.queue = queue
        self.offset = offset
        self.committed = offset
        self._stopped = threading.Event()
        self._call: grpc.Future | None = None
        self._thread = threading.Thread(target=self._run, name=f"boltmq-consume-{queue}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        call = self._call
        if call is not None:
            call.cancel()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _track(self, call: grpc.Future | None) -> None:
        self._call = call
        if call is not None and self._stopped.is_set():
            call.cancel()

    def _run(self) -> None:
        owner = self.owner
        expression = owner.expression_of(self.queue.topic)
        while not self._stopped.is_set():
            try:
                result = pull_queue(owner.client, owner.group, self.queue, self.offset,
                                    max_messages=owner.pull_batch_size,
                                    max_bytes=owner.pull_max_bytes, subscription=expression,
                                    wait_ms=owner.long_poll_ms, track=self._track)
            except (PullError, RegistryError, OSError) as exc:
                if not self._stopped.is_set():
                    log.warning("%s", exc)
                    self._stopped.wait(PULL_BACKOFF_S)
                continue
            if result.status is PullStatus.FOUND:
                self._consume(result.messages)
                if not self._stopped.is_set():
                    self.offset = result.next_begin_offset
            else:
                self.offset = result.next_begin_offset

    def _consume(self, messages: list[ReceivedMessage]) -> None:
        owner = self.owner
        size = 1 if owner.orderly else owner.consume_batch_max_size
        for start in range(0, len(messages), size):
            chunk = messages[start:start + size]
            pending = chunk
            while not self._stopped.is_set():
                if owner.deliver(pending):
                    break
                if owner.sends_back:  # what the broker took back is done here
                    pending = owner.send_back(self.queue, pending)
                    if not pending:
                        break
                self._stopped.wait(owner.suspend_on_failure_s)
            else:
                return
            self.offset = chunk[-1].queue_offset + 1


class PushConsumer:
    """A consumer whose listener is called with messages (see the module docstring)."""

    def __init__(self, registry: str | Sequence[str], group: str,
                 subscriptions: Mapping[str, str], listener: Listener, *,
                 model: str = "CLUSTERING", orderly: bool = False, consume_from: str = "FIRST",
                 pull_batch_size: int = 32, pull_max_bytes: int = PULL_MAX_BYTES,
                 consume_batch_max_size: int = 32,
                 long_poll_ms: int = 15_000, rebalance_interval_ms: int = 20_000,
                 commit_interval_ms: int = 5_000, suspend_on_failure_ms: int = 1_000,
                 rpc_timeout_ms: int = 5_000, max_reconsume_times: int = 0,
                 tls: ClientTLS | None = None, credentials: Credentials | None = None) -> None:
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
        if min(pull_batch_size, pull_max_bytes, consume_batch_max_size, rebalance_interval_ms,
               commit_interval_ms) <= 0 or long_poll_ms < 0 or suspend_on_failure_ms < 0:
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
        self.long_poll_ms = long_poll_ms
        self.rebalance_interval_s = rebalance_interval_ms / 1000
        self.commit_interval_s = commit_interval_ms / 1000
        self.suspend_on_failure_s = suspend_on_failure_ms / 1000
        self.client = ClientInstance(registry, rpc_timeout_s=rpc_timeout_ms / 1000, tls=tls,
                                     credentials=credentials)
        self.workers: dict[MessageQueue, _QueueWorker] = {}
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> PushConsumer:
        """Heartbeat, take queues and start consuming."""
        for topic in self.subscriptions:
            self.client.route(topic)  # an unknown topic fails here, clearly
        self._heartbeat()
        self.rebalance()
        self._thread = threading.Thread(target=self._housekeeping, name="boltmq-rebalance",
                                        daemon=True)
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop workers, commit offsets, leave the group (others take over at once)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            workers = list(self.workers.values())
            self.workers.clear()
        self._stop_workers(workers)
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
        return sorted(q for q in self.workers if q.topic != self.retry_topic)

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

    def send_back(self, queue: MessageQueue, messages: list[ReceivedMessage]
                  ) -> list[ReceivedMessage]:
        """Send failed messages back to the broker; return those it did not take."""
        kept = []
        for message in messages:
            try:
                self.client.broker(self.client.address_of(queue)).ConsumerSendBack(
                    broker_pb2.ConsumerSendBackRequest(
                        group=self.group, commitlog_offset=message.commitlog_offset,
                        max_reconsume_times=self.max_reconsume_times),
                    timeout=self.client.rpc_timeout_s)
            except (grpc.RpcError, RegistryError, BrokerUnavailable) as exc:
                log.warning("send-back of %s failed (consuming it again here later): %s",
                            message.msg_id, exc)
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
            log.exception("listener failed on %d message(s); they will be offered again",
                          len(messages))
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
        wanted: set[MessageQueue] = set()
        for topic in self._topics():
            try:
                queues = self.client.read_queues(topic)
            except RegistryError as exc:
                if topic != self.retry_topic:  # created by the broker on our heartbeat
                    log.warning("rebalance of %s skipped: %s", topic, exc)
                wanted.update(q for q in self.workers if q.topic == topic)
                continue
            if self.model == "BROADCASTING":
                wanted.update(queues)
                continue
            members = self._members(topic)
            wanted.update(allocate_average(queues, members, self.client.client_id))
        if self.orderly:
            wanted = self._lock_queues(wanted)
        with self._lock:
            gone = [w for q, w in self.workers.items() if q not in wanted]
            for worker in gone:
                del self.workers[worker.queue]
            new = [q for q in sorted(wanted) if q not in self.workers]
        self._stop_workers(gone)
        for queue in new:
            worker = _QueueWorker(self, queue, self._start_offset(queue))
            with self._lock:
                self.workers[queue] = worker
            worker.start()

    def _members(self, topic: str) -> list[str]:
        for address in sorted(self.client.brokers_of([topic])):
            try:
                response = self.client.broker(address).GetConsumerList(
                    broker_pb2.GetConsumerListRequest(group=self.group),
                    timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                log.warning("consumer list from %s: %s", address, rpc_error_text(exc))
                continue
            return sorted(response.client_ids)
        return []

    def _lock_queues(self, wanted: set[MessageQueue]) -> set[MessageQueue]:
        """Orderly: keep only the queues the broker lets this member lock."""
        locked: set[MessageQueue] = set()
        by_broker: dict[str, list[MessageQueue]] = {}
        for queue in wanted:
            by_broker.setdefault(self.client.address_of(queue), []).append(queue)
        for address, queues in by_broker.items():
            request = broker_pb2.LockQueuesRequest(
                group=self.group, client_id=self.client.client_id,
                queues=[broker_pb2.QueueId(topic=q.topic, queue_id=q.queue_id) for q in queues])
            try:
                response = self.client.broker(address).LockQueues(
                    request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                log.warning("lock queues on %s: %s", address, rpc_error_text(exc))
                continue
            granted = {(q.topic, q.queue_id) for q in response.locked}
            locked.update(q for q in queues if (q.topic, q.queue_id) in granted)
        return locked

    def _start_offset(self, queue: MessageQueue) -> int:
        stub = self.client.broker(self.client.address_of(queue))
        timeout = self.client.rpc_timeout_s
        if self.model == "CLUSTERING":
            found = stub.QueryConsumerOffset(broker_pb2.QueryConsumerOffsetRequest(
                group=self.group, topic=queue.topic, queue_id=queue.queue_id), timeout=timeout)
            if found.found:
                return int(found.offset)
        if self.consume_from == "FIRST":
            return 0  # a pull below the minimum is answered with the minimum
        status = stub.TopicStatus(broker_pb2.TopicStatusRequest(topic=queue.topic),
                                  timeout=timeout)
        for info in status.queues:
            if info.queue_id == queue.queue_id:
                return int(info.max_offset)
        return 0

    # ---------------------------------------------------------------- offsets
    def commit_offsets(self, workers: Sequence[_QueueWorker] | None = None) -> None:
        """Commit every owned queue's progress that changed (CLUSTERING only)."""
        if self.model != "CLUSTERING":
            return
        with self._lock:
            todo = list(self.workers.values()) if workers is None else list(workers)
        for worker in todo:
            offset = worker.offset
            if offset == worker.committed:
                continue
            queue = worker.queue
            try:
                self.client.broker(self.client.address_of(queue)).UpdateConsumerOffset(
                    broker_pb2.UpdateConsumerOffsetRequest(
                        group=self.group, topic=queue.topic, queue_id=queue.queue_id,
                        offset=offset), timeout=self.client.rpc_timeout_s)
                worker.committed = offset
            except (grpc.RpcError, RegistryError) as exc:
                log.warning("commit %s@%d failed: %s", queue, offset, exc)

    def _stop_workers(self, workers: Sequence[_QueueWorker]) -> None:
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.join(self.client.rpc_timeout_s + 1)
        self.commit_offsets(workers)
        if self.orderly and workers:
            self._unlock([w.queue for w in workers])

    def _unlock(self, queues: Sequence[MessageQueue]) -> None:
        for queue in queues:
            try:
                self.client.broker(self.client.address_of(queue)).UnlockQueues(
                    broker_pb2.LockQueuesRequest(
                        group=self.group, client_id=self.client.client_id,
                        queues=[broker_pb2.QueueId(topic=queue.topic, queue_id=queue.queue_id)]),
                    timeout=self.client.rpc_timeout_s)
            except (grpc.RpcError, RegistryError) as exc:
                log.warning("unlock %s failed: %s", queue, exc)

    # ---------------------------------------------------------------- membership
    def _heartbeat(self) -> None:
        request = broker_pb2.HeartbeatRequest(
            client_id=self.client.client_id,
            consumer_groups=[broker_pb2.ConsumerGroupHeartbeat(
                group=self.group, model=self.model, orderly=self.orderly,
                subscriptions=[broker_pb2.ConsumerSubscription(topic=t,
                                                               expression=self.expression_of(t))
                               for t in self._topics()])])
        for address in self.client.brokers_of(list(self.subscriptions)):
            try:
                self.client.broker(address).Heartbeat(request, timeout=self.client.rpc_timeout_s)
            except grpc.RpcError as exc:
                log.warning("heartbeat to %s: %s", address, rpc_error_text(exc))

    def _unregister(self) -> None:
        request = broker_pb2.UnregisterClientRequest(client_id=self.client.client_id,
                                                     consumer_groups=[self.group])
        for address in self.client.brokers_of(list(self.subscriptions)):
            try:
                self.client.broker(address).UnregisterClient(request, timeout=2.0)
            except grpc.RpcError as exc:
                log.warning("unregister from %s: %s", address, rpc_error_text(exc))
