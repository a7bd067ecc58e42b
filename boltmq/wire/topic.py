"""Topic names and subscription expressions.

A topic name becomes a directory name under ``consumequeue/``, so it must
match ``^[%|a-zA-Z0-9_-]{1,127}$``: no ``.``, ``/`` or ``..`` can ever reach the
file system. A subscription is ``*`` (or empty) for every message, or tags
joined by ``||`` (``"tagA || tagB"``), matched first by the consume queue's
tag hash and then by the real tag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from boltmq.wire.record import InvalidMessage, java_string_hash

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
TOPIC_MAX_LENGTH = 127


class InvalidTopic(InvalidMessage):
    """A topic name that is not allowed."""


def validate_topic(topic: object) -> str:
    """Return ``topic`` when valid, else raise InvalidTopic with the reason."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopic("topic must be a non-empty string")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidTopic(f"topic is {len(topic)} characters, at most {TOPIC_MAX_LENGTH}")
    if not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidTopic(
            f"topic {topic[:60]!r} may only use letters, digits, '%', '|', '_' and '-'"
        )
    return topic


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
