"""The official RocketMQ 5 Python producer, unmodified, against a real BoltMQ cluster.

One cluster (registry, store, broker as processes) serves every test of the module;
the client's scripts connect to the broker's gRPC address, and what they sent is read
back with BoltMQ's own pull consumer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Cluster
from tests.integration.rocketmq.official_client import needs_official_client, of, run_client
from tests.integration.sdk_fixtures import pull_everything
from tests.waiting import wait_until

pytestmark = needs_official_client
TRANSACTION_TIMEOUT_MS = 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = Cluster(
        Path(tmp_path_factory.mktemp("rmq-producer")),
        (
            f"transaction_timeout_ms={TRANSACTION_TIMEOUT_MS}",
            "transaction_check_interval_ms=300",
        ),
    )
    yield started
    started.stop()


def bodies_of(cluster: Cluster, topic: str) -> list[str]:
    return sorted(bytes(m.body).decode() for m in pull_everything(cluster, topic))


def test_sync_and_async_sends_are_stored_with_their_ids_tags_keys_and_properties(
    cluster: Cluster,
) -> None:
    sync = of(run_client("rmq_producer.py", cluster.broker.address, "send", "RmqSync", "3"), "sent")
    asynchronous = of(
        run_client("rmq_producer.py", cluster.broker.address, "send_async", "RmqSync", "4"),
        "sent",
    )
    assert len(sync) == 3 and len(asynchronous) == 4
    stored = pull_everything(cluster, "RmqSync")
    assert sorted(bytes(m.body).decode() for m in stored) == sorted(
        [f"sync-{i}" for i in range(3)] + [f"async-{i}" for i in range(4)]
    )
    assert {m.unique_id for m in stored} == {e["message_id"] for e in sync + asynchronous}
    first = stored[0]
    assert first.tags == "t" and first.keys == ["k1"]
    assert first.properties["origin"] == "rmq-python"


def test_fifo_messages_of_one_group_share_a_queue_in_send_order(cluster: Cluster) -> None:
    sent = of(
        run_client("rmq_producer.py", cluster.broker.address, "fifo", "RmqFifo", "3", "12"), "sent"
    )
    assert len(sent) == 12
    stored = pull_everything(cluster, "RmqFifo")
    by_group: dict[str, list[tuple[int, int, str]]] = {}
    for m in stored:
        group = m.properties["__SHARDINGKEY"]
        by_group.setdefault(group, []).append((m.queue_id, m.queue_offset, bytes(m.body).decode()))
    assert sorted(by_group) == ["g0", "g1", "g2"]
    for group, entries in by_group.items():
        assert len({queue for queue, _, _ in entries}) == 1, (group, entries)
        in_queue_order = [body for _, _, body in sorted(entries)]
        assert in_queue_order == [f"{group}-{i}" for i in range(12) if f"g{i % 3}" == group]


def test_a_delayed_message_appears_only_after_its_delivery_time(cluster: Cluster) -> None:
    (sent,) = of(
        run_client("rmq_producer.py", cluster.broker.address, "delay", "RmqDelay", "3"), "sent"
    )
    assert bodies_of(cluster, "RmqDelay") == []  # scheduled, not yet in its topic
    wait_until(lambda: bodies_of(cluster, "RmqDelay") == ["delayed"], "the delayed message")
    assert time.time() * 1000 >= sent["due_ms"] - 1000  # the delay levels' 1 s grain
    (stored,) = pull_everything(cluster, "RmqDelay")
    assert stored.unique_id == sent["message_id"]


def test_transactions_commit_roll_back_and_resolve_an_orphan_by_check_back(
    cluster: Cluster,
) -> None:
    address = cluster.broker.address
    committed = run_client("rmq_producer.py", address, "transaction", "RmqTx", "commit")
    assert of(committed, "committed") and of(committed, "sent")[0]["transaction_id"]
    rolled_back = run_client("rmq_producer.py", address, "transaction", "RmqTx", "rollback")
    assert of(rolled_back, "rolled_back")
    assert bodies_of(cluster, "RmqTx") == ["tx-commit"]
    # An orphan: the producer never decides; the broker asks its checker (COMMIT).
    orphan = run_client(
        "rmq_producer.py",
        address,
        "transaction",
        "RmqTx",
        "orphan",
        str(TRANSACTION_TIMEOUT_MS / 1000 + 4),
    )
    (sent,) = of(orphan, "sent")
    checks = of(orphan, "check")
    assert checks and checks[0]["message_id"] == sent["message_id"]
    assert checks[0]["body"] == "tx-orphan"
    wait_until(
        lambda: bodies_of(cluster, "RmqTx") == ["tx-commit", "tx-orphan"], "the checked commit"
    )
