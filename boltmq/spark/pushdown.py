"""The filters Spark pushes down to the ``boltmq-commitlog`` reader (:mod:`boltmq.spark.commitlog`).

A reader that accepts a filter applies it exactly: Spark does not apply it again.
Accepted: ``topic`` and ``queue_id`` equal to a value or in a list (intersected when
several are pushed), and ``store_timestamp`` compared with a timestamp of whole
milliseconds (bounds folded into ``[store_from_ms, store_until_ms)``). Anything
else, sub-millisecond bounds included, is left to Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

TIME_MAX_MS = 1 << 62
"""An upper time bound past any store timestamp (no bound)."""


@dataclass
class RecordFilter:
    """The filters Spark pushed down, applied exactly (Spark does not apply them again)."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    store_from_ms: int = 0
    """Inclusive lower bound of store_timestamp."""
    store_until_ms: int = TIME_MAX_MS
    """Exclusive upper bound of store_timestamp."""

    def accepts_time(self, store_ms: int) -> bool:
        return self.store_from_ms <= store_ms < self.store_until_ms


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(value: datetime) -> int:
    """Milliseconds of a pushed timestamp value (UTC when it carries no zone)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(milliseconds=1)


def _intersect(old: frozenset | None, new: Iterable[Any]) -> frozenset:
    values = frozenset(new)
    return values if old is None else old & values


def push(wanted: RecordFilter, item: Filter) -> bool:
    """Fold ``item`` into ``wanted``; False when this reader cannot apply it."""
    attribute: tuple[str, ...] = getattr(item, "attribute", ())
    column = attribute[0] if len(attribute) == 1 else None
    value: Any = getattr(item, "value", None)
    if column == "topic" and isinstance(item, EqualTo | In):
        values = [value] if isinstance(item, EqualTo) else list(value)
        wanted.topics = _intersect(wanted.topics, values)
        return True
    if column == "queue_id" and isinstance(item, EqualTo | In):
        values = [value] if isinstance(item, EqualTo) else list(value)
        wanted.queue_ids = _intersect(wanted.queue_ids, values)
        return True
    if column != "store_timestamp" or not isinstance(
        item, EqualTo | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
    ):
        return False
    if not isinstance(value, datetime) or value.microsecond % 1000:
        return False  # sub-millisecond bounds: leave them to Spark
    ms = _ms(value)
    if isinstance(item, EqualTo | GreaterThanOrEqual):
        wanted.store_from_ms = max(wanted.store_from_ms, ms)
    if isinstance(item, GreaterThan):
        wanted.store_from_ms = max(wanted.store_from_ms, ms + 1)
    if isinstance(item, EqualTo | LessThanOrEqual):
        wanted.store_until_ms = min(wanted.store_until_ms, ms + 1)
    if isinstance(item, LessThan):
        wanted.store_until_ms = min(wanted.store_until_ms, ms)
    return True
