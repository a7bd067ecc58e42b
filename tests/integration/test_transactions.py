"""Transactions end to end: a real registry, store and broker, the SDK's TransactionProducer.

What is asserted is what a consumer sees: how many entries the topic's consume
queues hold (TopicStatus) and what a pull returns, before and after each
decision; never early, never twice. The broker checks back after 400 ms, every
100 ms, at most 3 times.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import LocalTransactionState, Message, Producer, PullConsumer, TransactionProducer
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2
from tests.integration.conftest import Cluster
from tests.waiting import wait_until

TIMEOUT_MS = 400
CHECK_MAX = 3
TX_BROKER_SETTINGS = (
    f"transaction_timeout_ms={TIMEOUT_MS}",
    "transaction_check_interval_ms=100",
    f"transaction_check_max={CHECK_MAX}",
)
QUIET_S = (TIMEOUT_MS / 1000) * (CHECK_MAX + 2)
"""Long enough for every check a broker could still make: what is not seen by then,
is not coming."""


class TxCluster(Cluster):
    """The standard cluster with short transaction timeouts."""

    def _start_broker(self, port: int = 0):  # type: ignore[no-untyped-def]
        return self._start(
            "broker",
            f"store_address={self.store.address}",
            f"registry_addresses={self.registry.address}",
            "register_interval_ms=500",
            "client_expiry_ms=3000",
            "client_scan_interval_ms=200",
            "offset_persist_interval_ms=500",
            *TX_BROKER_SETTINGS,
            port=port,
        )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[TxCluster]:
    started = TxCluster(tmp_path)
    yield started
    started.stop()


def stub(cluster: Cluster) -> broker_pb2_grpc.BrokerServiceStub:
    return broker_pb2_grpc.BrokerServiceStub(sync_channel(cluster.broker.address))


def visible(cluster: Cluster, topic: str) -> int:
    """Entries in the topic's consume queues: what consumers can ever get."""
    try:
        queues = stub(cluster).TopicStatus(broker_pb2.TopicStatusRequest(topic=topic)).queues
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            return 0
        raise
    return sum(q.max_offset for q in queues)


def bodies(cluster: Cluster, topic: str) -> list[bytes]:
    """Every message a consumer pulls from the topic's queues."""
    with PullConsumer(registry=cluster.registry.address, group="tx-reader") as consumer:
        found = []
        for queue in consumer.queues(topic):
            result = consumer.pull(queue, 0, 32)
            found += [bytes(m.body) for m in result.messages]
        return found


class Listener:
    """Answers checks with ``state`` and counts them."""

    def __init__(self, state: LocalTransactionState) -> None:
        self.state = state
        self.checked: list[message_pb2.MessageExt] = []
        self.lock = threading.Lock()

    def check_local_transaction(self, msg: message_pb2.MessageExt) -> LocalTransactionState:
        with self.lock:
            self.checked.append(msg)
        return self.state


def tx_producer(cluster: Cluster, listener: Listener, group: str = "txg") -> TransactionProducer:
    return TransactionProducer(cluster.registry.address, group, listener).start()


def test_commit_is_visible_once_and_only_after_the_commit(cluster: TxCluster) -> None:
    listener = Listener(LocalTransactionState.UNKNOWN)
    seen_during: list[int] = []

    def local(msg: Message) -> LocalTransactionState:
        seen_during.append(visible(cluster, "TxOrders"))
        return LocalTransactionState.COMMIT

    producer = tx_producer(cluster, listener)
    try:
        result = producer.send_in_transaction(
            Message(topic="TxOrders", body=b"order-1", tags="paid", keys=["k1"]), local
        )
    finally:
        producer.shutdown()
    assert result.state is LocalTransactionState.COMMIT
    assert seen_during == [0]  # the half message was never visible
    wait_until(lambda: visible(cluster, "TxOrders") == 1, "the committed message")
    time.sleep(QUIET_S)
    assert visible(cluster, "TxOrders") == 1  # checks never add a second copy
    assert bodies(cluster, "TxOrders") == [b"order-1"]
    assert listener.checked == []  # decided: never checked back


def test_rollback_is_never_visible(cluster: TxCluster) -> None:
    listener = Listener(LocalTransactionState.COMMIT)
    with tx_producer(cluster, listener) as producer:
        result = producer.send_in_transaction(
            Message(topic="TxRolled", body=b"x"), lambda m: LocalTransactionState.ROLLBACK
        )
        time.sleep(QUIET_S)
    assert result.state is LocalTransactionState.ROLLBACK
    assert visible(cluster, "TxRolled") == 0
    assert listener.checked == []


def test_undecided_transaction_is_committed_by_check_back(cluster: TxCluster) -> None:
    listener = Listener(LocalTransactionState.COMMIT)

    def failing(msg: Message) -> LocalTransactionState:
        raise RuntimeError("local database unreachable")

    with tx_producer(cluster, listener) as producer:
        result = producer.send_in_transaction(Message(topic="TxChecked", body=b"late"), failing)
        assert result.state is LocalTransactionState.UNKNOWN
        wait_until(lambda: visible(cluster, "TxChecked") == 1, "the message committed by a check")
        time.sleep(QUIET_S)
    assert visible(cluster, "TxChecked") == 1
    assert len(listener.checked) == 1
    check = listener.checked[0]
    assert (check.topic, bytes(check.body)) == ("TxChecked", b"late")
    assert check.properties["UNIQ_KEY"] == result.transaction_id


