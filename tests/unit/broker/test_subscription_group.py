"""SubscriptionGroupManager: auto-creation, settings, subscriptionGroup.json."""

from __future__ import annotations

import json

import pytest

from services.broker.errors import CorruptMetadata
from services.broker.metadata.subscription_group import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from tests.unit.broker.conftest import ManualClock


def test_groups_are_created_with_rocketmq_defaults_when_auto_create_is_on(
    clock: ManualClock,
) -> None:
    groups = SubscriptionGroupManager(auto_create=True, clock_ms=clock)
    config = groups.find_or_create("g1")
    assert config == SubscriptionGroupConfig("g1")
    assert config is not None and config.consume_enable
    assert (config.retry_queue_nums, config.retry_max_times) == (1, 16)
    assert groups.names() == ["g1"]
    assert groups.data_version.counter == 1


def test_unknown_groups_stay_unknown_when_auto_create_is_off(clock: ManualClock) -> None:
    groups = SubscriptionGroupManager(auto_create=False, clock_ms=clock)
    assert groups.find_or_create("g1") is None
    assert groups.names() == []


def test_json_round_trips_with_rocketmq_field_names(clock: ManualClock) -> None:
    groups = SubscriptionGroupManager(auto_create=True, clock_ms=clock)
    groups.upsert(SubscriptionGroupConfig("g1", consume_enable=False, retry_max_times=3))
    document = json.loads(groups.to_json())
    entry = document["subscriptionGroupTable"]["g1"]
    assert entry["groupName"] == "g1"
    assert entry["consumeEnable"] is False
    assert entry["retryMaxTimes"] == 3
    loaded = SubscriptionGroupManager(auto_create=False, clock_ms=clock)
    loaded.load_json(groups.to_json())
    assert loaded.get("g1") == groups.get("g1")
    assert loaded.data_version == groups.data_version


@pytest.mark.parametrize(
    "entry",
    [
        {"groupName": "a/b"},
        {"groupName": "g", "consumeEnable": "yes"},
        {"groupName": "g", "retryMaxTimes": True},
        [],
    ],
)
def test_a_corrupt_group_entry_is_a_named_error(clock: ManualClock, entry: object) -> None:
    content = json.dumps({"subscriptionGroupTable": {"g": entry}}).encode()
    with pytest.raises(CorruptMetadata, match="subscriptionGroup.json"):
        SubscriptionGroupManager(auto_create=True, clock_ms=clock).load_json(content)
