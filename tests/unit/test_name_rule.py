"""One name rule for topics and groups, applied alike by the broker, the registry and the store.

A name with a trailing newline (``G\\n``) once passed the broker's ``re.match(...$)`` but
not the registry's full match: the broker created ``%RETRY%G\\n`` and every registration
it made afterwards was refused. Every side now uses :mod:`boltmq.wire.topic`.
"""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boltmq.kernel.config import ConfigError
from boltmq.wire.topic import (
    GROUP_MAX_LENGTH,
    TOPIC_MAX_LENGTH,
    InvalidGroup,
    InvalidTopic,
    dlq_topic,
    is_group,
    is_topic,
    retry_topic,
    validate_group,
    validate_topic,
)
from services.broker.config import BrokerConfig
from services.broker.errors import InvalidArgument
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metadata.names import check_group, check_topic
from services.broker.metadata.subscription_group import SubscriptionGroupManager
from services.broker.metadata.topic_config import TopicConfig, TopicConfigManager
from services.broker.retry import retry_topic as broker_retry
from services.ha.config import HAConfig
from services.registry.errors import InvalidRequest
from services.registry.route_table import BrokerMember, Registration, TopicSettings

ALPHABET = "%|_-abcxyzABCXYZ0189"
VALID_CHARS = set(ALPHABET) | set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
TRAILERS = ["\n", "\r\n", "\r", " ", "\t", "\x00", ".", "/", "\u2028"]


def _registry_accepts(topic: str) -> bool:
    member = BrokerMember("DefaultCluster", "broker-a", 0, "127.0.0.1:10911")
    try:
        Registration(member, "", (TopicSettings(topic, 1, 1, 6),))
    except InvalidRequest:
        return False
    return True


def _broker_accepts(topic: str) -> bool:
    try:
        check_topic("topic", topic)
    except InvalidArgument:
        return False
    return True


@given(st.text(alphabet=ALPHABET, min_size=1, max_size=TOPIC_MAX_LENGTH))
def test_names_of_the_allowed_characters_pass_everywhere(name: str) -> None:
    assert validate_topic(name) == name == validate_group(name)
    assert _broker_accepts(name) and _registry_accepts(name)


@given(st.text(alphabet=ALPHABET, min_size=1, max_size=60), st.sampled_from(TRAILERS))
def test_a_valid_name_with_a_trailing_character_fails_everywhere(name: str, tail: str) -> None:
    bad = name + tail
    assert not is_topic(bad) and not is_group(bad)
    assert not _broker_accepts(bad) and not _registry_accepts(bad)
    with pytest.raises(InvalidGroup):
        validate_group(bad)
    with pytest.raises(InvalidArgument, match="group: group .* may only use"):
        check_group("group", bad)


@given(st.text(max_size=140))
def test_broker_registry_and_store_agree_on_every_string(name: str) -> None:
    expected = 0 < len(name) <= TOPIC_MAX_LENGTH and set(name) <= VALID_CHARS
    assert is_topic(name) is expected
    assert _broker_accepts(name) is expected
    assert _registry_accepts(name) is expected
    if not expected:
        with pytest.raises(InvalidTopic):
            validate_topic(name)


def test_group_length_and_its_derived_topics() -> None:
    assert is_group("g" * GROUP_MAX_LENGTH) and not is_group("g" * (GROUP_MAX_LENGTH + 1))
    assert retry_topic("G") == "%RETRY%G" and dlq_topic("G") == "%DLQ%G"
    longest = "g" * (TOPIC_MAX_LENGTH - len("%RETRY%"))
    assert retry_topic(longest) == "%RETRY%" + longest
    with pytest.raises(InvalidTopic, match="at most 127"):
        retry_topic(longest + "g")
    with pytest.raises(InvalidGroup):
        dlq_topic("G\n")
    with pytest.raises(InvalidArgument, match="^group: no retry topic for 'G\\\\n'"):
        broker_retry.retry_topic("G\n")


def test_the_broker_never_keeps_a_topic_the_registry_would_refuse() -> None:
    topics = TopicConfigManager("DefaultCluster", "broker-a", auto_create_enable=True)
    for name in ("%RETRY%G\n", "T\n", "a/b", "x" * 128):
        with pytest.raises(InvalidArgument, match="^topic: "):
            topics.upsert(TopicConfig(name, 1, 1))
        with pytest.raises(InvalidArgument, match="^topic: "):
            topics.create_from_template(name, 4)
    assert all(_registry_accepts(t.name) for t in topics.all())


def test_broker_and_ha_names_use_the_rule() -> None:
    for config in (BrokerConfig, HAConfig):
        with pytest.raises(ConfigError, match="broker_name"):
            config(broker_name="broker-a\n")
        with pytest.raises(ConfigError, match="cluster_name"):
            config(cluster_name="DefaultCluster\n")


def test_entries_stored_by_the_lax_rule_are_dropped_at_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    topics = TopicConfigManager("DefaultCluster", "broker-a", auto_create_enable=True)
    entry = {"readQueueNums": 1, "writeQueueNums": 1, "perm": 6}
    table = {n: {"topicName": n, **entry} for n in ("%RETRY%G\n", "orders")}
    version = {"timestamp": 1, "counter": 1}
    with caplog.at_level(logging.WARNING):
        topics.load_json(json.dumps({"topicConfigTable": table, "dataVersion": version}).encode())
    assert topics.get("orders") is not None and topics.get("%RETRY%G\n") is None
    assert "dropping topic '%RETRY%G\\n'" in caplog.text
    groups = SubscriptionGroupManager(auto_create=True)
    groups.load_json(
        json.dumps(
            {"subscriptionGroupTable": {"G\n": {"groupName": "G\n"}}, "dataVersion": version}
        ).encode()
    )
    assert groups.names() == []
    offsets = ConsumerOffsetManager()
    offsets.load_json(b'{"offsetTable": {"T@G\\n": {"0": 1}, "T@G": {"0": 2}}}')
    assert b"G\\n" not in offsets.to_json() and b'"T@G"' in offsets.to_json()
