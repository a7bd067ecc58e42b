"""MessageSelector: what a consumer subscribes to in a topic, by tag or by SQL92 condition.

RocketMQ's ``MessageSelector``: a subscription is a tag expression (``"*"``,
``"tagA || tagB"``), the store filtering by tag, or a SQL92 condition on the
message's properties (:mod:`boltmq.wire.sql_filter`, docs/filters.md), the broker
evaluating it on every message it reads for the pull. Consumers take either a
plain string (a tag expression, as before) or a selector::

    PushConsumer(registry, "cg", {"Orders": MessageSelector.by_sql("a > 5 AND region IN ('eu')")},
                 listener)

A selector is checked when it is made: a bad condition raises
:class:`~boltmq.wire.sql_filter.InvalidFilter` (a ValueError) with the line and
column of the error, before anything connects; the broker checks it again on
every heartbeat and pull.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from boltmq.wire.sql_filter import SQL92, TAG, InvalidFilter, check_expression_type, parse_filter
from boltmq.wire.topic import InvalidSubscription, parse_subscription

__all__ = [
    "EVERY_TAG",
    "InvalidFilter",
    "MessageSelector",
    "Selection",
    "on_the_wire",
    "selector_of",
    "selectors",
]


@dataclass(frozen=True, slots=True)
class MessageSelector:
    """An expression and its type (TAG or SQL92); made by :meth:`by_tag` or :meth:`by_sql`."""

    expression: str
    expression_type: str = TAG

    def __post_init__(self) -> None:
        kind = check_expression_type(self.expression_type)
        if kind == SQL92:
            parse_filter(self.expression)
        else:
            try:
                parse_subscription(self.expression)
            except InvalidSubscription as exc:
                raise ValueError(str(exc)) from None

    @classmethod
    def by_tag(cls, expression: str = "*") -> MessageSelector:
        """``"*"`` for every message, or tags joined by ``||``."""
        return cls(expression, TAG)

    @classmethod
    def by_sql(cls, condition: str) -> MessageSelector:
        """A SQL92 condition on the properties (InvalidFilter when it does not parse)."""
        return cls(condition, SQL92)

    @property
    def wire_type(self) -> str:
        """The type as requests carry it ("" for TAG, as older brokers expect)."""
        return "" if self.expression_type == TAG else self.expression_type


EVERY_TAG = MessageSelector("*")
"""Every message of the topic (``"*"``)."""

Selection = str | MessageSelector
"""What a topic is subscribed with: a tag expression or a selector."""


def selector_of(selection: Selection) -> MessageSelector:
    """``selection`` as a selector (a string is a tag expression); ValueError when invalid."""
    if isinstance(selection, MessageSelector):
        return selection
    return MessageSelector.by_tag(selection)


def on_the_wire(selection: Selection) -> tuple[str, str]:
    """``(expression, expression_type)`` as requests carry them; a string goes as a tag
    expression, unchecked (the broker checks it: a pull's error names the field)."""
    if isinstance(selection, MessageSelector):
        return selection.expression, selection.wire_type
    return selection, ""


def selectors(subscriptions: Mapping[str, Selection]) -> dict[str, MessageSelector]:
    """Every topic's selector; ValueError naming the topic whose expression is invalid."""
    out = {}
    for topic, selection in subscriptions.items():
        try:
            out[topic] = selector_of(selection)
        except InvalidFilter as exc:  # kept as it is (line and column), the topic named
            exc.args = (f"subscription of {topic!r}: {exc}",)
            raise
        except ValueError as exc:
            raise ValueError(f"subscription of {topic!r}: {exc}") from exc
    return out
