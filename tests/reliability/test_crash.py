"""kill -9 of the store or of the broker under sustained produce and consume load.

Each round: the load runs, a process is SIGKILLed mid-stream, and before it
restarts the independent reader checks the files a crash left behind (every
message acknowledged so far is already in the CommitLog, exactly once). The
process restarts on its port, the load goes on and must make progress, then
the store is stopped cleanly for ``boltmq store verify`` and the reader's
checks (exactly once, where the ack said, consecutive queue offsets per
queue) and started again. At the end the consumer drains every queue: it saw
every acknowledged message, and every resume from committed offsets started
at or before what it had processed (nothing skipped).

Rounds: ``BOLTMQ_RELIABILITY_ROUNDS``. With ASYNC_FLUSH the test prints how
many acknowledged messages a process crash lost: the page cache outlives the
process, so the answer must be zero.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.reliability.conftest import FaultCluster, check_acknowledged, check_files
from tests.reliability.files import scan_commitlog
from tests.reliability.load import Ledger, Load
from tests.reliability.scale import ROUNDS

ACKS_PER_PHASE = 200
"""Acknowledged messages awaited before a kill and after each restart."""


def run_rounds(cluster: FaultCluster, load: Load, kill: Callable[[], None]) -> int:
    """ROUNDS times: kill -> files checked -> restart -> progress -> clean stop -> verify.

    Returns how many acknowledged messages the killed stores' files lacked.
    """
    lost_total = 0
    for round_number in range(ROUNDS):
        load.wait_acks(ACKS_PER_PHASE)
        kill()
        if not cluster.store.alive():  # the store's files as the crash left them
            acked = load.ledger.snapshot()
            stored = scan_commitlog(cluster.root_dir).bodies()
            lost = sum(1 for body in acked if body not in stored)
            lost_total += lost
            print(
                f"round {round_number}: kill -9 of the store lost {lost} of {len(acked)} "
                f"acknowledged messages"
            )
            check_acknowledged(cluster.root_dir, acked)
            cluster.start_store()
        load.wait_acks(ACKS_PER_PHASE)
        cluster.stop_store()
        scan = check_files(cluster.root_dir, load.ledger.snapshot())
        print(
            f"round {round_number}: {len(scan.records)} records stored, "
            f"{load.ledger.acked_count()} acknowledged, {load.ledger.send_failures} "
            f"sends failed, {load.ledger.resumes} consumer resumes"
        )
        cluster.start_store()
    return lost_total


def check_consumer(ledger: Ledger) -> None:
    """The consumer saw every acknowledged message and never resumed past its progress."""
    assert ledger.skips == [], ledger.skips[:5]
    for body, ack in ledger.acked.items():
        assert ledger.consumed.get(ack.queue_id, {}).get(ack.queue_offset) == body, (
            f"{body!r} at {ack} was never consumed"
        )


@pytest.mark.parametrize("flush", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_store_kill9_loses_no_acknowledged_message_and_stores_each_once(
    fault_cluster: Callable[..., FaultCluster], flush: str
) -> None:
    cluster = fault_cluster(flush=flush)
    load = Load(cluster.registry.address).start()

    def kill_store() -> None:
        cluster.store.kill()
        cluster.store.stop()  # closes the dead process's pipe

    try:
        lost_total = run_rounds(cluster, load, kill_store)
        load.drain()
    finally:
        load.stop()
    print(f"{flush}: {ROUNDS} store crashes lost {lost_total} acknowledged messages")
    assert lost_total == 0
    cluster.broker.stop()  # first: it persists consumer offsets into the store
    cluster.stop_store()
    check_files(cluster.root_dir, load.ledger.acked)
    check_consumer(load.ledger)
    assert cluster.tracebacks() == []


def test_broker_kill9_loses_no_acknowledged_message_and_consumers_skip_nothing(
    fault_cluster: Callable[..., FaultCluster],
) -> None:
    cluster = fault_cluster(flush="SYNC_FLUSH")
    load = Load(cluster.registry.address).start()
    try:

        def kill_broker() -> None:
            cluster.restart_broker(kill=True)

        run_rounds(cluster, load, kill_broker)
        load.drain()
    finally:
        load.stop()
    assert load.ledger.resumes > ROUNDS, "the consumer never had to resume after a crash"
    cluster.broker.stop()  # first: it persists consumer offsets into the store
    cluster.stop_store()
    check_files(cluster.root_dir, load.ledger.acked)
    check_consumer(load.ledger)
    assert cluster.tracebacks() == []


def test_reader_catches_a_lost_acknowledged_message(tmp_path: Path) -> None:
    """The checks above can fail: an acknowledged body missing from the files is caught."""
    from services.store import MessageStore, StoreMessage
    from tests.conftest import quiet_disk, small_config
    from tests.reliability.load import Ack

    root = tmp_path / "store"
    with MessageStore(small_config(root), disk_usage=quiet_disk) as store:
        put = store.put_message(StoreMessage("T", b"stored"))
    acked = {
        b"stored": Ack(0, put.queue_offset, put.commitlog_offset),
        b"never-stored": Ack(0, 1, 999),
    }
    with pytest.raises(AssertionError, match="stored 0 times"):
        check_acknowledged(root, acked)
