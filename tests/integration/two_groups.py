"""A LocalCluster of two broker groups, shared by the tests of one module, and the
helpers those tests use: topics on both groups, timed batches of sends."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from boltmq import Message, Producer, PushConsumer, PushConsumerOptions, SendStatus
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, CLUSTER_STORE_SETTINGS
from tests.integration.sdk_fixtures import FAST, Collector
from tests.integration.test_cli import run_cli

GROUPS = ("broker-a", "broker-b")
QUEUES = 2
"""Queues of a test topic on each group."""


def start_two_groups(
    data_dir: Path,
    registry_settings: tuple[str, ...] = (),
    groups: int = 2,
    broker_settings: tuple[str, ...] = (),
) -> LocalCluster:
    """A started LocalCluster of broker-a and broker-b (``groups`` of them) with the tests'
    settings (and ``broker_settings`` besides)."""
    spec = ClusterSpec(
        data_dir,
        groups=groups,
        store_settings=CLUSTER_STORE_SETTINGS,
        broker_settings=(*CLUSTER_BROKER_SETTINGS, *broker_settings),
        registry_settings=registry_settings,
    )
    return LocalCluster(spec).start()


@pytest.fixture(scope="module")
def two_groups(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    started = start_two_groups(tmp_path_factory.mktemp("two-groups"))
    try:
        yield started
    finally:
        started.stop()


def registry_of(cluster: LocalCluster) -> str:
    assert cluster.registry is not None
    return cluster.registry.address


def create_topic(cluster: LocalCluster, topic: str, queues: int = QUEUES) -> None:
    """``topic`` with ``queues`` queues on every group's master."""
    made = run_cli(
        "admin", "topic", "create", topic, "--queues", str(queues), "--registry",
        registry_of(cluster),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr


def send_batch(producer: Producer, topic: str, prefix: str, count: int) -> list[bytes]:
    """``count`` messages spread over every queue of both groups; their bodies."""
    bodies = [f"{prefix}-{n:03d}".encode() for n in range(count)]
    for body in bodies:
        assert producer.send(Message(topic=topic, body=body)).status is SendStatus.SEND_OK
    return bodies


def now_ms_between_batches() -> int:
    """A time strictly after every message stored so far and before every later one
    (the store stamps in ms: a few ms either side)."""
    time.sleep(0.02)
    now = time.time_ns() // 1_000_000
    time.sleep(0.02)
    return now


def start_consumer(
    cluster: LocalCluster, group: str, topic: str, collector: Collector, **options: Any
) -> PushConsumer:
    """A started PushConsumer of ``topic`` with the tests' short intervals."""
    consumer = PushConsumer(
        registry_of(cluster),
        group,
        {topic: "*"},
        collector,
        options=PushConsumerOptions(**{**FAST, **options}),
    )
    return consumer.start()


def cli(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """``boltmq admin ARGS --registry R`` against the cluster."""
    return run_cli("admin", *args, "--registry", registry_of(cluster))


def total_lag(cluster: LocalCluster, group: str) -> int:
    """The group's lag over both groups' masters (``admin group progress``)."""
    shown = cli(cluster, "group", "progress", group)
    if shown.returncode != 0:
        return -1  # not known yet
    return int(shown.stdout.strip().splitlines()[-1].split()[-1])
