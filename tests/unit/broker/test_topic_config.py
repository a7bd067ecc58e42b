"""TopicConfigManager: system topics, auto-creation from TBW102, versions, topics.json."""

from __future__ import annotations

import json

import pytest

from services.broker.errors import CorruptMetadata
from services.broker.metadata.topic_config import (
    AUTO_CREATE_TEMPLATE_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
    PERM_ALL,
    PERM_INHERIT,
    PERM_READ,
    PERM_READ_WRITE,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TopicConfig,
    TopicConfigManager,
)
from tests.unit.broker.conftest import ManualClock


def manager(clock: ManualClock, auto_create: bool = True) -> TopicConfigManager:
    return TopicConfigManager("ClusterX", "broker-x", auto_create, clock)


def test_system_topics_are_created_with_rocketmq_settings(clock: ManualClock) -> None:
    topics = manager(clock)
    template = topics.get(AUTO_CREATE_TEMPLATE_TOPIC)
    assert template == TopicConfig(AUTO_CREATE_TEMPLATE_TOPIC, 8, 8, PERM_ALL)
    assert topics.get(SCHEDULE_TOPIC) == TopicConfig(SCHEDULE_TOPIC, 18, 18, PERM_READ_WRITE)
    assert topics.get(SELF_TEST_TOPIC) == TopicConfig(SELF_TEST_TOPIC, 1, 1, PERM_READ_WRITE)
    assert topics.get(OFFSET_MOVED_EVENT_TOPIC) is not None
    assert topics.get("ClusterX") is not None and topics.get("broker-x") is not None
    assert all(topics.is_system(t.name) for t in topics.all())
    assert not topics.is_system("orders")


def test_without_auto_create_there_is_no_template_and_no_auto_creation(clock: ManualClock) -> None:
    topics = manager(clock, auto_create=False)
    assert topics.get(AUTO_CREATE_TEMPLATE_TOPIC) is None
    assert topics.create_from_template("orders", 4) is None
    assert topics.get("orders") is None


@pytest.mark.parametrize(("requested", "expected"), [(4, 4), (8, 8), (64, 8), (1, 1)])
def test_auto_created_topic_gets_min_of_requested_and_template_queues(
    clock: ManualClock, requested: int, expected: int
) -> None:
    topics = manager(clock)
    created = topics.create_from_template("orders", requested)
    assert created is not None
    assert (created.read_queue_nums, created.write_queue_nums) == (expected, expected)
    assert created.perm == PERM_ALL & ~PERM_INHERIT
    assert topics.get("orders") == created


def test_auto_creation_needs_an_inheritable_template(clock: ManualClock) -> None:
    topics = manager(clock)
    topics.upsert(TopicConfig(AUTO_CREATE_TEMPLATE_TOPIC, 8, 8, PERM_READ_WRITE))
    assert topics.create_from_template("orders", 4) is None


def test_every_change_bumps_the_data_version_and_a_no_op_does_not(clock: ManualClock) -> None:
    topics = manager(clock)
    start = topics.data_version
    clock.advance(5)
    topics.upsert(TopicConfig("orders", 4, 4))
    assert topics.data_version.counter == start.counter + 1
    assert topics.data_version.timestamp_ms == clock.now_ms
    topics.upsert(TopicConfig("orders", 4, 4))
    assert topics.data_version.counter == start.counter + 1
    topics.upsert(TopicConfig("orders", 4, 4, PERM_READ))
    assert topics.data_version.counter == start.counter + 2
    assert topics.delete("orders")
    assert topics.data_version.counter == start.counter + 3
    assert not topics.delete("orders")
    assert topics.data_version.counter == start.counter + 3


def test_topics_json_round_trips_with_its_data_version(clock: ManualClock) -> None:
    first = manager(clock)
    first.upsert(TopicConfig("orders", 3, 5, PERM_READ, order=True))
    first.delete(SELF_TEST_TOPIC)
    document = json.loads(first.to_json())
    assert document["dataVersion"] == {
        "timestamp": clock.now_ms,
        "counter": first.data_version.counter,
    }
    assert document["topicConfigTable"]["orders"] == {
        "topicName": "orders",
        "readQueueNums": 3,
        "writeQueueNums": 5,
        "perm": PERM_READ,
        "order": True,
    }
    second = manager(ManualClock(0))
    second.load_json(first.to_json())
    assert second.get("orders") == first.get("orders")
    assert second.data_version == first.data_version
    # The file overlays the defaults: a system topic missing from it is still served.
    assert second.get(SELF_TEST_TOPIC) is not None


def test_loading_with_auto_create_off_drops_a_saved_template(clock: ManualClock) -> None:
    saved = manager(clock).to_json()
    topics = manager(clock, auto_create=False)
    topics.load_json(saved)
    assert topics.get(AUTO_CREATE_TEMPLATE_TOPIC) is None


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        b'{"topicConfigTable": []}',
        b'{"topicConfigTable": {"x": {"topicName": "../etc", "readQueueNums": 1,'
        b' "writeQueueNums": 1, "perm": 6}}}',
        b'{"topicConfigTable": {"x": {"topicName": "x", "readQueueNums": "1",'
        b' "writeQueueNums": 1, "perm": 6}}}',
        b'{"topicConfigTable": {"x": {"topicName": "x", "writeQueueNums": 1, "perm": 6}}}',
        b'{"dataVersion": {"timestamp": "yesterday", "counter": 1}}',
    ],
)
def test_a_corrupt_topics_json_is_a_named_error(clock: ManualClock, content: bytes) -> None:
    with pytest.raises(CorruptMetadata, match="topics.json"):
        manager(clock).load_json(content)
