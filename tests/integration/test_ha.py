"""HA replication end to end: real store and HA processes on port 0 (see docs/ha.md).

Each test runs a master store with its HA service and a replica store
(``broker_role=SLAVE``) with its HA service following the master's statically
(``master_address``). Segments are 64 KiB, so a few hundred KiB of messages
span several segments and leave blank markers. After catch-up the two
CommitLogs must be equal byte for byte over the replica's range, both stores
must report the same max offset, and pulls from the replica must return the
master's messages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.kernel.registry_client import RegistryClient
from boltmq.v1 import ha_pb2, ha_pb2_grpc, message_pb2, store_pb2, store_pb2_grpc
from tests.conftest import DISK_RATIOS_OFF_SETTINGS
from tests.integration.procs import ServiceProcess
from tests.page_residency import resident_pages
from tests.waiting import wait_until

SEGMENT_BYTES = 65536
STORE_SETTINGS = (
    f"mapped_file_size_commitlog={SEGMENT_BYTES}",
    "mapped_file_size_consume_queue=20000",
    "max_hash_slot_num=1000",
    "max_index_num=4000",
    "max_message_size_bytes=8192",
    *DISK_RATIOS_OFF_SETTINGS,
)
HA_SETTINGS = (
    "heartbeat_interval_ms=200",
    "housekeeping_interval_ms=2000",
    "role_check_interval_ms=100",
    "reconnect_min_ms=50",
    "reconnect_max_ms=500",
)
"""Short intervals so reconnects and role changes show within a fraction of a second."""
TOPIC = "Replicated"


class Procs:
    """Started processes, restartable on their port; stopped at the end of the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[ServiceProcess] = []

    def start(self, service: str, *settings: str, port: int = 0) -> ServiceProcess:
        proc = ServiceProcess(service, self.tmp_path / "logs", *settings, port=port).start()
        self.started.append(proc)
        return proc

    def store(self, name: str, *settings: str, port: int = 0) -> ServiceProcess:
        return self.start(
            "store", f"root_dir={self.tmp_path / name}", *STORE_SETTINGS, *settings, port=port
        )

    def ha(self, store: ServiceProcess, *settings: str, port: int = 0) -> ServiceProcess:
        return self.start(
            "ha", f"store_address={store.address}", *HA_SETTINGS, *settings, port=port
        )

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()


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
        chan = sync_channel(proc.address)
        channels.append(chan)
        return store_pb2_grpc.StoreServiceStub(chan)

    yield factory
    for chan in channels:
        chan.close()


def ha_status(proc: ServiceProcess) -> ha_pb2.HAStatus:
    with sync_channel(proc.address) as chan:
        status: ha_pb2.HAStatus = ha_pb2_grpc.HAServiceStub(chan).Status(
            ha_pb2.HAStatusRequest(), timeout=10
        )
        return status


def info(store: store_pb2_grpc.StoreServiceStub) -> store_pb2.StoreInfo:
    result: store_pb2.StoreInfo = store.GetStoreInfo(store_pb2.GetStoreInfoRequest(), timeout=10)
    return result


def produce(
    store: store_pb2_grpc.StoreServiceStub, batches: int, first: int = 0, body_bytes: int = 1000
) -> None:
    """``batches`` batches of 40 messages over two queues, each body naming its number."""
    for batch in range(first, first + batches):
        messages = [
            message_pb2.Message(
                topic=TOPIC,
                queue_id=i % 2,
                tags=f"t{i % 3}",
                keys=[f"k{batch}-{i}"],
                body=f"{batch}-{i}:".encode().ljust(body_bytes, b"."),
            )
            for i in range(40)
        ]
        response = store.Append(store_pb2.AppendRequest(messages=messages), timeout=10)
        assert set(response.statuses) == {message_pb2.PUT_OK}, response.errors


