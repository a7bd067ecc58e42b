"""MQTT topic names and filters: parsing, matching (MQTT 4.7) and the BoltMQ mapping."""

from __future__ import annotations

import pytest

from boltmq.kernel.config import ConfigError
from boltmq.wire.topic import is_group
from services.mqtt.config import MqttConfig
from services.mqtt.topics import BadTopic, boltmq_topic, hashed_name, parse_filter, tag_of


@pytest.mark.parametrize(
    ("pattern", "topic", "matched"),
    [
        ("a/b/c", "a/b/c", True),
        ("a/+/c", "a/x/c", True),
        ("a/+/c", "a/x/y/c", False),
        ("a/#", "a", True),  # '#' takes the parent level too
        ("a/#", "a/b/c/d", True),
        ("a/+", "a", False),
        ("a/+", "a/", True),  # an empty level is a level
        ("a/b", "a/b/c", False),
        ("a/+/+", "a/b", False),
    ],
)
def test_filters_match_as_mqtt_says(pattern: str, topic: str, matched: bool) -> None:
    assert parse_filter(pattern).matches(topic) is matched


@pytest.mark.parametrize(
    "bad", ["", "+/x", "#", "a/b#", "a/#/c", "a/x+", "bad.topic/x", "$share/g", "$share//a"]
)
def test_filters_the_gateway_cannot_serve_are_refused(bad: str) -> None:
    with pytest.raises(BadTopic):
        parse_filter(bad)


def test_a_shared_filter_names_its_group_and_topic() -> None:
    shared = parse_filter("$share/workers/jobs/+")
    assert (shared.share, shared.topic, shared.pattern) == ("workers", "jobs", "jobs/+")
    assert shared.matches("jobs/1") and not shared.matches("jobs/1/2")


@pytest.mark.parametrize("bad", ["", "a/+", "a/#", "x.y/z", "a" * 128, "a/\0"])
def test_topic_names_must_map_onto_a_boltmq_topic(bad: str) -> None:
    with pytest.raises(BadTopic):
        boltmq_topic(bad)


def test_mapping_and_tags() -> None:
    assert boltmq_topic("sensors/k1/temp") == "sensors"
    assert tag_of("sensors/k1/temp") == "sensors/k1/temp"
    assert tag_of("a/b c") is None and tag_of("a|b") is None  # not a tag expression's
    assert is_group(hashed_name("MQTT_S_", "any client id: ü, spaces, /"))


def test_bad_settings_are_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="access_key and secret_key"):
        MqttConfig(access_key="x-account")
    with pytest.raises(ConfigError, match="ws_listen_port"):
        MqttConfig(ws_listen_port=-2)
    with pytest.raises(ConfigError, match="max_packet_bytes"):
        MqttConfig(max_packet_bytes=10)
