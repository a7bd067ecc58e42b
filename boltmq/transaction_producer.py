"""TransactionProducer: a message that becomes visible only if a local transaction commits.

``send_in_transaction(msg, local_fn)`` sends a half message (sys flag
PREPARED, ``TRAN_MSG=true``, ``PGROUP``): stored by the broker, invisible to
consumers. It then runs ``local_fn(msg)``, which returns COMMIT, ROLLBACK or
UNKNOWN (raising counts as UNKNOWN), and ends the transaction with
EndTransaction on the same broker: COMMIT makes the message visible, once;
ROLLBACK drops it; UNKNOWN leaves it to the broker's check-back.

Check-back: the producer keeps a TransactionChecks stream open to every
master broker of the cluster (refreshed from the registry). For a half message
left undecided past the broker's ``transaction_timeout_ms`` the broker pushes
a check to one producer of the group, any one: a new producer of the group,
after a restart, answers checks for halves its predecessor sent.
``listener.check_local_transaction(msg)`` gets the half message (a
``MessageExt`` with its real topic: topic, queue_id, body, tags, keys,
properties, msg_id) and answers like ``local_fn``; the producer sends the
answer with EndTransaction(from_check=True). The broker gives up after
``transaction_check_max`` checks and rolls the message back. With access
control on, the account needs PUB on the producer group and on the topic
(``groupPerms``/``topicPerms``, docs/security.md) to send halves, decide them
and receive their checks; a refused check stream is logged at WARNING.

``options`` are a :class:`boltmq.ProducerOptions`, as a Producer's: a half message's
body longer than ``compress_body_over`` is sent and stored zlib-compressed, as every
send of a Producer's; ``send_timeout_ms`` bounds each call.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc

from boltmq.client import DEFAULT_TOPIC, rpc_error_text
from boltmq.kernel.registry_client import RegistryError, TopicNotFound
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import Message, MessageQueue, SendResult, SendStatus, send_results
from boltmq.options import ProducerOptions
from boltmq.producer import Producer, SendError
from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.body_compression import compress_body
from boltmq.wire.record import SYS_FLAG_TRANSACTION_PREPARED

log = logging.getLogger(__name__)

STREAM_RETRY_PAUSE_S = 0.5
"""Pause before reopening a check stream that ended."""
REFUSED_RETRY_PAUSE_S = 10.0
"""Pause before reopening a check stream the broker refused (the account lacks PUB on
the producer group): the ACL may be fixed, but not within the second."""
REFUSED = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)
BROKER_REFRESH_S = 10.0
"""How often the registry is asked for masters to open check streams to."""
MASTER_ID = 0


class LocalTransactionState(enum.Enum):
    """What a local transaction (or a check of one) says."""

    COMMIT = broker_pb2.TRANSACTION_COMMIT
    ROLLBACK = broker_pb2.TRANSACTION_ROLLBACK
    UNKNOWN = broker_pb2.TRANSACTION_UNKNOWN


class TransactionListener(Protocol):
    """Answers the broker's check-back for a half message of the group."""

    def check_local_transaction(self, msg: message_pb2.MessageExt) -> LocalTransactionState:
        """The local transaction's outcome for ``msg`` (UNKNOWN: ask again later)."""


@dataclass(frozen=True)
class TransactionSendResult:
    """The half message's send, and what the local transaction said."""

    send_result: SendResult
    state: LocalTransactionState
    transaction_id: str


def _state_of(run: Callable[[], object], what: str) -> LocalTransactionState:
    """Run ``run``; its state, UNKNOWN when it raised or returned something else."""
    try:
        state = run()
    except Exception:
        log.exception("%s raised: the transaction stays undecided", what)
        return LocalTransactionState.UNKNOWN
    if not isinstance(state, LocalTransactionState):
        log.error("%s returned %r, not a LocalTransactionState: UNKNOWN", what, state)
        return LocalTransactionState.UNKNOWN
    return state


