"""Rules for the names clients send: topics, groups, client ids, subscriptions.

A topic name becomes a directory under the store's ``consumequeue/`` and a
group name becomes part of ``%RETRY%<group>``, so both are held to RocketMQ's
character set; nothing with ``.`` or ``/`` ever passes. The rule itself is
:mod:`boltmq.wire.topic`'s, shared with the registry and the store. Each check raises
:class:`InvalidArgument` naming the request field, so the caller sees which
part of its request is wrong.
"""

from __future__ import annotations

import logging

from boltmq.wire import sql_filter
from boltmq.wire.topic import (
    InvalidGroup,
    InvalidTopic,
    is_group,
    is_topic,
    validate_group,
    validate_topic,
)
from services.broker.errors import InvalidArgument

log = logging.getLogger(__name__)

CLIENT_ID_MAX_LENGTH = 255
SUBSCRIPTION_MAX_LENGTH = 4096


def check_topic(field: str, topic: str) -> str:
    """Return ``topic`` when it is a valid topic name, else raise naming ``field``."""
    try:
        return validate_topic(topic)
    except InvalidTopic as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def check_group(field: str, group: str) -> str:
    """Return ``group`` when it is a valid group name, else raise naming ``field``."""
    try:
        return validate_group(group)
    except InvalidGroup as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def check_client_id(field: str, client_id: str) -> str:
    """Client ids are opaque but must be present, printable and bounded."""
    if not client_id:
        raise InvalidArgument(f"{field}: a client id is required")
    if len(client_id) > CLIENT_ID_MAX_LENGTH or not client_id.isprintable():
        raise InvalidArgument(
            f"{field}: client id must be at most {CLIENT_ID_MAX_LENGTH} printable characters"
        )
    return client_id


def check_expression_type(field: str, expression_type: str) -> str:
    """TAG (also for ``""``) or SQL92, else raise naming ``field``."""
    try:
        return sql_filter.check_expression_type(expression_type)
    except ValueError as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def check_sql_filter(field: str, expression: str) -> sql_filter.SqlFilter:
    """The parsed SQL92 filter, or InvalidArgument naming ``field`` and the error's position."""
    try:
        return sql_filter.parse_filter(expression)
    except sql_filter.InvalidFilter as exc:
        raise InvalidArgument(f"{field}: {exc}") from None


def check_subscription(
    field: str, expression: str, expression_type: str = "", type_field: str = "expression_type"
) -> str:
    """``*``, empty, or tags joined by ``||``; an empty tag between bars is an error.

    With ``expression_type`` (the request's ``type_field``) SQL92, a condition
    :mod:`boltmq.wire.sql_filter` parses."""
    if len(expression) > SUBSCRIPTION_MAX_LENGTH:
        raise InvalidArgument(f"{field}: expression is longer than {SUBSCRIPTION_MAX_LENGTH}")
    if check_expression_type(type_field, expression_type) == sql_filter.SQL92:
        check_sql_filter(field, expression)
        return expression
    text = expression.strip()
    if text in ("", "*"):
        return expression
    if any(not part.strip() for part in text.split("||")):
        raise InvalidArgument(
            f"{field}: empty tag in expression {expression[:60]!r} (use '*' or 'tagA || tagB')"
        )
    return expression


def dropped_at_load(file: str, kind: str, name: object) -> bool:
    """True (and a WARNING) for a name older brokers let through but the rule refuses: a valid
    name followed by one newline (``re.match`` with ``$`` accepted it). Its entry is dropped
    when ``file`` is loaded, so a broker that stored one starts and registers again; any other
    bad name stays a :class:`CorruptMetadata` error."""
    if not (isinstance(name, str) and name.endswith("\n")):
        return False
    valid = name[:-1]
    if not (is_topic(valid) if kind == "topic" else is_group(valid)):
        return False
    log.warning("%s: dropping %s %r: names may not end with a newline", file, kind, name)
    return True
