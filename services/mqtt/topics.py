"""MQTT topic names and filters, and how they map onto BoltMQ topics (docs/mqtt.md).

An MQTT topic ``a/b/c`` is stored on the BoltMQ topic ``a`` (its first level, which
must be a valid BoltMQ topic name: ``% | a-z A-Z 0-9 _ -``, at most 127 characters)
with the whole MQTT topic in the message property ``MQTT_TOPIC`` and, when it is a
valid tag (no ``|``, no space, at most 127 characters), as the message's tag, so an
SDK consumer can filter on it (``"a/b/c || a/b/d"``). A filter's first level must be
a literal for the same reason (``+/x`` and ``#`` name no BoltMQ topic and are refused
with SUBACK 0x8F); the levels below are matched by the gateway, ``+`` one level and a
trailing ``#`` any number of levels, the parent included (MQTT 4.7.1). Topics starting
with ``$`` are not matched by a filter starting with a wildcard (none can here).

Shared subscriptions: ``$share/<group>/<filter>``, the group 1-64 characters of
``a-z A-Z 0-9 _ -``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from boltmq.wire.topic import is_topic

PROPERTY_TOPIC = "MQTT_TOPIC"
"""The full MQTT topic of a message published over MQTT."""
PROPERTY_QOS = "MQTT_QOS"
"""The QoS it was published with."""
PROPERTY_EXPIRES_AT = "MQTT_EXPIRES_AT_MS"
"""Epoch ms after which it is not delivered (MQTT 5 Message Expiry Interval)."""
PROPERTY_CONTENT_TYPE = "MQTT_CONTENT_TYPE"
PROPERTY_PAYLOAD_FORMAT = "MQTT_PAYLOAD_FORMAT"
PROPERTY_EMPTY = "MQTT_EMPTY"
SHARE_PREFIX = "$share/"
SHARE_GROUP = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")
TAG_MAX = 127
TOPIC_MAX_BYTES = 1024
"""MQTT allows 65535; the gateway refuses longer topic names and filters (0x90 / 0x8F)."""


class BadTopic(ValueError):
    """A topic name or filter the gateway cannot serve (the text says why)."""


def boltmq_topic(mqtt_topic: str) -> str:
    """The BoltMQ topic of an MQTT topic name (its first level); BadTopic if invalid."""
    if not mqtt_topic or len(mqtt_topic.encode()) > TOPIC_MAX_BYTES:
        raise BadTopic("a topic name is 1 to 1024 bytes")
    if "+" in mqtt_topic or "#" in mqtt_topic or "\0" in mqtt_topic:
        raise BadTopic(f"topic name {mqtt_topic[:60]!r} has a wildcard")
    first = mqtt_topic.split("/", 1)[0]
    if not is_topic(first):
        raise BadTopic(f"first level {first[:60]!r} is not a BoltMQ topic name")
    return first


def tag_of(mqtt_topic: str) -> str | None:
    """The tag a message of ``mqtt_topic`` carries (None when the topic cannot be one)."""
    if len(mqtt_topic) > TAG_MAX or "|" in mqtt_topic or any(c.isspace() for c in mqtt_topic):
        return None
    return mqtt_topic


@dataclass(frozen=True)
class Filter:
    """A parsed subscription filter."""

    text: str
    """As the device sent it (with its ``$share/<group>/`` prefix)."""
    pattern: str
    """The filter proper."""
    levels: tuple[str, ...]
    topic: str
    """The BoltMQ topic (first level)."""
    share: str | None = None
    """The shared subscription's group name; None for an ordinary subscription."""

    def matches(self, mqtt_topic: str) -> bool:
        """Whether ``mqtt_topic`` matches (MQTT 4.7)."""
        return matches(self.levels, mqtt_topic.split("/"))


def parse_filter(text: str) -> Filter:
    """Parse a SUBSCRIBE/UNSUBSCRIBE filter; BadTopic when it is not one the gateway serves."""
    if not text or len(text.encode()) > TOPIC_MAX_BYTES or "\0" in text:
        raise BadTopic("a topic filter is 1 to 1024 bytes")
    share = None
    pattern = text
    if text.startswith(SHARE_PREFIX):
        group, sep, pattern = text[len(SHARE_PREFIX) :].partition("/")
        if not sep or not SHARE_GROUP.fullmatch(group) or not pattern:
            raise BadTopic("a shared subscription is $share/<group>/<filter>")
        share = group
    levels = tuple(pattern.split("/"))
    for n, level in enumerate(levels):
        if level in ("+", "#"):
            if level == "#" and n != len(levels) - 1:
                raise BadTopic("'#' must be the last level")
        elif "+" in level or "#" in level:
            raise BadTopic(f"a wildcard must be a whole level: {level[:60]!r}")
    if not is_topic(levels[0]):
        raise BadTopic(f"first level {levels[0][:60]!r} must be a BoltMQ topic name")
    return Filter(text, pattern, levels, levels[0], share)


def matches(levels: tuple[str, ...], topic_levels: list[str]) -> bool:
    """Whether a topic split into ``topic_levels`` matches the filter's ``levels``."""
    for n, level in enumerate(levels):
        if level == "#":
            return True
        if n >= len(topic_levels):
            return False
        if level != "+" and level != topic_levels[n]:
            return False
    return len(levels) == len(topic_levels)


def hashed_name(prefix: str, text: str) -> str:
    """A BoltMQ group name for any text (a client id, a share group): ``prefix`` plus a
    hash, valid whatever characters the text has."""
    return prefix + hashlib.sha256(text.encode()).hexdigest()[:32]
