"""BrokerMetrics: a send request's sections counted together count what each alone counts.

Read through a real SDK MeterProvider with an in-memory reader, as a Prometheus scrape
reads them: the per-topic sums, the consumer lag against the queue ends the sends
reported, and the rolling totals ``boltmq admin stats`` reads.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from services.broker.arrivals.long_poll import LongPollHub
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metrics import BrokerMetrics, SentSection
from services.broker.stats.traffic_stats import TrafficStats
from tests.unit.broker.conftest import ManualClock

SECTIONS: list[SentSection] = [  # (topic, queue_id, stored, encoded_bytes, queue_end)
    ("orders", 0, 3, 3_300, 3),
    ("refunds", 1, 1, 1_100, 7),
    ("orders", 2, 2, 2_200, 12),
    ("orders", 0, 1, 1_100, 4),
]


def points(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[Any, ...]], Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        (metric.name, tuple(sorted((point.attributes or {}).items()))): point.value
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }


def metrics_of(clock: ManualClock) -> tuple[BrokerMetrics, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    offsets = ConsumerOffsetManager()
    offsets.commit("billing", "orders", 0, 1)
    offsets.commit("billing", "refunds", 1, 5)
    provider = MeterProvider(metric_readers=[reader])
    metrics = BrokerMetrics(LongPollHub(max_parked=10), offsets, provider, TrafficStats(clock))
    return metrics, reader


def test_sections_counted_together_count_what_each_counts_alone(clock: ManualClock) -> None:
    together, together_reader = metrics_of(clock)
    alone, alone_reader = metrics_of(clock)

    together.sent_each(SECTIONS)
    for section in SECTIONS:
        alone.sent(*section)

    got = points(together_reader)
    assert got == points(alone_reader)
    assert got[("boltmq.broker.in.messages", (("topic", "orders"),))] == 6
    assert got[("boltmq.broker.in.bytes", (("topic", "orders"),))] == 6_600
    assert got[("boltmq.broker.in.requests", (("topic", "orders"),))] == 3  # a section each
    lag = (("consumer_group", "billing"), ("queue_id", 0), ("topic", "orders"))
    assert got[("boltmq.broker.consumer.lag", lag)] == 3  # the newest end of queue 0: 4
    for topic in ("orders", "refunds"):
        assert together.traffic.topic(topic) == alone.traffic.topic(topic)
