"""The store's side of HA: raw reads and appends, truncation, roles and epochs, SYNC_MASTER.

Two real stores in ``tmp_path`` stand for a master and a replica; bytes move
between them exactly as the HA service moves them (``read_bytes`` on one,
``append_raw`` on the other), with no network in between.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from boltmq.wire.record import BODY_CRC_OFFSET, CorruptRecord
from services.store import GetStatus, MessageStore, PutStatus, StoreMessage
from services.store.role import RoleChangeRefused

SEGMENT = 64 * 1024  # small_config's segment size
CHUNK = 8 * 1024

StoreFactory = Callable[..., MessageStore]


def fill(
    store: MessageStore, count: int, body_bytes: int = 700, topic: str = "T", queues: int = 4
) -> list[int]:
    """Put ``count`` messages round-robin over ``queues``; their CommitLog offsets."""
    offsets = []
    for i in range(count):
        r = store.put_message(
            StoreMessage(
                topic=topic,
                queue_id=i % queues,
                body=bytes([i % 251]) * body_bytes,
                tags=f"t{i % 3}",
                keys=[f"k{i}"],
            )
        )
        assert r.status is PutStatus.PUT_OK
        offsets.append(r.commitlog_offset)
    return offsets


def replicate(master: MessageStore, replica: MessageStore, start: int | None = None) -> int:
    """Copy the master's CommitLog to the replica chunk by chunk; chunks copied."""
    offset = replica.commitlog.max_offset if start is None else start
    chunks = 0
    while True:
        data = master.commitlog.read_bytes(offset, CHUNK)
        if not data:
            return chunks
        offset = replica.append_raw(offset, data)
        chunks += 1


def commitlog_bytes(store: MessageStore, start: int = 0) -> bytes:
    store.flush()
    out = bytearray()
    for mf in store.commitlog.files.files:
        if mf.file_end_offset <= start:
            continue
        begin = max(0, start - mf.file_from_offset)
        out += bytes(mf.view[begin : mf.wrote_position])
    return bytes(out)


