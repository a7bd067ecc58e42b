"""SummedCounter: plain sums on the hot path, reported as an observable counter.

Read through a real SDK MeterProvider with an in-memory reader, side by side
with the synchronous SDK counter it replaces: the reader must see the same
points (a monotonic cumulative sum per attribute value).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.metrics import Meter, NoOpMeter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

from boltmq.kernel.summed_counter import SummedCounter


def _metrics(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: metric
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def _points(metric: Any) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {
        tuple(sorted((point.attributes or {}).items())): point.value
        for point in metric.data.data_points
    }


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def meter(reader: InMemoryMetricReader) -> Iterator[Meter]:
    provider = MeterProvider(metric_readers=[reader])
    yield provider.get_meter("test")
    provider.shutdown()


def test_reports_what_a_synchronous_counter_reports(
    meter: Meter, reader: InMemoryMetricReader
) -> None:
    summed = SummedCounter(meter, "summed", "{message}", "summed sends", "topic")
    plain = meter.create_counter("plain", unit="{message}", description="plain sends")
    for topic, amount in [("A", 3), ("B", 1), ("A", 4), ("C", 0)]:
        summed.add(amount, topic)
        plain.add(amount, {"topic": topic})
    metrics = _metrics(reader)
    assert (
        _points(metrics["summed"])
        == _points(metrics["plain"])
        == {
            (("topic", "A"),): 7,
            (("topic", "B"),): 1,
            (("topic", "C"),): 0,
        }
    )
    for name in ("summed", "plain"):
        data = metrics[name].data
        assert data.is_monotonic
        assert data.aggregation_temporality == AggregationTemporality.CUMULATIVE
    assert metrics["summed"].unit == "{message}"
    assert metrics["summed"].description == "summed sends"


def test_totals_keep_growing_across_collections(meter: Meter, reader: InMemoryMetricReader) -> None:
    counter = SummedCounter(meter, "calls", "{call}", "calls")
    counter.add(2)
    assert _points(_metrics(reader)["calls"]) == {(): 2}
    counter.add(5)
    assert _points(_metrics(reader)["calls"]) == {(): 7}
    assert counter.total() == 7


def test_nothing_is_reported_before_the_first_add(
    meter: Meter, reader: InMemoryMetricReader
) -> None:
    SummedCounter(meter, "idle", "{call}", "never counted", "topic")
    data = reader.get_metrics_data()
    names = (
        []
        if data is None
        else [m.name for r in data.resource_metrics for s in r.scope_metrics for m in s.metrics]
    )
    assert "idle" not in names


def test_a_negative_add_is_dropped_with_a_warning(
    meter: Meter, reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    """As the SDK's counter: the total never goes down, and the caller (a send being
    answered) is not failed by its metric."""
    counter = SummedCounter(meter, "down", "{call}", "drops negatives", "topic")
    counter.add(3, "A")
    with caplog.at_level("WARNING", logger="boltmq.kernel.summed_counter"):
        counter.add(-1, "A")
    assert counter.total("A") == 3
    assert _points(_metrics(reader)["down"]) == {(("topic", "A"),): 3}
    assert "counter down: add(-1) dropped" in caplog.text


def test_adds_from_many_threads_are_all_counted(meter: Meter, reader: InMemoryMetricReader) -> None:
    counter = SummedCounter(meter, "threads", "{call}", "many threads", "topic")
    threads, adds = 8, 5_000
    start = threading.Barrier(threads)

    def run(n: int) -> None:
        start.wait()
        for i in range(adds):
            counter.add(1, "even" if (n + i) % 2 == 0 else "odd")

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert _points(_metrics(reader)["threads"]) == {
        (("topic", "even"),): threads * adds // 2,
        (("topic", "odd"),): threads * adds // 2,
    }


def test_without_a_provider_it_still_counts() -> None:
    counter = SummedCounter(NoOpMeter("none"), "quiet", "{call}", "no reader", "topic")
    counter.add(4, "A")
    assert counter.total("A") == 4
    assert counter.total("B") == 0


def test_add_each_counts_what_an_add_of_each_counts(
    meter: Meter, reader: InMemoryMetricReader, caplog: pytest.LogCaptureFixture
) -> None:
    """One hold of the lock for a send request's sections, the same totals; a negative
    amount among them is dropped alone."""
    each = SummedCounter(meter, "each", "{message}", "added together", "topic")
    one = SummedCounter(meter, "one", "{message}", "added one by one", "topic")
    amounts = [("A", 3), ("B", 1), ("A", 4), ("C", 0)]
    with caplog.at_level("WARNING", logger="boltmq.kernel.summed_counter"):
        each.add_each([*amounts, ("B", -2)])
    for topic, amount in amounts:
        one.add(amount, topic)
    metrics = _metrics(reader)
    assert _points(metrics["each"]) == _points(metrics["one"])
    assert (each.total("A"), each.total("B"), each.total("C")) == (7, 1, 0)
    assert "counter each: add(-2) dropped" in caplog.text
