"""Where a new group starts (``PushConsumerOptions.consume_from``), over two broker groups.

A backlog is sent first. A new group with FIRST_OFFSET (the default, FIRST)
receives it; one with LAST_OFFSET does not, only what is sent after it started;
one with TIMESTAMP receives exactly what was stored from its time on. A group
with committed offsets resumes from them whatever ``consume_from`` says. A
TIMESTAMP without a time (or a time without TIMESTAMP) is refused before anything
connects.
"""

from __future__ import annotations

import time

import pytest

from boltmq import Producer, PushConsumer, PushConsumerOptions
from boltmq.cli.dev.local_cluster import LocalCluster
from tests.integration.sdk_fixtures import Collector
from tests.integration.two_groups import (
    create_topic,
    now_ms_between_batches,
    registry_of,
    send_batch,
    start_consumer,
    total_lag,
)
from tests.integration.two_groups import two_groups as two_groups
from tests.waiting import wait_until

TOPIC = "StartFrom"
SETTLE_S = 1.0
"""How long a consumer that owns every queue is watched for messages it must not get."""


@pytest.fixture(scope="module")
def backlog(two_groups: LocalCluster) -> tuple[list[bytes], int, list[bytes]]:
    """Two batches on TOPIC with a time between them: (old, time, recent)."""
    create_topic(two_groups, TOPIC)
    with Producer(registry_of(two_groups), "from-pg") as producer:
        old = send_batch(producer, TOPIC, "old", 16)
        t_ms = now_ms_between_batches()
        recent = send_batch(producer, TOPIC, "recent", 16)
    return old, t_ms, recent


def consume_new(
    two_groups: LocalCluster, group: str, options: dict[str, object]
) -> tuple[PushConsumer, Collector]:
    collector = Collector()
    consumer = start_consumer(two_groups, group, TOPIC, collector, **options)
    wait_until(lambda: len(consumer.assigned) == 4, "the consumer to own every queue")
    return consumer, collector


@pytest.mark.parametrize("first", ["FIRST_OFFSET", "FIRST", None])
def test_a_new_group_from_the_first_offset_gets_the_backlog(
    two_groups: LocalCluster, backlog: tuple[list[bytes], int, list[bytes]], first: str | None
) -> None:
    old, _, recent = backlog
    options = {} if first is None else {"consume_from": first}  # None: the default
    consumer, collector = consume_new(two_groups, f"from-first-{first}".lower(), options)
    try:
        collector.wait_for(set(old) | set(recent), "the backlog")
    finally:
        consumer.shutdown()


def test_a_new_group_from_the_last_offset_gets_only_what_comes_after_it(
    two_groups: LocalCluster, backlog: tuple[list[bytes], int, list[bytes]]
) -> None:
    old, _, recent = backlog
    consumer, collector = consume_new(two_groups, "from-last", {"consume_from": "LAST_OFFSET"})
    try:
        with Producer(registry_of(two_groups), "from-pg") as producer:
            fresh = send_batch(producer, TOPIC, "fresh-last", 8)
        collector.wait_for(set(fresh), "the messages sent after the start")
        time.sleep(SETTLE_S)
        assert not set(collector.bodies()) & (set(old) | set(recent))
    finally:
        consumer.shutdown()


def test_a_new_group_from_a_timestamp_gets_what_was_stored_from_then_on(
    two_groups: LocalCluster, backlog: tuple[list[bytes], int, list[bytes]]
) -> None:
    old, t_ms, recent = backlog
    options = {"consume_from": "TIMESTAMP", "consume_timestamp_ms": t_ms}
    consumer, collector = consume_new(two_groups, "from-time", options)
    try:
        collector.wait_for(set(recent), "the messages stored from the time on")
        time.sleep(SETTLE_S)
        got = collector.bodies()
        assert not set(got) & set(old)
        assert sorted(b for b in got if b in set(recent)) == sorted(recent)
    finally:
        consumer.shutdown()


def test_a_committed_offset_wins_over_consume_from(
    two_groups: LocalCluster, backlog: tuple[list[bytes], int, list[bytes]]
) -> None:
    old, _, recent = backlog
    consumer, collector = consume_new(two_groups, "from-resume", {})
    collector.wait_for(set(old) | set(recent), "the backlog")
    wait_until(lambda: total_lag(two_groups, "from-resume") == 0, "every offset committed")
    consumer.shutdown()
    with Producer(registry_of(two_groups), "from-pg") as producer:
        away = send_batch(producer, TOPIC, "away", 8)
    consumer, collector = consume_new(two_groups, "from-resume", {"consume_from": "LAST_OFFSET"})
    try:
        collector.wait_for(set(away), "what was sent while the group was away")
        assert not set(collector.bodies()) & (set(old) | set(recent))
    finally:
        consumer.shutdown()


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"consume_from": "TIMESTAMP"}, "consume_timestamp_ms \\(epoch ms\\) is set with"),
        ({"consume_timestamp_ms": 1_000}, "and only then"),
        ({"consume_from": "NEWEST"}, "consume_from must be one of"),
    ],
)
def test_bad_start_options_are_refused_before_anything_connects(
    options: dict[str, object], why: str
) -> None:
    with pytest.raises(ValueError, match=why):
        PushConsumerOptions(**options)  # type: ignore[arg-type]
