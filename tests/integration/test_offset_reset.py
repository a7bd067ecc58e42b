"""``boltmq admin group reset-offset``: a group's offsets reset on every broker group,
followed by live PushConsumers without a restart.

Over two broker groups: a consumer that consumed everything is reset to a time T
between two batches and receives exactly the second batch again, once each; a
group reset ``--to-latest`` skips its backlog, and ``--to-earliest`` makes a live
consumer read everything again. Bad times, option mixes, topics and groups are
refused with a clear line and nothing changes.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import grpc
import pytest

from boltmq import Producer, PullConsumer
from boltmq.cli.dev.local_cluster import LocalCluster
from boltmq.kernel.channels import sync_channel
from boltmq.pull_consumer import PullStatus
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from tests.integration.sdk_fixtures import Collector
from tests.integration.two_groups import (
    GROUPS,
    QUEUES,
    cli,
    create_topic,
    now_ms_between_batches,
    registry_of,
    send_batch,
    start_consumer,
    total_lag,
)
from tests.integration.two_groups import two_groups as two_groups
from tests.waiting import wait_until


def iso(ms: int) -> str:
    """``ms`` as ISO-8601 in UTC, to the millisecond."""
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).isoformat()


def reset(cluster: LocalCluster, group: str, topic: str, *how: str) -> list[str]:
    done = cli(cluster, "group", "reset-offset", group, topic, *how)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == f"group {group}: {QUEUES * len(GROUPS)} queue(s) of {topic} reset"
    return lines


def test_a_live_consumer_reset_to_a_time_gets_exactly_the_messages_from_then_on(
    two_groups: LocalCluster,
) -> None:
    topic, group = "ResetLive", "reset-live"
    create_topic(two_groups, topic)
    with Producer(registry_of(two_groups), "reset-pg") as producer:
        before = send_batch(producer, topic, "before", 20)
        t_ms = now_ms_between_batches()
        after = send_batch(producer, topic, "after", 20)
    collector = Collector()
    consumer = start_consumer(two_groups, group, topic, collector)
    try:
        collector.wait_for(set(before) | set(after), "the first reading")
        wait_until(lambda: total_lag(two_groups, group) == 0, "every offset committed")
        first_count = len(collector.bodies())
        lines = reset(two_groups, group, topic, "--to-time", iso(t_ms))
        assert {line.split()[0] for line in lines[:-1]} == set(GROUPS)
        wait_until(
            lambda: set(after) <= set(collector.bodies()[first_count:]),
            "the reset consumer to read the second batch again",
        )
        wait_until(lambda: total_lag(two_groups, group) == 0, "the re-read to be committed")
        again = Counter(collector.bodies()[first_count:])
        assert again == Counter(after)  # exactly those from T on, each once
    finally:
        consumer.shutdown()


def test_to_latest_skips_a_backlog_and_to_earliest_reads_everything_again(
    two_groups: LocalCluster,
) -> None:
    topic, group = "ResetSkip", "reset-skip"
    create_topic(two_groups, topic)
    with Producer(registry_of(two_groups), "reset-pg") as producer:
        seed = send_batch(producer, topic, "seed", 8)
        collector = Collector()
        consumer = start_consumer(two_groups, group, topic, collector)
        collector.wait_for(set(seed), "the seed")
        wait_until(lambda: total_lag(two_groups, group) == 0, "the seed committed")
        consumer.shutdown()
        backlog = send_batch(producer, topic, "backlog", 24)
        assert total_lag(two_groups, group) == len(backlog)
        reset(two_groups, group, topic, "--to-latest")
        assert total_lag(two_groups, group) == 0
        collector = Collector()
        consumer = start_consumer(two_groups, group, topic, collector)
        try:
            fresh = send_batch(producer, topic, "fresh", 6)
            collector.wait_for(set(fresh), "the messages sent after the reset")
            assert not set(collector.bodies()) & set(backlog)
            reset(two_groups, group, topic, "--to-earliest")  # the consumer is live
            everything = set(seed) | set(backlog) | set(fresh)
            collector.wait_for(everything, "every message again")
        finally:
            consumer.shutdown()


def test_a_pull_consumer_sees_the_reset_once_then_pulls_as_usual(
    two_groups: LocalCluster,
) -> None:
    topic, group = "ResetPull", "reset-pull"
    create_topic(two_groups, topic)
    with Producer(registry_of(two_groups), "reset-pg") as producer:
        send_batch(producer, topic, "m", 16)
    reset(two_groups, group, topic, "--to-earliest")
    with PullConsumer(registry_of(two_groups), group) as consumer:
        for queue in consumer.queues(topic):  # both groups' queues, each on its master
            moved = consumer.pull(queue, 3)  # PullMessage, from elsewhere than the reset
            assert (moved.status, moved.next_begin_offset, moved.messages) == (
                PullStatus.OFFSET_RESET,
                0,
                [],
            )
            assert consumer.pull(queue, 0).status is PullStatus.FOUND  # followed: reset done
            assert consumer.pull(queue, 3).status is not PullStatus.OFFSET_RESET
            assert consumer.committed(queue) == 0


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ((), "give exactly one of --to-time T, --to-earliest, --to-latest"),
        (("--to-earliest", "--to-latest"), "give exactly one of"),
        (("--to-time", "1", "--to-latest"), "give exactly one of"),
        (("--to-time", "yesterday"), "--to-time: 'yesterday' is neither epoch milliseconds"),
        (("--to-time", "-5"), "is neither epoch milliseconds nor an ISO-8601 time"),
        (("--to-time", "2026-01-01T00:00:00"), "has no time zone"),
        (("--to-time", "1969-12-31T23:59:59Z"), "is before 1970-01-01T00:00:00Z"),
    ],
)
def test_bad_reset_options_are_refused(
    two_groups: LocalCluster, args: tuple[str, ...], why: str
) -> None:
    create_topic(two_groups, "ResetBad")
    done = cli(two_groups, "group", "reset-offset", "reset-bad", "ResetBad", *args)
    assert done.returncode != 0
    assert why in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_topics_bad_names_and_empty_requests_are_refused(
    two_groups: LocalCluster,
) -> None:
    create_topic(two_groups, "ResetBad")
    missing = cli(two_groups, "group", "reset-offset", "g", "NoSuchTopic", "--to-latest")
    assert missing.returncode != 0
    assert "NOT_FOUND: topic: topic 'NoSuchTopic' does not exist" in missing.stderr
    bad_group = cli(two_groups, "group", "reset-offset", "bad group", "ResetBad", "--to-latest")
    assert bad_group.returncode != 0
    assert "INVALID_ARGUMENT: group:" in bad_group.stderr
    assert total_lag(two_groups, "reset-bad") == -1  # nothing was committed for it
    master = two_groups.groups[GROUPS[0]][0].broker
    assert master is not None
    channel = sync_channel(master.address)  # a client that skips the CLI's checks
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        for request, field in (
            (broker_pb2.ResetOffsetRequest(group="g", topic="ResetBad"), "to: set timestamp_ms"),
            (
                broker_pb2.ResetOffsetRequest(group="g", topic="ResetBad", timestamp_ms=-1),
                "timestamp_ms: must not be negative",
            ),
            (broker_pb2.ResetOffsetRequest(group="g", topic="ResetBad", latest=False), "to: set"),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ResetOffset(request, timeout=5)
            assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert field in (refused.value.details() or "")
    finally:
        channel.close()
