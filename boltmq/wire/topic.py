"""Names (topics, groups) and subscription expressions: the one rule every side applies.

A topic name becomes a directory name under ``consumequeue/`` and a group
name becomes part of the topics ``%RETRY%<group>`` and ``%DLQ%<group>``, so
both are 1 or more of ``% | a-z A-Z 0-9 _ -`` (RocketMQ's character set):
no ``.``, ``/``, ``..``, space or control character can ever reach the file
system or a registry. Topics have at most 127 characters, groups at most 255
(a group whose derived topic would be longer than 127 has no retry topic).
The broker, the registry and the store all check names here, with full
matches: ``re.match`` with ``$`` would let a trailing newline through. The
patterns are anchored with ``\\A`` and ``\\Z`` so even a careless ``match``
stays exact.

A subscription is ``*`` (or empty) for every message, or tags
joined by ``||`` (``"tagA || tagB"``), matched first by the consume queue's
tag hash and then by the real tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from boltmq.wire.record import InvalidMessage, java_string_hash

TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 255
NAME_CHARACTERS = "letters, digits, '%', '|', '_' and '-'"
TOPIC_PATTERN = re.compile(r"\A[%|a-zA-Z0-9_-]{1,127}\Z")
GROUP_PATTERN = re.compile(r"\A[%|a-zA-Z0-9_-]{1,255}\Z")
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"


class InvalidTopic(InvalidMessage):
    """A topic name that is not allowed."""


class InvalidGroup(ValueError):
    """A group name that is not allowed."""


def is_topic(name: object) -> bool:
    """True when ``name`` is a valid topic name."""
    return isinstance(name, str) and TOPIC_PATTERN.fullmatch(name) is not None


def is_group(name: object) -> bool:
    """True when ``name`` is a valid group name."""
    return isinstance(name, str) and GROUP_PATTERN.fullmatch(name) is not None


def validate_topic(topic: object) -> str:
    """Return ``topic`` when valid, else raise InvalidTopic with the reason (the last few
    valid names remembered, a str only: a store checks every append's topic)."""
    if type(topic) is str:
        return _valid_topic(topic)
    return _check_topic(topic)


@lru_cache(maxsize=4096)
def _valid_topic(topic: str) -> str:
    return _check_topic(topic)  # a refusal raises: it is not remembered


def _check_topic(topic: object) -> str:
    if not isinstance(topic, str) or not topic:
        raise InvalidTopic("a topic name is required")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidTopic(f"topic is {len(topic)} characters, at most {TOPIC_MAX_LENGTH}")
    if not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidTopic(f"topic {topic[:60]!r} may only use {NAME_CHARACTERS}")
    return topic


def validate_group(group: object) -> str:
    """Return ``group`` when valid, else raise InvalidGroup with the reason."""
    if not isinstance(group, str) or not group:
        raise InvalidGroup("a group name is required")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidGroup(f"group is {len(group)} characters, at most {GROUP_MAX_LENGTH}")
    if not GROUP_PATTERN.fullmatch(group):
        raise InvalidGroup(f"group {group[:60]!r} may only use {NAME_CHARACTERS}")
    return group


def retry_topic(group: str) -> str:
    """``%RETRY%<group>``, checked: InvalidGroup or InvalidTopic when it is not a valid name."""
    return validate_topic(RETRY_PREFIX + validate_group(group))


def dlq_topic(group: str) -> str:
    """``%DLQ%<group>``, checked like :func:`retry_topic`."""
    return validate_topic(DLQ_PREFIX + validate_group(group))


@dataclass(frozen=True, slots=True)
class Subscription:
    """A parsed subscription expression; ``tags`` empty means everything."""

    expression: str
    tags: frozenset[str]
    codes: frozenset[int]

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def matches_code(self, code: int) -> bool:
        return not self.tags or code in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        return not self.tags or (tag is not None and tag in self.tags)


class InvalidSubscription(ValueError):
    """A subscription expression that cannot be parsed."""


@lru_cache(maxsize=4096)
def parse_subscription(expression: str | None) -> Subscription:
    """Parse ``"*"``, ``""``/None, or ``"tagA || tagB"``."""
    text = (expression or "").strip()
    if text in ("", "*"):
        return Subscription("*", frozenset(), frozenset())
    tags = []
    for part in text.split("||"):
        tag = part.strip()
        if not tag:
            raise InvalidSubscription(f"empty tag in subscription {expression!r}")
        if tag == "*":
            return Subscription("*", frozenset(), frozenset())
        tags.append(tag)
    return Subscription(text, frozenset(tags), frozenset(java_string_hash(t) for t in tags))
