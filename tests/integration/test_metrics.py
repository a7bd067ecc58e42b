"""Prometheus scrape endpoints of real store and broker processes (``metrics_port``).

Messages are sent and pulled through a real cluster, then each service's
``/metrics`` is read over HTTP and parsed with prometheus_client's parser: the
counters must equal what was sent and pulled, the lag what was left behind.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from boltmq import Message, Producer, PullConsumer, PullResult
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, CLUSTER_STORE_SETTINGS
from tests.integration.procs import LaunchError, ServiceProcess

DEADLINE_S = 30.0
"""Bound for a gauge to show a state the test has just caused."""
SENT = 40
PULLED = 15
QUEUES = 4
"""Queues of an auto-created topic (the producer's default_topic_queue_nums)."""


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    """Every sample of ``/metrics`` by (name, labels without the scope labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.headers.get_content_type() == "text/plain"
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = frozenset(
                (k, v) for k, v in sample.labels.items() if not k.startswith("otel_scope")
            )
            samples[(sample.name, labels)] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"{name}{labels} not scraped; have {sorted(n for n, _ in samples)}"
    return samples[key]


def wait_for(port: int, condition: Callable[[Samples], bool], what: str) -> Samples:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        samples = scrape(port)
        if condition(samples):
            return samples
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_store_and_broker_serve_their_metrics_to_prometheus(
    tmp_path: Path, spawn: Callable[..., ServiceProcess]
) -> None:
    store_port, broker_port = free_port(), free_port()
    registry = spawn("registry")
    # SYNC_FLUSH: every append is flushed at once, so the flush histogram has values.
    store = spawn(
        "store",
        f"root_dir={tmp_path / 'store'}",
        f"metrics_port={store_port}",
        "flush_disk_type=SYNC_FLUSH",
        *CLUSTER_STORE_SETTINGS,
    )
    spawn(
        "broker",
        f"store_address={store.address}",
        f"registry_addresses={registry.address}",
        f"metrics_port={broker_port}",
        *CLUSTER_BROKER_SETTINGS,
    )

    with Producer(registry.address) as producer:
        results = producer.send_batch([Message("Metered", b"m" * 100) for _ in range(SENT)])
    queue = results[0].queue
    with PullConsumer(registry.address, "metered-group") as consumer:
        # Long-polled, as a consumer pulls: the messages are there, so it answers at once.
        pulled = consumer.pull(queue, 0, PULLED, wait_ms=10_000)
        assert len(pulled.messages) == PULLED
        consumer.commit(queue, PULLED)

    broker = scrape(broker_port)
    assert value(broker, "boltmq_broker_in_messages_total", topic="Metered") == SENT
    assert value(broker, "boltmq_broker_in_bytes_total", topic="Metered") > SENT * 100
    assert value(broker, "boltmq_broker_in_requests_total", topic="Metered") == 1  # one batch
    assert value(broker, "boltmq_broker_out_messages_total", topic="Metered") == PULLED
    assert value(broker, "boltmq_broker_out_bytes_total", topic="Metered") > PULLED * 100
    assert (
        value(
            broker,
            "boltmq_broker_consumer_lag",
            consumer_group="metered-group",
            topic="Metered",
            queue_id=str(queue.queue_id),
        )
        == SENT - PULLED
    )
    assert [dict(labels)["service_name"] for name, labels in broker if name == "target_info"] == [
        "boltmq-broker"
    ]

    stored = scrape(store_port)
    assert value(stored, "boltmq_store_put_messages_total") == SENT
    assert value(stored, "boltmq_store_put_duration_seconds_count") == 1  # one batch, one call
    assert value(stored, "boltmq_store_flush_duration_seconds_count") >= 1
    assert value(stored, "boltmq_store_commitlog_max_offset_bytes") > results[-1].commitlog_offset
    assert value(stored, "boltmq_store_dispatch_lag_bytes") == 0  # SYNC_FLUSH puts dispatch
    assert 0 < value(stored, "boltmq_store_disk_usage_ratio") <= 1


def test_parked_long_polls_are_counted_while_they_wait(
    tmp_path: Path, spawn: Callable[..., ServiceProcess]
) -> None:
    broker_port = free_port()
    registry = spawn("registry")
    store = spawn("store", f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS)
    spawn(
        "broker",
        f"store_address={store.address}",
        f"registry_addresses={registry.address}",
        f"metrics_port={broker_port}",
        *CLUSTER_BROKER_SETTINGS,
    )
    with Producer(registry.address) as producer:
        queue = producer.send(Message("Parked", b"first")).queue
    before = value(scrape(broker_port), "boltmq_broker_long_polls_parked")

    with PullConsumer(registry.address, "parked-group") as consumer:
        answers: list[PullResult] = []
        waiter = threading.Thread(
            target=lambda: answers.append(consumer.pull(queue, 1, wait_ms=int(DEADLINE_S * 1000)))
        )
        waiter.start()
        wait_for(
            broker_port,
            lambda s: value(s, "boltmq_broker_long_polls_parked") == before + 1,
            "the pull to park",
        )
        with Producer(registry.address) as producer:  # round robin: one send per queue
            for index in range(QUEUES):
                producer.send(Message("Parked", b"next %d" % index))
        wait_for(
            broker_port,
            lambda s: value(s, "boltmq_broker_long_polls_parked") == before,
            "the parked pull to be answered",
        )
        waiter.join(DEADLINE_S)
    assert answers[0].messages[0].queue_offset == 1  # woken by the arrival it waited for


def test_a_busy_metrics_port_stops_the_service_with_one_clear_line(
    tmp_path: Path, spawn: Callable[..., ServiceProcess]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(LaunchError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            spawn("registry", f"metrics_port={port}")


def test_a_metrics_port_out_of_range_is_refused(spawn: Callable[..., ServiceProcess]) -> None:
    with pytest.raises(LaunchError, match="metrics_port must be between 0 and 65535"):
        spawn("registry", "metrics_port=70000")