def queue_entries(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    cq = store.queues.get(topic, queue_id)
    assert cq is not None
    return list(cq.entries(cq.min_offset(), 1_000_000))


@pytest.fixture
def pair(make_store: StoreFactory, tmp_path: Path) -> tuple[MessageStore, MessageStore]:
    master = make_store(tmp_path / "master")
    replica = make_store(tmp_path / "replica", broker_role="SLAVE")
    return master, replica


# --------------------------------------------------------------------------- raw reads


def test_read_bytes_returns_whole_records_only(make_store: StoreFactory) -> None:
    store = make_store()
    fill(store, 10, body_bytes=1000)
    data = store.commitlog.read_bytes(0, 1500)  # less than two records
    record = store.look_message(0)
    assert record is not None
    assert len(data) == record.total_size
    one_byte = store.commitlog.read_bytes(0, 1)  # a record bigger than the budget still goes
    assert one_byte == data
    end = store.commitlog.max_offset
    assert store.commitlog.read_bytes(end, CHUNK) == b""


def test_read_bytes_ends_a_segment_with_its_blank_marker(make_store: StoreFactory) -> None:
    store = make_store()
    fill(store, 120, body_bytes=900)  # several segments
    offset = 0
    while offset < SEGMENT:
        data = store.commitlog.read_bytes(offset, CHUNK)
        assert data
        offset += len(data)
    assert offset == SEGMENT  # the last chunk of segment 0 ends exactly at its end


# --------------------------------------------------------------------------- raw appends


def test_replica_catches_up_byte_for_byte_with_equal_queues(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, replica = pair
    fill(master, 300)
    assert master.commitlog.max_offset > 2 * SEGMENT
    replicate(master, replica)
    assert replica.commitlog.max_offset == master.commitlog.max_offset
    assert commitlog_bytes(replica) == commitlog_bytes(master)
    assert replica.wait_dispatched()
    for queue_id in range(4):
        assert queue_entries(replica, "T", queue_id) == queue_entries(master, "T", queue_id)
    got = replica.get_messages("T", 1, 0, 32)
    assert got.status is GetStatus.FOUND
    assert [bytes(m.body) for m in got.messages] == [
        bytes(m.body) for m in master.get_messages("T", 1, 0, 32).messages
    ]
    assert (
        replica.query_messages("T", "k77")[0].queue_offset
        == master.query_messages("T", "k77")[0].queue_offset
    )
    assert master.verify() == [] and replica.verify() == []


def test_empty_replica_starts_at_the_masters_last_segment(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, replica = pair
    fill(master, 300)
    last_segment = master.commitlog.max_offset - master.commitlog.max_offset % SEGMENT
    assert last_segment > 0
    replicate(master, replica, start=last_segment)
    assert replica.commitlog.min_offset == last_segment
    assert commitlog_bytes(replica, last_segment) == commitlog_bytes(master, last_segment)
    assert replica.wait_dispatched()
    for queue_id in range(4):
        # The replica's queues hold the tail of the master's, at the same queue offsets.
        tail = queue_entries(replica, "T", queue_id)
        assert tail and tail == queue_entries(master, "T", queue_id)[-len(tail) :]
    assert replica.verify() == []


def test_empty_replica_refuses_an_offset_that_is_not_a_segment_start(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, replica = pair
    fill(master, 10)
    second = master.look_message(0)
    assert second is not None
    data = master.commitlog.read_bytes(second.total_size, CHUNK)
    with pytest.raises(ValueError, match="must start a segment"):
        replica.append_raw(second.total_size, data)
    assert replica.commitlog.files.files == []


def test_garbled_chunk_is_refused_and_changes_nothing(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, replica = pair
    fill(master, 40)
    first = master.commitlog.read_bytes(0, CHUNK)
    replica.append_raw(0, first)
    before = commitlog_bytes(replica)
    good = master.commitlog.read_bytes(len(first), CHUNK)
    # Framing, CRC, body bytes of the first and the last record (properties are
    # outside the format's CRC; their structure is checked, not their letters).
    for position in (0, 4, BODY_CRC_OFFSET, 200, len(good) - 400):
        bad = bytearray(good)
        bad[position] ^= 0x5A
        with pytest.raises((CorruptRecord, ValueError)):
            replica.append_raw(len(first), bytes(bad))
    with pytest.raises(CorruptRecord):
        replica.append_raw(len(first), good[:-10])  # a record cut short
    assert commitlog_bytes(replica) == before
    assert replica.commitlog.max_offset == len(first)
    replica.append_raw(len(first), good)  # the real chunk still fits exactly
    assert replica.verify() == []


def test_misaligned_chunks_are_refused(pair: tuple[MessageStore, MessageStore]) -> None:
    master, replica = pair
    fill(master, 40)
    first = master.commitlog.read_bytes(0, CHUNK)
    replica.append_raw(0, first)
    later = master.commitlog.read_bytes(
        len(first) + len(master.commitlog.read_bytes(len(first), CHUNK)), CHUNK
    )
    with pytest.raises(ValueError):  # a gap: bytes that belong further on
        replica.append_raw(len(first), later)
    with pytest.raises(CorruptRecord, match="belongs at"):  # right place, wrong bytes
        replica.append_raw(len(first), first)
    assert replica.commitlog.max_offset == len(first)


def test_master_refuses_raw_appends_and_replica_refuses_client_writes(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, replica = pair
    fill(master, 5)
    with pytest.raises(RoleChangeRefused):
        master.append_raw(master.commitlog.max_offset, master.commitlog.read_bytes(0, CHUNK))
    r = replica.put_message(StoreMessage(topic="T", queue_id=0, body=b"x"))
    assert r.status is PutStatus.SERVICE_NOT_AVAILABLE
    assert replica.commitlog.max_offset == 0


# --------------------------------------------------------------------------- truncation


def test_truncate_drops_the_tail_with_its_queue_and_index_entries(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, replica = pair
    offsets = fill(master, 200)
    replicate(master, replica)
    assert replica.wait_dispatched()
    cut_at = offsets[100]
    assert replica.commitlog.is_record_start(cut_at)
    heard: list[tuple[str, int, int]] = []
    replica.add_arrival_listener(lambda topic, queue_id, end: heard.append((topic, queue_id, end)))
    cut = replica.truncate(cut_at)
    assert cut == master.commitlog.max_offset - cut_at
    assert replica.commitlog.max_offset == cut_at
    assert sum(replica.max_offset("T", q) for q in range(4)) == 100
    # watchers hear each shortened queue's new end, as of an arrival (a broker's kept
    # "nothing new at the old end" answer must not outlive the cut)
    assert sorted(heard) == [("T", q, replica.max_offset("T", q)) for q in range(4)]
    assert replica.query_messages("T", "k150") == []
    assert replica.verify() == []
    assert commitlog_bytes(replica) == commitlog_bytes(master)[:cut_at]
    replicate(master, replica)  # and it can follow again from the cut
    assert commitlog_bytes(replica) == commitlog_bytes(master)
    assert replica.wait_dispatched() and replica.verify() == []


def test_truncate_refuses_bad_offsets_and_masters(pair: tuple[MessageStore, MessageStore]) -> None:
    master, replica = pair
    fill(master, 20)
    replicate(master, replica)
    with pytest.raises(ValueError, match="not the start of a record"):
        replica.truncate(17)
    with pytest.raises(ValueError, match="outside"):
        replica.truncate(replica.commitlog.max_offset + 1)
    with pytest.raises(RoleChangeRefused):
        master.truncate(0)
    assert replica.commitlog.max_offset == master.commitlog.max_offset


# --------------------------------------------------------------------------- roles


def test_promotion_continues_every_queue_and_survives_restart(
    pair: tuple[MessageStore, MessageStore], make_store: StoreFactory, tmp_path: Path
) -> None:
    master, replica = pair
    fill(master, 50)
    replicate(master, replica)
    end = replica.commitlog.max_offset
    role = replica.promote()
    assert role.is_master and role.epoch == 1 and role.epochs == [(1, end)]
    r = replica.put_message(StoreMessage(topic="T", queue_id=2, body=b"after"))
    assert r.status is PutStatus.PUT_OK
    assert r.queue_offset == master.max_offset("T", 2)
    with pytest.raises(RoleChangeRefused):
        replica.promote()
    replica.shutdown()
    again = make_store(tmp_path / "replica", broker_role="SLAVE")  # the config still says SLAVE
    assert again.role.is_master and again.role.epoch == 1
    assert (
        again.put_message(StoreMessage(topic="T", queue_id=2, body=b"x")).status is PutStatus.PUT_OK
    )


def test_demotion_refuses_writes_and_an_older_epoch(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, replica = pair
    replica.promote(epoch=5)
    with pytest.raises(RoleChangeRefused, match="older"):
        replica.demote(epoch=3)
    role = master.demote(epoch=5, epochs=[(0, 0), (5, 0)], broker_id=2)
    assert not role.is_master and role.broker_id == 2 and role.epochs == [(0, 0), (5, 0)]
    assert (
        master.put_message(StoreMessage(topic="T", queue_id=0, body=b"x")).status
        is PutStatus.SERVICE_NOT_AVAILABLE
    )


def test_only_if_replica_never_undoes_a_promotion(pair: tuple[MessageStore, MessageStore]) -> None:
    master, replica = pair
    with pytest.raises(RoleChangeRefused, match="only_if_replica"):
        master.demote(epoch=0, only_if_replica=True)
    assert master.role.is_master
    role = replica.demote(epoch=2, epochs=[(0, 0), (2, 0)], only_if_replica=True)
    assert role.epoch == 2 and not role.is_master


def test_a_demoted_master_promoted_again_keeps_its_configured_flavour(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    # A SYNC_MASTER fenced (demoted) and elected again must not come back ASYNC.
    master = make_store(broker_role="SYNC_MASTER", promoted_broker_role="ASYNC_MASTER")
    master.demote()
    assert master.promote(epoch=4).broker_role == "SYNC_MASTER"
    replica = make_store(tmp_path / "replica", broker_role="SLAVE")
    assert replica.promote().broker_role == "ASYNC_MASTER"  # promoted_broker_role's default


# --------------------------------------------------------------------------- SYNC_MASTER


def test_sync_master_without_replica_is_slave_not_available_but_stored(
    make_store: StoreFactory,
) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=200)
    r = store.put_message(StoreMessage(topic="T", queue_id=0, body=b"x"))
    assert r.status is PutStatus.SLAVE_NOT_AVAILABLE
    assert store.look_message(r.commitlog_offset) is not None


def test_sync_master_times_out_when_the_replica_does_not_ack(make_store: StoreFactory) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=100)
    store.report_replica("r1", 0)
    r = store.put_message(StoreMessage(topic="T", queue_id=0, body=b"x"))
    assert r.status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert store.look_message(r.commitlog_offset) is not None  # stored, not yet served


def test_sync_master_acknowledges_once_a_replica_acks_past_the_end(
    make_store: StoreFactory,
) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=10_000)
    store.report_replica("r1", 0)
    acked = threading.Event()

    def ack_when_written() -> None:
        while store.commitlog.max_offset == 0:
            threading.Event().wait(0.005)
        store.report_replica("r1", store.commitlog.max_offset)
        acked.set()

    thread = threading.Thread(target=ack_when_written)
    thread.start()
    r = store.put_message(StoreMessage(topic="T", queue_id=0, body=b"x"))
    thread.join()
    assert acked.is_set()
    assert r.status is PutStatus.PUT_OK


def test_sync_master_forgets_a_disconnected_replica(make_store: StoreFactory) -> None:
    store = make_store(broker_role="SYNC_MASTER", slave_timeout_ms=100)
    store.report_replica("r1", 0)
    store.report_replica("r1", 0, disconnected=True)
    r = store.put_message(StoreMessage(topic="T", queue_id=0, body=b"x"))
    assert r.status is PutStatus.SLAVE_NOT_AVAILABLE


def test_sync_master_replica_too_far_behind_is_not_in_sync(make_store: StoreFactory) -> None:
    store = make_store(
        broker_role="SYNC_MASTER", slave_timeout_ms=100, ha_max_gap_not_in_sync_bytes=1024
    )
    store.report_replica("r1", 0)
    fill_status = [
        store.put_message(StoreMessage(topic="T", queue_id=0, body=b"y" * 600)).status
        for _ in range(4)
    ]
    assert fill_status[0] is PutStatus.FLUSH_SLAVE_TIMEOUT  # within the gap: waited
    assert fill_status[-1] is PutStatus.SLAVE_NOT_AVAILABLE  # past it: at once