def commitlog(store: store_pb2_grpc.StoreServiceStub, start: int) -> bytes:
    """The store's CommitLog bytes from ``start`` to its end, through ReadCommitLog."""
    chunks = store.ReadCommitLog(store_pb2.ReadCommitLogRequest(offset=start), timeout=10)
    return b"".join(chunk.data for chunk in chunks)


def caught_up(
    master: store_pb2_grpc.StoreServiceStub, replica: store_pb2_grpc.StoreServiceStub
) -> None:
    """Wait until the replica's CommitLog ends where the master's does, and is dispatched."""

    def done() -> bool:
        try:
            m, r = info(master), info(replica)
        except grpc.RpcError:
            return False  # a store is restarting
        return m.commitlog_max_offset == r.commitlog_max_offset == r.dispatched_offset

    wait_until(done, "the replica to catch up")


def assert_same_data(
    master: store_pb2_grpc.StoreServiceStub,
    replica: store_pb2_grpc.StoreServiceStub,
    queue_ids: tuple[int, ...] = (0, 1),
) -> int:
    """Byte-for-byte equal CommitLogs over the replica's range and equal pulls; its start."""
    m, r = info(master), info(replica)
    assert r.commitlog_max_offset == m.commitlog_max_offset > 0
    start = r.commitlog_min_offset
    assert start >= m.commitlog_min_offset and start % SEGMENT_BYTES == 0
    assert commitlog(replica, start) == commitlog(master, start)
    for queue_id in queue_ids:
        queue_range = replica.QueueRange(
            store_pb2.QueueRangeRequest(topic=TOPIC, queue_id=queue_id)
        )
        assert queue_range.exists and queue_range.max_offset > queue_range.min_offset
        request = store_pb2.PullRequest(
            topic=TOPIC,
            queue_id=queue_id,
            queue_offset=queue_range.min_offset,
            max_messages=64,
            max_bytes=1 << 20,
        )
        from_replica, from_master = replica.Pull(request), master.Pull(request)
        assert from_replica.status == message_pb2.FOUND
        assert list(from_replica.messages) == list(from_master.messages)
        assert from_replica.messages[0].queue_offset == queue_range.min_offset
    return start


def test_empty_replica_starts_at_the_masters_last_segment(procs: Procs, stub) -> None:
    master_store = procs.store("master")
    master = stub(master_store)
    produce(master, 5)  # ~200 KiB: three full segments and part of a fourth
    master_end = info(master).commitlog_max_offset
    assert master_end > 3 * SEGMENT_BYTES
    master_ha = procs.ha(master_store)
    replica_store = procs.store("replica", "broker_role=SLAVE")
    replica = stub(replica_store)
    replica_ha = procs.ha(replica_store, f"master_address={master_ha.address}")

    caught_up(master, replica)
    start = assert_same_data(master, replica)
    assert start == master_end - master_end % SEGMENT_BYTES
    # Following: what the master stores from now on arrives too.
    produce(master, 3, first=5)
    caught_up(master, replica)
    assert assert_same_data(master, replica) == start
    found = replica.QueryByKey(store_pb2.QueryByKeyRequest(topic=TOPIC, key="k7-3"))
    assert [m.body[:5] for m in found.messages] == [b"7-3:."]

    replica_view = ha_status(replica_ha)
    assert (replica_view.role, replica_view.master_address, replica_view.connected) == (
        "REPLICA",
        master_ha.address,
        True,
    )
    end = info(master).commitlog_max_offset

    def master_sees_replica() -> bool:
        replicas = ha_status(master_ha).replicas
        return [(r.replica_address, r.acked_offset, r.lag_bytes) for r in replicas] == [
            (replica_ha.address, end, 0)
        ]

    wait_until(master_sees_replica, "the master's HA status to show the replica caught up")
    # The acks reached the master's store too (ReportReplicas: SYNC_MASTER waits on them).
    wait_until(
        lambda: (
            [(r.replica_address, r.acked_offset) for r in info(master).replicas]
            == [(replica_ha.address, end)]
        ),
        "the master store to know the replica's ack",
    )
    assert "ERROR" not in replica_ha.log() + master_ha.log()


