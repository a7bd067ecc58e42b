"""The confirm offset: under SYNC_MASTER and on replicas, consumers see only what a replica
acknowledged, so a failover never takes back a message a consumer read (docs/ha.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from services.store import GetStatus, MessageStore, PutStatus, StoreMessage

StoreFactory = Callable[..., MessageStore]


def put(store: MessageStore, count: int, queue_id: int = 0) -> int:
    """``count`` messages; the CommitLog end after them."""
    for i in range(count):
        store.put_message(StoreMessage(topic="T", queue_id=queue_id, body=b"m%d" % i))
    return store.commitlog.max_offset


def visible(store: MessageStore, queue_id: int = 0) -> int:
    """How many messages of the queue consumers can read now."""
    assert store.wait_dispatched(5)
    return store.max_offset("T", queue_id)


def test_sync_master_serves_nothing_past_what_a_replica_acknowledged(
    make_store: StoreFactory,
) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=50)
    store.report_replica("r1", 0)
    put(store, 2)
    first_two = store.commitlog.max_offset
    store.report_replica("r1", first_two)  # the replica holds the first two
    put(store, 3)  # FLUSH_SLAVE_TIMEOUT: stored, never acknowledged
    assert visible(store) == 2
    got = store.get_messages("T", 0, 2, 10)
    assert got.status is GetStatus.OFFSET_OVERFLOW_ONE and not got.messages
    assert [bytes(m.body) for m in store.get_messages("T", 0, 0, 10).messages] == [b"m0", b"m1"]
    store.report_replica("r1", store.commitlog.max_offset)  # the replica caught up
    assert visible(store) == 5


def test_a_long_poll_hears_of_the_confirm_offset_not_of_the_append(
    make_store: StoreFactory,
) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=50)
    store.report_replica("r1", 0)
    arrivals: list[tuple[str, int, int]] = []
    heard = threading.Event()

    def listener(topic: str, queue_id: int, max_offset: int) -> None:
        arrivals.append((topic, queue_id, max_offset))
        heard.set()

    store.add_arrival_listener(listener)
    end = put(store, 1)
    assert store.wait_dispatched(5)
    assert arrivals == []  # appended, not acknowledged: nobody is woken
    store.report_replica("r1", end)
    assert heard.wait(10)
    assert arrivals == [("T", 0, 1)]


def test_without_read_confirmed_only_everything_stored_is_served(
    make_store: StoreFactory,
) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=50, read_confirmed_only=False)
    r = store.put_message(StoreMessage(topic="T", queue_id=0, body=b"x"))
    assert r.status is PutStatus.SLAVE_NOT_AVAILABLE
    assert visible(store) == 1


def test_an_async_master_serves_what_it_stored(make_store: StoreFactory) -> None:
    store = make_store()
    put(store, 3)
    assert visible(store) == 3


def test_a_replica_serves_what_it_received_and_a_cut_lowers_the_confirm_offset(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    master = make_store(tmp_path / "m")
    replica = make_store(tmp_path / "r", broker_role="SLAVE")
    put(master, 2)
    half = master.commitlog.max_offset
    put(master, 2)
    replica.append_raw(0, master.commitlog.read_bytes(0, 1 << 20))
    assert visible(replica) == 4  # a master and this replica hold it
    replica.truncate(half)
    assert replica.confirm.offset == half
    replica.append_raw(half, master.commitlog.read_bytes(half, 1 << 20))
    assert visible(replica) == 4


def test_a_promoted_fenced_master_serves_its_whole_commitlog(make_store: StoreFactory) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=50)
    store.report_replica("r1", 0)
    store.report_replica("r1", put(store, 1))
    put(store, 2)
    store.demote(epoch=2)
    assert visible(store) == 1
    store.promote(epoch=3)  # elected again: its whole CommitLog is the new epoch's past
    assert visible(store) == 3


def test_a_demoted_sync_master_keeps_its_unacknowledged_tail_hidden(
    make_store: StoreFactory,
) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=50)
    store.report_replica("r1", 0)
    store.report_replica("r1", put(store, 1))
    put(store, 2)
    store.demote(epoch=2)  # fenced: the tail may be cut when it follows the next master
    assert visible(store) == 1


def test_a_restarted_store_serves_what_it_holds(tmp_path: Path) -> None:
    from tests.conftest import quiet_disk, small_config

    config = small_config(tmp_path / "s", broker_role="SYNC_MASTER", slave_timeout_ms=50)
    store = MessageStore(config, disk_usage=quiet_disk)
    store.start()
    put(store, 2)
    assert visible(store) == 0
    store.shutdown()
    store = MessageStore(config, disk_usage=quiet_disk)
    store.start()
    try:
        assert visible(store) == 2
    finally:
        store.shutdown()
