"""The confirm offset and epoch fencing on the HA stream, with real store and HA processes.

- Under SYNC_MASTER a consumer never reads what no replica holds: with the
  replica's HA service stopped, the master's unacknowledged tail is stored but
  not served; it is served once the replica has caught up (docs/ha.md).
- A replica that knows a newer epoch refuses a deposed master's chunks, and that
  master's SYNC_MASTER sends fail instead of being acknowledged.
- A master whose HA service alone dies acknowledges nothing more (no replica
  reports reach its store) and serves none of what it stored meanwhile.
- A broker's long poll is woken when a replica has the message, not at the append.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, message_pb2, store_pb2, store_pb2_grpc
from tests.integration.broker_fixtures import (
    LONG_SUSPEND_MS,
    RPC_TIMEOUT_S,
    Stubs,
    msg,
    upsert,
)
from tests.integration.broker_fixtures import send as broker_send
from tests.integration.broker_fixtures import stubs as stubs
from tests.integration.procs import ServiceProcess
from tests.integration.test_ha import TOPIC, Procs, ha_status, info
from tests.waiting import wait_until

SYNC = ("broker_role=SYNC_MASTER", "slave_timeout_ms=1000")


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    started = Procs(tmp_path)
    yield started
    started.stop_all()


@pytest.fixture
def stub() -> Iterator[Callable[[ServiceProcess], store_pb2_grpc.StoreServiceStub]]:
    """``stub(store_proc)``: a StoreService stub on a blocking channel."""
    channels: list[grpc.Channel] = []

    def factory(proc: ServiceProcess) -> store_pb2_grpc.StoreServiceStub:
        channels.append(sync_channel(proc.address))
        return store_pb2_grpc.StoreServiceStub(channels[-1])

    yield factory
    for chan in channels:
        chan.close()


def send(store: store_pb2_grpc.StoreServiceStub, *bodies: str) -> list[int]:
    """One message per body to queue 0; the statuses."""
    messages = [message_pb2.Message(topic=TOPIC, queue_id=0, body=b.encode()) for b in bodies]
    response = store.Append(store_pb2.AppendRequest(messages=messages), timeout=10)
    return list(response.statuses)


def served(store: store_pb2_grpc.StoreServiceStub) -> list[str]:
    """The bodies a consumer of queue 0 can read now."""
    response = store.Pull(
        store_pb2.PullRequest(topic=TOPIC, queue_id=0, queue_offset=0, max_messages=64),
        timeout=10,
    )
    return [m.body.decode() for m in response.messages]


def pair(procs: Procs, stub, *master_settings: str):  # type: ignore[no-untyped-def]
    """A master store (SYNC_MASTER) and its HA, a replica store and its HA following it."""
    m_store = procs.store("m", *SYNC, *master_settings)
    m_ha = procs.ha(m_store)
    r_store = procs.store("r", "broker_role=SLAVE")
    r_ha = procs.ha(r_store, f"master_address={m_ha.address}")
    master, replica = stub(m_store), stub(r_store)
    wait_until(lambda: bool(ha_status(m_ha).replicas), "the replica to connect")
    assert send(master, "first") == [message_pb2.PUT_OK]
    return m_store, m_ha, r_store, r_ha, master, replica


def test_an_unacknowledged_tail_is_served_once_the_replica_has_it(procs: Procs, stub) -> None:
    _, m_ha, r_store, r_ha, master, replica = pair(procs, stub)
    assert served(master) == ["first"]
    r_ha.stop()
    statuses = send(master, "tail-1", "tail-2")
    assert message_pb2.PUT_OK not in statuses  # SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT
    assert served(master) == ["first"]  # stored, not served: a failover could take it back
    assert info(master).commitlog_max_offset > info(replica).commitlog_max_offset
    procs.ha(r_store, f"master_address={m_ha.address}")
    wait_until(lambda: served(master) == ["first", "tail-1", "tail-2"], "the tail to be served")
    # The replica serves what it received: its master and itself hold it.
    wait_until(lambda: served(replica) == ["first", "tail-1", "tail-2"], "the replica to serve")


def test_a_deposed_master_cannot_write_into_a_replica_of_a_newer_epoch(procs: Procs, stub) -> None:
    _, _, _, r_ha, master, replica = pair(procs, stub)
    old_epoch = info(master).epoch
    # The replica learns of a newer epoch (as when it follows the next master).
    replica.SetRole(
        store_pb2.SetRoleRequest(role=store_pb2.REPLICA, epoch=old_epoch + 1, broker_id=1),
        timeout=10,
    )
    held = info(replica).commitlog_max_offset
    statuses = send(master, "from-the-deposed-master")
    assert statuses and message_pb2.PUT_OK not in statuses
    assert info(replica).commitlog_max_offset == held
    assert served(master) == ["first"]
    wait_until(lambda: "deposed master" in r_ha.log(), "the replica to log the refusal")


def test_a_replica_store_refuses_a_chunk_of_an_older_epoch(procs: Procs, stub) -> None:
    r_store = procs.store("r", "broker_role=SLAVE")
    replica = stub(r_store)
    replica.SetRole(
        store_pb2.SetRoleRequest(role=store_pb2.REPLICA, epoch=3, broker_id=1), timeout=10
    )
    stale = store_pb2.CommitLogChunk(offset=0, data=b"x", end_offset=1, master_epoch=2)
    answers = list(replica.AppendRawStream(iter([stale]), timeout=10))
    assert len(answers) == 1 and not answers[0].ok
    assert "epoch 2" in answers[0].error and "deposed" in answers[0].error
    try:
        replica.AppendRaw(store_pb2.AppendRawRequest(offset=0, data=b""), timeout=10)
    except grpc.RpcError as exc:
        assert exc.code() is grpc.StatusCode.INVALID_ARGUMENT
    else:
        raise AssertionError("an empty AppendRaw must be refused")


def test_a_master_whose_ha_service_dies_acknowledges_nothing_more(procs: Procs, stub) -> None:
    _, m_ha, _, _, master, _ = pair(procs, stub)
    m_ha.kill()
    statuses = send(master, "while-ha-is-dead")
    assert statuses == [message_pb2.SLAVE_NOT_AVAILABLE]
    assert served(master) == ["first"]


def test_a_long_poll_wakes_when_the_replica_has_the_message_not_at_the_append(
    procs: Procs, stub, stubs: Stubs
) -> None:
    m_store, m_ha, r_store, r_ha, _, _ = pair(procs, stub)
    registry = procs.start("registry")
    broker = stubs.broker(
        procs.start(
            "broker",
            f"store_address={m_store.address}",
            f"registry_addresses={registry.address}",
        )
    )
    upsert(broker, "Waiting", queues=1)
    r_ha.stop()
    wait_until(lambda: not ha_status(m_ha).replicas, "the master to forget the replica")
    parked = broker.PullMessage.future(
        broker_pb2.BrokerPullRequest(
            consumer_group="cg",
            topic="Waiting",
            queue_id=0,
            queue_offset=0,
            max_messages=8,
            suspend_timeout_ms=LONG_SUSPEND_MS,
            commit_offset=-1,
        ),
        timeout=RPC_TIMEOUT_S,
    )
    outcome = broker_send(broker, msg("Waiting", b"held back", 0))[0]
    assert outcome.status == broker_pb2.SEND_SLAVE_NOT_AVAILABLE
    time.sleep(1.0)
    assert not parked.done(), "a message no replica holds woke the long poll"
    procs.ha(r_store, f"master_address={m_ha.address}")  # the replica catches up
    response = parked.result()
    assert response.status == message_pb2.FOUND
    assert [m.body for m in response.messages] == [b"held back"]
