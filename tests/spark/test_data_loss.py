"""failOnDataLoss after retention removed offsets a query needs (a real cleaner)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq.message import Message
from boltmq.producer import Producer
from boltmq.v1 import broker_pb2
from tests.conftest import DISK_RATIOS_OFF_SETTINGS
from tests.integration.conftest import CLUSTER_STORE_SETTINGS, Cluster

ALL_HOURS = ";".join(f"{hour:02d}" for hour in range(24))
RETENTION_SETTINGS = (
    "mapped_file_size_commitlog=65536",
    "mapped_file_size_consume_queue=400",
    "max_message_size_bytes=16384",
    "file_reserved_time_h=0",
    f"delete_when={ALL_HOURS}",
    "clean_resource_interval_ms=200",
    "delete_commitlog_files_interval_ms=0",
    *DISK_RATIOS_OFF_SETTINGS,
)
"""64 KiB segments and 20-entry consume-queue files, every segment but the newest expired
at once and the cleaner running every 200 ms: retention happens while the test watches."""
RETENTION_WAIT_S = 30.0


class RetentionCluster(Cluster):
    """A cluster whose store deletes old segments within a second of writing them."""

    def _start_store(self, port: int = 0):  # type: ignore[no-untyped-def]
        settings = [
            s
            for s in CLUSTER_STORE_SETTINGS
            if not s.startswith(
                ("mapped_file_size_commitlog", "mapped_file_size_consume_queue", "disk_")
            )
        ]
        return self._start(
            "store", f"root_dir={self.root_dir}", *settings, *RETENTION_SETTINGS, port=port
        )


@pytest.fixture(scope="module")
def retention_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    started = RetentionCluster(tmp_path_factory.mktemp("retention"))
    yield started
    started.stop()


def queue_ranges(cluster: Cluster, producer: Producer, topic: str) -> dict[int, tuple[int, int]]:
    stub = producer.client.broker(cluster.broker.address)
    status = stub.TopicStatus(broker_pb2.TopicStatusRequest(topic=topic), timeout=5)
    return {q.queue_id: (q.min_offset, q.max_offset) for q in status.queues}


def test_retention_is_detected_or_skipped_as_asked(
    spark, retention_cluster, tmp_path: Path
) -> None:
    cluster = retention_cluster
    with Producer(cluster.registry.address, "loss-tests") as producer:
        for low in range(0, 400, 20):
            producer.send_batch(
                [
                    Message(topic="SparkLoss", body=bytes(1000) + str(i).encode())
                    for i in range(low, low + 20)
                ]
            )
        # Wait until retention has run and settled (only the newest segment, which is
        # never deleted, is left): the ranges then stay put while the test reads.
        deadline = time.monotonic() + RETENTION_WAIT_S
        ranges = queue_ranges(cluster, producer, "SparkLoss")
        while time.monotonic() < deadline:
            time.sleep(1.0)
            now = queue_ranges(cluster, producer, "SparkLoss")
            if now == ranges and any(low > 0 for low, _ in now.values()):
                break
            ranges = now
    lost_queue, (first, end) = next((q, r) for q, r in sorted(ranges.items()) if 0 < r[0] < r[1])
    broker = "broker-a"
    from_zero = json.dumps({"SparkLoss": {f"{broker}/{lost_queue}": 0}})

    def read(**options: str):  # type: ignore[no-untyped-def]
        builder = (
            spark.read.format("boltmq")
            .option("registry", cluster.registry.address)
            .option("topics", "SparkLoss")
        )
        for key, value in options.items():
            builder = builder.option(key, value)
        return builder.load().where(f"queue_id = {lost_queue}")

    with pytest.raises(Exception, match=r"offsets 0\.\.\d+ are gone"):
        read(startingOffsets=from_zero).collect()
    skipped = read(startingOffsets=from_zero, failOnDataLoss="false").collect()
    offsets = sorted(r.queue_offset for r in skipped)
    assert offsets and offsets[0] >= first and offsets[-1] == end - 1
    assert len(offsets) == len(set(offsets))
    earliest = read().collect()  # earliest is where the queue begins now: no loss
    assert min(r.queue_offset for r in earliest) >= first

    query = (
        spark.readStream.format("boltmq")
        .option("registry", cluster.registry.address)
        .option("topics", "SparkLoss")
        .option("startingOffsets", from_zero)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="are gone"):
        query.awaitTermination()
