"""Transactions under access control: a half message is its producer group's.

The attacks, by accounts that are not the producer group's: open the group's
check-back stream (which carries each undecided half's topic and body), and
commit or roll back its halves by offset, probing other records' topics
through EndTransaction's errors. Each is refused; the errors say nothing of
the record at the offset; the group's own producer still commits its halves
and gets its own check-backs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from boltmq import LocalTransactionState, Message, TransactionProducer
from boltmq.kernel.signing import Credentials
from boltmq.v1 import broker_pb2, message_pb2
from tests.integration.test_acl import ADMIN, ORDERS, AclCluster, queue_end, send
from tests.waiting import wait_until

HELPER = Credentials("helper-app", "helper-secret-1")
MALLORY = Credentials("mallory-app", "mallory-secret-1")
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": ORDERS.access_key,
            "secretKey": ORDERS.secret_key,
            "topicPerms": {"orders": "PUB|SUB"},
            "groupPerms": {"txg": "PUB"},
        },
        {  # the group's right, but not the topic's
            "accessKey": HELPER.access_key,
            "secretKey": HELPER.secret_key,
            "topicPerms": {"audit": "PUB"},
            "groupPerms": {"txg": "PUB"},
        },
        {
            "accessKey": MALLORY.access_key,
            "secretKey": MALLORY.secret_key,
            "topicPerms": {"mallory": "PUB|SUB"},
            "groupPerms": {"mallory-group": "PUB|SUB"},
        },
    ]
}
TX_SETTINGS = (
    "transaction_timeout_ms=1500",
    "transaction_check_interval_ms=100",
    "transaction_check_max=20",
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[AclCluster]:
    started = AclCluster(tmp_path, SEED, TX_SETTINGS)
    yield started
    started.stop()


class Listener:
    """Answers check-backs with COMMIT and keeps what it was asked about."""

    def __init__(self) -> None:
        self.checked: list[message_pb2.MessageExt] = []

    def check_local_transaction(self, msg: message_pb2.MessageExt) -> LocalTransactionState:
        self.checked.append(msg)
        return LocalTransactionState.COMMIT


class RawChecks:
    """A TransactionChecks stream opened by hand; what it received, or how it ended."""

    def __init__(self, cluster: AclCluster, who: Credentials, group: str) -> None:
        self.call = cluster.stub(who).TransactionChecks(
            broker_pb2.TransactionChecksRequest(producer_group=group, client_id=f"raw-{group}")
        )
        self.received: list[broker_pb2.TransactionCheck] = []
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for check in self.call:
                self.received.append(check)
        except grpc.RpcError as exc:
            self.code, self.details = exc.code(), str(exc.details())

    def opened(self) -> bool:
        """Wait for the broker's answer: True once it has the stream open (its initial
        metadata came), False when it refused the stream."""
        try:
            return ("boltmq-checks-open", "1") in tuple(self.call.initial_metadata() or ())
        except grpc.RpcError:
            return False

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(5)


def end(
    cluster: AclCluster,
    who: Credentials,
    group: str,
    offset: int,
    decision: broker_pb2.TransactionDecision.ValueType = broker_pb2.TRANSACTION_ROLLBACK,
) -> broker_pb2.EndTransactionResponse:
    response: broker_pb2.EndTransactionResponse = cluster.stub(who).EndTransaction(
        broker_pb2.EndTransactionRequest(
            producer_group=group, prepared_commitlog_offset=offset, decision=decision
        ),
        timeout=5,
    )
    return response


def refusal(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()  # type: ignore[operator]
    error = info.value
    return error.code(), str(error.details())  # type: ignore[attr-defined]


def test_other_accounts_cannot_listen_to_or_decide_a_groups_transactions(
    cluster: AclCluster,
) -> None:
    stolen = RawChecks(cluster, MALLORY, "txg")
    helper = RawChecks(cluster, HELPER, "txg")  # may be txg, may not publish to orders
    listener = Listener()
    producer = TransactionProducer(
        cluster.registry.address, "txg", listener, credentials=ORDERS
    ).start()
    try:
        half = producer.send_in_transaction(
            Message(topic="orders", body=b"card 4111"), lambda m: LocalTransactionState.UNKNOWN
        ).send_result.commitlog_offset
        plain = send(cluster.stub(ORDERS), "orders", b"plain").commitlog_offsets[0]
        wait_until(lambda: stolen.code is not None, "the attacker's check stream refused")
        assert stolen.code == grpc.StatusCode.PERMISSION_DENIED and "'txg'" in stolen.details

        # deciding as the group takes the group's right
        code, details = refusal(lambda: end(cluster, MALLORY, "txg", half))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "group 'txg'" in details
        # as one's own group, or as the group without the topic's right: one answer,
        # the same for a half, a plain message and nothing at all
        answers = {
            refusal(lambda: end(cluster, MALLORY, "mallory-group", half)),
            refusal(lambda: end(cluster, MALLORY, "mallory-group", plain)),
            refusal(lambda: end(cluster, MALLORY, "mallory-group", 1 << 40)),
        }
        assert {code for code, _ in answers} == {grpc.StatusCode.NOT_FOUND}
        code, details = refusal(lambda: end(cluster, HELPER, "txg", half))
        assert code == grpc.StatusCode.NOT_FOUND
        for _, text in [*answers, (code, details)]:
            assert "orders" not in text and "no half message of producer group" in text
        assert queue_end(cluster, "orders") == 1  # only the plain message: nothing decided

        # the group's producer gets the check-back (the helper's stream never does)
        wait_until(lambda: listener.checked, "the check-back of the undecided half")
        wait_until(lambda: queue_end(cluster, "orders") == 2, "the half committed")
    finally:
        producer.shutdown()
        stolen.close()
        helper.close()
    assert [bytes(m.body) for m in listener.checked][:1] == [b"card 4111"]
    assert helper.received == []


def test_the_producer_group_commits_its_own_halves(cluster: AclCluster) -> None:
    with TransactionProducer(
        cluster.registry.address, "txg", Listener(), credentials=ORDERS
    ) as producer:
        result = producer.send_in_transaction(
            Message(topic="orders", body=b"paid"), lambda m: LocalTransactionState.COMMIT
        )
    assert result.state is LocalTransactionState.COMMIT
    assert queue_end(cluster, "orders") == 1
    again = end(cluster, ORDERS, "txg", result.send_result.commitlog_offset)
    assert again.already_decided and again.decision == broker_pb2.TRANSACTION_COMMIT
    # a half message is sent only by an account holding its producer group's PUB
    half = broker_pb2.SendRequest(
        producer_group="txg",
        messages=[message_pb2.Message(topic="mallory", queue_id=-1, body=b"spam", sys_flag=0x4)],
    )
    code, details = refusal(lambda: cluster.stub(MALLORY).SendMessage(half, timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "group 'txg'" in details