def test_check_back_reaches_a_new_producer_after_producer_and_broker_restart(
    cluster: TxCluster,
) -> None:
    first = Listener(LocalTransactionState.UNKNOWN)
    producer = tx_producer(cluster, first)
    producer.send_in_transaction(
        Message(topic="TxRestart", body=b"survives"), lambda m: LocalTransactionState.UNKNOWN
    )
    producer.shutdown()
    cluster.restart_broker()  # the table of undecided halves is rebuilt from the store
    assert visible(cluster, "TxRestart") == 0
    second = Listener(LocalTransactionState.COMMIT)
    with tx_producer(cluster, second):
        wait_until(lambda: visible(cluster, "TxRestart") == 1, "the commit by the new producer")
        time.sleep(QUIET_S)
    assert visible(cluster, "TxRestart") == 1
    assert bodies(cluster, "TxRestart") == [b"survives"]
    assert len(second.checked) == 1


def test_check_back_gives_up_after_the_maximum_and_rolls_back(cluster: TxCluster) -> None:
    listener = Listener(LocalTransactionState.UNKNOWN)
    with tx_producer(cluster, listener) as producer:
        result = producer.send_in_transaction(
            Message(topic="TxGiveUp", body=b"never"), lambda m: LocalTransactionState.UNKNOWN
        )
        wait_until(lambda: len(listener.checked) == CHECK_MAX, f"{CHECK_MAX} checks")
        time.sleep(QUIET_S)
    assert len(listener.checked) == CHECK_MAX
    assert visible(cluster, "TxGiveUp") == 0
    # A commit that comes too late learns the outcome instead of publishing.
    answer = stub(cluster).EndTransaction(
        broker_pb2.EndTransactionRequest(
            producer_group="txg",
            prepared_commitlog_offset=result.send_result.commitlog_offset,
            decision=broker_pb2.TRANSACTION_COMMIT,
        )
    )
    assert answer.already_decided and answer.decision == broker_pb2.TRANSACTION_ROLLBACK
    assert visible(cluster, "TxGiveUp") == 0


def end(
    cluster: Cluster,
    offset: int,
    group: str = "txg",
    decision: broker_pb2.TransactionDecision.ValueType = broker_pb2.TRANSACTION_COMMIT,
) -> broker_pb2.EndTransactionResponse:
    return stub(cluster).EndTransaction(
        broker_pb2.EndTransactionRequest(
            producer_group=group, prepared_commitlog_offset=offset, decision=decision
        )
    )


def code_of(call: Callable[[], object]) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    return caught.value.code()


def test_bad_end_transactions_get_clear_errors_and_repeats_write_nothing(
    cluster: TxCluster,
) -> None:
    with Producer(registry=cluster.registry.address, group="plain") as plain:
        normal = plain.send(Message(topic="TxBad", body=b"plain")).commitlog_offset
    with tx_producer(cluster, Listener(LocalTransactionState.UNKNOWN)) as producer:
        half = producer.send_in_transaction(
            Message(topic="TxBad", body=b"tx"), lambda m: LocalTransactionState.UNKNOWN
        )
    offset = half.send_result.commitlog_offset

    assert code_of(lambda: end(cluster, 1 << 40)) == grpc.StatusCode.NOT_FOUND
    # not a half, or another group's: one answer that describes nothing of the record
    assert code_of(lambda: end(cluster, normal)) == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: end(cluster, offset, group="")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(lambda: end(cluster, offset, group="other")) == grpc.StatusCode.NOT_FOUND
    assert (
        code_of(lambda: end(cluster, offset, decision=broker_pb2.TRANSACTION_UNKNOWN))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert code_of(lambda: end(cluster, -1)) == grpc.StatusCode.INVALID_ARGUMENT


def test_clients_cannot_send_markers_and_a_repeated_commit_is_one_message(
    cluster: TxCluster,
) -> None:
    forged = broker_pb2.SendRequest(
        producer_group="txg",
        messages=[message_pb2.Message(topic="TxOnce", queue_id=-1, body=b"forged", sys_flag=0x8)],
    )
    assert code_of(lambda: stub(cluster).SendMessage(forged)) == grpc.StatusCode.INVALID_ARGUMENT
    with tx_producer(cluster, Listener(LocalTransactionState.UNKNOWN)) as producer:
        half = producer.send_in_transaction(
            Message(topic="TxOnce", body=b"once"), lambda m: LocalTransactionState.UNKNOWN
        )
    offset = half.send_result.commitlog_offset
    first = end(cluster, offset)
    again = end(cluster, offset, decision=broker_pb2.TRANSACTION_ROLLBACK)
    assert not first.already_decided and first.marker_commitlog_offset > offset
    assert again.already_decided and again.decision == broker_pb2.TRANSACTION_COMMIT
    assert visible(cluster, "TxOnce") == 1
    assert bodies(cluster, "TxOnce") == [b"once"]