class TransactionProducer:
    """A producer of one group that sends messages in transactions (module docstring)."""

    def __init__(
        self,
        registry: str | Sequence[str],
        group: str,
        listener: TransactionListener,
        *,
        send_timeout_ms: int | None = None,
        options: ProducerOptions | None = None,
        tls: ClientTLS | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if options is not None and send_timeout_ms is not None:
            raise ValueError("give send_timeout_ms in options, not beside them")
        if options is None:
            timeout_ms = 3_000 if send_timeout_ms is None else send_timeout_ms
            options = ProducerOptions(send_timeout_ms=timeout_ms)
        self.producer = Producer(registry, group, options=options, tls=tls, credentials=credentials)
        self.group = group
        self.listener = listener
        self._timeout_s = options.send_timeout_ms / 1000
        self._stop = threading.Event()
        self._streams: dict[str, grpc.Future | None] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._counter = itertools.count()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> TransactionProducer:
        """Start the producer and open check streams to the cluster's masters."""
        self.producer.start()
        self._open_streams()
        watcher = threading.Thread(
            target=self._watch_brokers, daemon=True, name="boltmq-tx-brokers"
        )
        watcher.start()
        self._threads.append(watcher)
        return self

    def shutdown(self) -> None:
        """Close the check streams and the producer."""
        self._stop.set()
        with self._lock:
            for call in self._streams.values():
                if call is not None:
                    call.cancel()
        for thread in self._threads:
            thread.join()
        self.producer.shutdown()

    def __enter__(self) -> TransactionProducer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ---------------------------------------------------------------- send
    def send_in_transaction(
        self, msg: Message, local_fn: Callable[[Message], LocalTransactionState]
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``local_fn(msg)``, end the transaction."""
        transaction_id = uuid.uuid4().hex.upper()
        proto = msg.to_proto()
        # a long body goes compressed, as every send of the producer's (the bits stay on
        # the committed copy: the broker copies body and sys_flag together)
        proto.body, compressed = compress_body(proto.body, self.producer.options.compress_body_over)
        proto.sys_flag = SYS_FLAG_TRANSACTION_PREPARED | compressed
        proto.properties.update(
            {"TRAN_MSG": "true", "PGROUP": self.group, "UNIQ_KEY": transaction_id}
        )
        queue, address = self._pick(msg.topic)
        request = broker_pb2.SendRequest(producer_group=self.group, messages=[proto])
        request.messages[0].queue_id = queue.queue_id
        try:
            response = self.producer.client.broker(address).SendMessage(
                request, timeout=self._timeout_s
            )
        except grpc.RpcError as exc:
            raise SendError(
                f"half message to {msg.topic!r} refused: {rpc_error_text(exc)}"
            ) from None
        result = send_results(response, [transaction_id])[0]
        if result.status is SendStatus.SEND_FAILED:
            raise SendError(
                f"half message to {msg.topic!r} refused: {result.put_status}: {result.error}",
                result,
            )
        state = _state_of(lambda: local_fn(msg), "local transaction")
        if state is not LocalTransactionState.UNKNOWN:
            self._end(address, result.commitlog_offset, state, from_check=False)
        return TransactionSendResult(result, state, transaction_id)

    def _pick(self, topic: str) -> tuple[MessageQueue, str]:
        client = self.producer.client
        route_topic = topic
        try:
            queues = client.write_queues(topic)
        except TopicNotFound:  # auto-created by the template's brokers (queue 0 exists)
            route_topic = DEFAULT_TOPIC
            queues = [
                MessageQueue(topic, q.broker_name, 0) for q in client.write_queues(DEFAULT_TOPIC)
            ]
        if not queues:
            raise SendError(f"no writable queue for topic {topic!r}")
        queue = queues[next(self._counter) % len(queues)]
        return queue, client.address_of(
            MessageQueue(route_topic, queue.broker_name, queue.queue_id)
        )

    def _end(
        self, address: str, offset: int, state: LocalTransactionState, *, from_check: bool
    ) -> None:
        """EndTransaction; a failure is logged (the broker's check-back decides later)."""
        request = broker_pb2.EndTransactionRequest(
            producer_group=self.group,
            prepared_commitlog_offset=offset,
            decision=state.value,
            from_check=from_check,
        )
        try:
            self.producer.client.broker(address).EndTransaction(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            log.warning(
                "EndTransaction %s of %d at %s failed (the broker will check back): %s",
                state.name,
                offset,
                address,
                rpc_error_text(exc),
            )

    # ---------------------------------------------------------------- check-back
    def _watch_brokers(self) -> None:
        while not self._stop.wait(BROKER_REFRESH_S):
            self._open_streams()

    def _open_streams(self) -> None:
        try:
            brokers = self.producer.client.cluster_brokers()
        except RegistryError as exc:
            log.warning("no registry answered; check streams not refreshed: %s", exc)
            return
        for broker in brokers:
            if broker.broker_id != MASTER_ID:
                continue
            with self._lock:
                if broker.address in self._streams or self._stop.is_set():
                    continue
                self._streams[broker.address] = None
            thread = threading.Thread(
                target=self._stream,
                args=(broker.address,),
                daemon=True,
                name=f"boltmq-tx-checks-{broker.address}",
            )
            thread.start()
            self._threads.append(thread)

    def _stream(self, address: str) -> None:
        """Answer the checks one broker pushes, reopening the stream when it ends."""
        request = broker_pb2.TransactionChecksRequest(
            producer_group=self.group, client_id=self.producer.client.client_id
        )
        while not self._stop.is_set():
            call = self.producer.client.broker(address).TransactionChecks(request)
            with self._lock:
                self._streams[address] = call
            if self._stop.is_set():
                call.cancel()
            try:
                for check in call:
                    self._answer(address, check)
            except grpc.RpcError as exc:
                if exc.code() in REFUSED:
                    log.warning(
                        "check stream to %s refused (this group's undecided transactions "
                        "are not checked back here; retrying in %.0f s): %s",
                        address,
                        REFUSED_RETRY_PAUSE_S,
                        rpc_error_text(exc),
                    )
                    self._stop.wait(REFUSED_RETRY_PAUSE_S)
                elif not self._stop.is_set():
                    log.debug("check stream to %s ended: %s", address, rpc_error_text(exc))
            self._stop.wait(STREAM_RETRY_PAUSE_S)

    def _answer(self, address: str, check: broker_pb2.TransactionCheck) -> None:
        state = _state_of(
            lambda: self.listener.check_local_transaction(check.message), "check_local_transaction"
        )
        if state is not LocalTransactionState.UNKNOWN:
            self._end(address, check.prepared_commitlog_offset, state, from_check=True)
