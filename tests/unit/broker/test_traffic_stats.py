"""TrafficStats: produced per topic, consumed per group and topic, idle counters dropped."""

from __future__ import annotations

from services.broker.stats.rolling_counter import MINUTE_MS
from services.broker.stats.traffic_stats import Counts, TrafficStats
from tests.unit.broker.conftest import ManualClock


def test_a_topic_sums_its_groups_and_a_group_its_topics(clock: ManualClock) -> None:
    stats = TrafficStats(clock)
    stats.produced("orders", 10)
    stats.produced("orders", 5)
    stats.consumed("billing", "orders", 15)
    stats.consumed("audit", "orders", 4)
    stats.consumed("billing", "refunds", 2)
    orders = stats.topic("orders")
    assert orders.produced == Counts(15, 15)
    assert orders.consumed == Counts(19, 19)
    assert orders.parts == (("audit", Counts(4, 4)), ("billing", Counts(15, 15)))
    billing = stats.group("billing")
    assert billing.produced == Counts()
    assert billing.consumed == Counts(17, 17)
    assert billing.parts == (("orders", Counts(15, 15)), ("refunds", Counts(2, 2)))


def test_counts_age_out_of_the_minute_then_the_hour(clock: ManualClock) -> None:
    stats = TrafficStats(clock)
    stats.produced("orders", 3)
    clock.advance(2 * MINUTE_MS)
    assert stats.topic("orders").produced == Counts(0, 3)
    clock.advance(60 * MINUTE_MS)
    assert stats.topic("orders").produced == Counts(0, 0)


def test_what_is_known_and_idle_counters_dropped(clock: ManualClock) -> None:
    stats = TrafficStats(clock)
    assert not stats.knows_topic("orders") and not stats.knows_group("billing")
    stats.produced("orders", 0)  # nothing stored: nothing kept
    assert not stats.knows_topic("orders")
    stats.produced("orders", 1)
    stats.consumed("billing", "refunds", 1)
    assert stats.knows_topic("orders") and stats.knows_topic("refunds")
    assert stats.knows_group("billing")
    clock.advance(62 * MINUTE_MS)
    stats.produced("other", 1)  # a count after a minute runs the idle check
    assert not stats.knows_topic("orders") and not stats.knows_group("billing")
    assert stats.knows_topic("other")


def test_everything_sums_the_counted_topics_with_a_part_per_topic(clock: ManualClock) -> None:
    stats = TrafficStats(clock)
    stats.produced("orders", 10)
    stats.produced("refunds", 3)
    stats.produced("%RETRY%billing", 7)
    stats.consumed("billing", "orders", 6)
    stats.consumed("audit", "orders", 2)
    stats.consumed("billing", "%RETRY%billing", 7)
    stats.consumed("billing", "refunds", 1)
    every = stats.everything(lambda topic: not topic.startswith("%"))
    assert every.produced == Counts(13, 13)
    assert every.consumed == Counts(9, 9)
    assert every.parts == (("orders", Counts(8, 8)), ("refunds", Counts(1, 1)))
    assert stats.everything(lambda topic: False).produced == Counts()
    clock.advance(2 * MINUTE_MS)
    assert stats.everything(lambda topic: True).produced == Counts(0, 20)


def test_produced_each_counts_what_produced_of_each_counts(clock: ManualClock) -> None:
    together, one_by_one = TrafficStats(clock), TrafficStats(clock)
    counts = [("orders", 3), ("refunds", 1), ("orders", 4), ("idle", 0)]
    together.produced_each(counts)
    for topic, count in counts:
        one_by_one.produced(topic, count)
    for topic in ("orders", "refunds"):
        assert together.topic(topic) == one_by_one.topic(topic)
    assert together.topic("orders").produced == Counts(7, 7)
    assert not together.knows_topic("idle")  # nothing stored: nothing kept
