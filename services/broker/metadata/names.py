"""Rules for the names clients send: topics, groups, client ids, subscriptions.

A topic name becomes a directory under the store's ``consumequeue/`` and a
group name becomes part of ``%RETRY%<group>``, so both are held to RocketMQ's
character set; nothing with ``.`` or ``/`` ever passes. Each check raises
:class:`InvalidArgument` naming the request field, so the caller sees which
part of its request is wrong.
"""

from __future__ import annotations

import re

from services.broker.errors import InvalidArgument

TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
TOPIC_MAX_LENGTH = 127
GROUP_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]{1,255}$")
GROUP_MAX_LENGTH = 255
CLIENT_ID_MAX_LENGTH = 255
SUBSCRIPTION_MAX_LENGTH = 4096
_ALLOWED = "letters, digits, '%', '|', '_' and '-'"


def check_topic(field: str, topic: str) -> str:
    """Return ``topic`` when it is a valid topic name, else raise naming ``field``."""
    if not topic:
        raise InvalidArgument(f"{field}: a topic name is required")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise InvalidArgument(
            f"{field}: topic is {len(topic)} characters, at most {TOPIC_MAX_LENGTH}"
        )
    if not TOPIC_PATTERN.match(topic):
        raise InvalidArgument(f"{field}: topic {topic[:60]!r} may only use {_ALLOWED}")
    return topic


def check_group(field: str, group: str) -> str:
    """Return ``group`` when it is a valid group name, else raise naming ``field``."""
    if not group:
        raise InvalidArgument(f"{field}: a group name is required")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidArgument(
            f"{field}: group is {len(group)} characters, at most {GROUP_MAX_LENGTH}"
        )
    if not GROUP_PATTERN.match(group):
        raise InvalidArgument(f"{field}: group {group[:60]!r} may only use {_ALLOWED}")
    return group


def check_client_id(field: str, client_id: str) -> str:
    """Client ids are opaque but must be present, printable and bounded."""
    if not client_id:
        raise InvalidArgument(f"{field}: a client id is required")
    if len(client_id) > CLIENT_ID_MAX_LENGTH or not client_id.isprintable():
        raise InvalidArgument(
            f"{field}: client id must be at most {CLIENT_ID_MAX_LENGTH} printable characters"
        )
    return client_id


def check_subscription(field: str, expression: str) -> str:
    """``*``, empty, or tags joined by ``||``; an empty tag between bars is an error."""
    if len(expression) > SUBSCRIPTION_MAX_LENGTH:
        raise InvalidArgument(f"{field}: expression is longer than {SUBSCRIPTION_MAX_LENGTH}")
    text = expression.strip()
    if text in ("", "*"):
        return expression
    if any(not part.strip() for part in text.split("||")):
        raise InvalidArgument(
            f"{field}: empty tag in expression {expression[:60]!r} (use '*' or 'tagA || tagB')"
        )
    return expression