def test_first_segment_copy_and_a_replica_behind_by_more_than_a_segment(procs: Procs, stub) -> None:
    # The master keeps one segment of flushed CommitLog cached: the catch-up below reads
    # segments whose pages it released (services/store/page_cache.py).
    # Its pulls of those pages are cold reads (docs/store-reads.md): without a bigger per-pull
    # limit it would answer fewer messages than the replica, whose pages are all cached.
    master_store = procs.store(
        "master",
        f"commitlog_page_cache_window_bytes={SEGMENT_BYTES}",
        "flush_interval_commitlog_ms=50",
        "max_transfer_bytes_on_message_in_disk=1048576",
    )
    master = stub(master_store)
    produce(master, 3)
    master_ha = procs.ha(master_store, "replica_start=FIRST_SEGMENT")
    replica_store = procs.store("replica", "broker_role=SLAVE")
    replica = stub(replica_store)
    replica_ha = procs.ha(replica_store, f"master_address={master_ha.address}")
    caught_up(master, replica)
    assert assert_same_data(master, replica) == 0

    # The replica's HA is down while the master writes more than two segments.
    replica_ha.stop()
    before = info(replica).commitlog_max_offset
    produce(master, 6, first=3)
    assert info(master).commitlog_max_offset - before > 3 * SEGMENT_BYTES
    assert info(replica).commitlog_max_offset == before
    # A segment written while the replica was away, whole segments behind the window.
    behind = (info(master).commitlog_max_offset // SEGMENT_BYTES - 2) * SEGMENT_BYTES
    assert behind >= before
    released = procs.tmp_path / "master" / "commitlog" / f"{behind:020d}"
    wait_until(
        lambda: not any(resident_pages(released)),
        f"the master to release the pages of {released.name}",
    )
    procs.ha(replica_store, f"master_address={master_ha.address}")
    caught_up(master, replica)
    assert assert_same_data(master, replica) == 0


class Writer:
    """Appends batches to the master in a thread until stopped, riding out restarts."""

    def __init__(self, master: store_pb2_grpc.StoreServiceStub) -> None:
        self._master = master
        self._stop = threading.Event()
        self.batches = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                produce(self._master, 1, first=1000 + self.batches, body_bytes=300)
                self.batches += 1
            except grpc.RpcError:
                time.sleep(0.05)

    def wait_for(self, more: int) -> None:
        target = self.batches + more
        wait_until(lambda: self.batches >= target, f"{more} more batches on the master")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_restarts_mid_stream_converge(procs: Procs, stub) -> None:
    master_store = procs.store("master")
    master = stub(master_store)
    produce(master, 1)
    master_ha = procs.ha(master_store, "replica_start=FIRST_SEGMENT")
    replica_store = procs.store("replica", "broker_role=SLAVE")
    replica = stub(replica_store)
    follow = f"master_address={master_ha.address}"
    replica_ha = procs.ha(replica_store, follow)
    writer = Writer(master)
    try:
        writer.wait_for(5)
        replica_ha.kill()  # the replica's HA dies mid-stream
        writer.wait_for(5)
        replica_ha = procs.ha(replica_store, follow, port=replica_ha.port)
        writer.wait_for(5)
        wait_until(lambda: info(replica).commitlog_max_offset > 0, "replication to resume")
        assert replica_store.stop() == 0  # the replica's store restarts under its HA
        writer.wait_for(5)
        replica_store = procs.store("replica", "broker_role=SLAVE", port=replica_store.port)
        writer.wait_for(5)
        master_ha.kill()  # and the master's HA
        master_ha = procs.ha(master_store, "replica_start=FIRST_SEGMENT", port=master_ha.port)
        writer.wait_for(5)
    finally:
        writer.stop()
    caught_up(master, replica)
    assert assert_same_data(master, replica) == 0
    assert ha_status(replica_ha).connected


def test_old_master_rejoins_and_drops_its_diverged_tail(procs: Procs, stub) -> None:
    a_store = procs.store("a")
    a = stub(a_store)
    produce(a, 2)
    a_ha = procs.ha(a_store, "replica_start=FIRST_SEGMENT")
    b_store = procs.store("b", "broker_role=SLAVE")
    b = stub(b_store)
    b_ha = procs.ha(b_store, f"master_address={a_ha.address}")
    caught_up(a, b)

    # Fail over: B becomes the master of epoch 1; A keeps writing a tail nobody has.
    promoted = b.SetRole(store_pb2.SetRoleRequest(role=store_pb2.MASTER, broker_id=0))
    fork = promoted.commitlog_max_offset
    assert promoted.role == "MASTER" and promoted.epoch == 1
    wait_until(
        lambda: ha_status(b_ha).role == "MASTER" and not ha_status(b_ha).connected,
        "B's HA to stop following",
    )
    produce(a, 1, first=50)
    produce(b, 2, first=60)
    assert info(a).commitlog_max_offset > fork

    # A comes back as a replica of B: it cuts back to the fork and copies B's epoch.
    a_ha.stop()
    a.SetRole(store_pb2.SetRoleRequest(role=store_pb2.REPLICA, broker_id=1))
    a_ha = procs.ha(a_store, f"master_address={b_ha.address}")
    caught_up(b, a)
    assert assert_same_data(b, a) == 0
    assert info(a).epoch == 1
    assert "truncated the CommitLog" in a_ha.log()
    assert not a.QueryByKey(store_pb2.QueryByKeyRequest(topic=TOPIC, key="k50-1")).messages
    assert a.QueryByKey(store_pb2.QueryByKeyRequest(topic=TOPIC, key="k61-1")).messages


def test_a_demoted_master_follows_the_new_master_it_finds_in_the_registry(
    procs: Procs, stub
) -> None:
    registry = procs.start("registry")
    find_master = (f"registry_addresses={registry.address}", "replica_start=FIRST_SEGMENT")
    a_store, b_store = procs.store("a"), procs.store("b", "broker_role=SLAVE")
    a, b = stub(a_store), stub(b_store)
    a_ha, b_ha = procs.ha(a_store, *find_master), procs.ha(b_store, *find_master)
    brokers = RegistryClient([registry.address])
    group = {"cluster_name": "DefaultCluster", "broker_name": "broker-a", "broker_id": 0}
    brokers.register(**group, address="127.0.0.1:1", ha_address=a_ha.address, epoch=0)
    produce(a, 2)
    caught_up(a, b)
    assert ha_status(b_ha).master_address == a_ha.address

    # B is promoted and registered as the group's master of epoch 1; A writes on, alone.
    assert b.SetRole(store_pb2.SetRoleRequest(role=store_pb2.MASTER, broker_id=0)).epoch == 1
    brokers.register(**group, address="127.0.0.1:2", ha_address=b_ha.address, epoch=1)
    brokers.unregister(**group, address="127.0.0.1:1")
    wait_until(lambda: ha_status(b_ha).role == "MASTER", "B's HA to serve as master")
    produce(a, 1, first=50)
    produce(b, 2, first=60)

    # A is demoted while its HA service runs: it ends its master side and follows B.
    a.SetRole(store_pb2.SetRoleRequest(role=store_pb2.REPLICA, broker_id=1))
    caught_up(b, a)
    assert assert_same_data(b, a) == 0
    status = ha_status(a_ha)
    assert (status.role, status.master_address, status.connected) == ("REPLICA", b_ha.address, True)
    assert "truncated the CommitLog" in a_ha.log()
    assert not a.QueryByKey(store_pb2.QueryByKeyRequest(topic=TOPIC, key="k50-1")).messages
    brokers.close()


def test_a_replica_with_other_segments_is_refused(procs: Procs, stub) -> None:
    master_store = procs.store("master")
    produce(stub(master_store), 1)
    master_ha = procs.ha(master_store)
    replica_store = procs.store(
        "replica", "broker_role=SLAVE", f"mapped_file_size_commitlog={2 * SEGMENT_BYTES}"
    )
    replica_ha = procs.ha(replica_store, f"master_address={master_ha.address}")
    wait_until(lambda: "refusing master" in replica_ha.log(), "the handshake to be refused")
    assert info(stub(replica_store)).commitlog_max_offset == 0
    assert not ha_status(replica_ha).connected


# ------------------------------------------------------------------ a fake master
class ScriptedMaster(ha_pb2_grpc.HAServiceServicer):
    """A master that answers each Replicate with the next script: a list of chunks.

    ``reports`` collects the first report of every connection (the replica's end).
    """

    def __init__(self, scripts: list[list[store_pb2.CommitLogChunk]]) -> None:
        self._scripts = scripts
        self.connections = 0
        self.reports: list[int] = []

    def Replicate(self, request_iterator, context):  # type: ignore[no-untyped-def]
        first = next(request_iterator)
        self.reports.append(first.max_offset)
        script = self._scripts[min(self.connections, len(self._scripts) - 1)]
        self.connections += 1
        handshake = store_pb2.CommitLogChunk(
            offset=first.max_offset, handshake=True, truncate_to=-1, segment_bytes=SEGMENT_BYTES
        )
        yield handshake
        yield from script
        # Then end the stream: the replica reconnects (at once after progress).


def test_garbled_and_misaligned_chunks_are_refused(procs: Procs, stub, tmp_path: Path) -> None:
    source = stub(procs.store("source"))
    produce(source, 2)
    whole = commitlog(source, 0)
    # Whole records only: cut at the record boundary nearest 20,000 bytes.
    good = whole[: _record_boundary(whole, 20_000)]
    rest = whole[len(good) : len(good) + 10_000]
    garbled = bytearray(rest)
    garbled[200] ^= 0xFF  # inside the first record's body: its CRC no longer matches
    after = whole[len(good) : _record_boundary(whole, 30_000)]  # whole records, all good

    def chunk(offset: int, data: bytes, end_offset: int | None = None) -> store_pb2.CommitLogChunk:
        end = offset + len(data) if end_offset is None else end_offset
        return store_pb2.CommitLogChunk(offset=offset, data=data, end_offset=end)

    scripts = [
        [chunk(0, good)],  # accepted
        [chunk(len(good), bytes(garbled))],  # bad CRC
        [chunk(len(good) + 8, rest)],  # not at the end
        [chunk(len(good), rest[:7])],  # half a record
        [chunk(len(good), after, len(good) + len(after) + 1)],  # says it ends elsewhere
    ]
    fake = ScriptedMaster(scripts)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    ha_pb2_grpc.add_HAServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        replica_store = procs.store("replica", "broker_role=SLAVE")
        replica = stub(replica_store)
        replica_ha = procs.ha(replica_store, f"master_address=127.0.0.1:{port}")
        wait_until(lambda: fake.connections >= 6, "the replica to reconnect after each refusal")
        assert info(replica).commitlog_max_offset == len(good)
        assert commitlog(replica, 0) == good
        assert set(fake.reports) == {0, len(good)}
        log = replica_ha.log()
        assert "refused" in log and "this store ends at" in log
        assert f"says it ends at {len(good) + len(after) + 1}" in log
        # The replica store refuses garbage handed to it directly, too.
        direct = replica.AppendRaw(
            store_pb2.AppendRawRequest(offset=len(good), data=bytes(garbled))
        )
        assert not direct.ok and direct.max_offset == len(good)
        assert commitlog(replica, 0) == good
    finally:
        server.stop(0)


def _record_boundary(data: bytes, near: int) -> int:
    """The largest record boundary at or below ``near`` (records start with their size)."""
    offset = 0
    while True:
        size = int.from_bytes(data[offset : offset + 4], "big")
        if offset + size > near:
            return offset
        offset += size
