"""Delay messages on the wire and in SCHEDULE_TOPIC_XXXX: the conversions both ways.

A client asks for a delay with one property (RocketMQ's names):

- ``DELAY`` = level ``1..n`` (``message_delay_level``), or
- ``TIMER_DELIVER_MS`` = an absolute delivery time in ms since the epoch.

The broker stores such a message in ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``
with ``REAL_TOPIC``/``REAL_QID`` (where it goes when due), ``DELAY`` (the level
of this hop) and ``DELAY_MS`` (this hop's delay: the store writes
store_timestamp + DELAY_MS as the consume-queue tag code, and the scheduler
computes the same due time from the record). Every scheduled message carries a
``UNIQ_KEY`` (one is assigned when the client set none): the store indexes it,
which is how the scheduler finds an earlier copy after a crash.

``TIMER_DELIVER_MS`` is reached in hops (:meth:`DelayLevels.hop`): each hop waits
in the queue of the largest level that fits the time left, and when due is
re-scheduled for the rest, until no time is left. Rejected alternative: a
separate timer queue ordered by time (RocketMQ 5's timing wheel) needs its own
files in the store, which knows nothing of delays beyond the tag-code rule.

When due, the message goes back to its real topic and queue with every property
it was sent with, minus the scheduling ones, plus ``SCHEDULE_SOURCE`` =
``<schedule queue>:<queue offset>`` naming the entry it came from (the
scheduler's duplicate check).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Protocol

from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.record import (
    PROPERTY_DELAY,
    PROPERTY_DELAY_MS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
    SCHEDULE_TOPIC,
    CorruptRecord,
    decode_record,
)
from boltmq.wire.record_batch import frame_records
from services.broker.delay.delay_level import DelayLevels
from services.broker.errors import InvalidArgument

PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_SCHEDULE_SOURCE = "SCHEDULE_SOURCE"
SCHEDULING_PROPERTIES = frozenset(
    (
        PROPERTY_DELAY,
        PROPERTY_DELAY_MS,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QID,
        PROPERTY_TIMER_DELIVER_MS,
    )
)
"""Properties that exist only while a message waits; none reaches a consumer."""
_MAX_DIGITS = 18


def is_delayed(properties: Mapping[str, str]) -> bool:
    """Whether a client's message asks for a delay."""
    return PROPERTY_DELAY in properties or PROPERTY_TIMER_DELIVER_MS in properties


def _number(field: str, value: str, what: str) -> int:
    text = value.strip()
    if not text or len(text) > _MAX_DIGITS or not (text.isascii() and text.lstrip("-").isdigit()):
        raise InvalidArgument(f"{field}: {what} must be an integer, got {value[:30]!r}")
    return int(text)


def first_hop(
    field: str,
    properties: Mapping[str, str],
    levels: DelayLevels,
    now_ms: int,
    max_delay_ms: int,
    past_tolerance_ms: int,
) -> tuple[int, int] | None:
    """``(level, delay_ms)`` of a delayed message's first hop, None to deliver it at once.

    InvalidArgument naming ``field`` for a level outside 1..n, both properties
    set, or a delivery time too far ahead or (beyond the clock-skew tolerance)
    in the past.
    """
    level_text = properties.get(PROPERTY_DELAY)
    deliver_text = properties.get(PROPERTY_TIMER_DELIVER_MS)
    if level_text is not None and deliver_text is not None:
        raise InvalidArgument(f"{field}: set a delay level or a delivery time, not both")
    if level_text is not None:
        level = _number(field, level_text, "the delay level")
        if not 1 <= level <= levels.count:
            raise InvalidArgument(f"{field}: delay level {level} is not 1..{levels.count}")
        return level, levels.delay_ms(level)
    assert deliver_text is not None
    deliver_at = _number(field, deliver_text, "deliver_at_ms")
    remaining = deliver_at - now_ms
    if remaining > max_delay_ms:
        raise InvalidArgument(
            f"{field}: deliver_at_ms {deliver_at} is {remaining} ms ahead, "
            f"at most {max_delay_ms} (deliver_at_max_delay_ms)"
        )
    if remaining < -past_tolerance_ms:
        raise InvalidArgument(
            f"{field}: deliver_at_ms {deliver_at} is {-remaining} ms in the "
            f"past (a delivery time is ms since the epoch)"
        )
    if remaining <= 0:
        return None
    return levels.hop(remaining)


def schedule(message: message_pb2.Message, level: int, delay_ms: int) -> None:
    """Turn a client's message (topic and queue chosen) into its schedule-queue form."""
    props = message.properties
    props[PROPERTY_REAL_TOPIC] = message.topic
    props[PROPERTY_REAL_QID] = str(message.queue_id)
    props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_DELAY_MS] = str(delay_ms)
    if not props.get(PROPERTY_UNIQ_KEY):
        props[PROPERTY_UNIQ_KEY] = uuid.uuid4().hex.upper()
    message.topic = SCHEDULE_TOPIC
    message.queue_id = level - 1


def deliver_now(message: message_pb2.Message) -> None:
    """A message whose delivery time has come already: no scheduling properties."""
    for name in SCHEDULING_PROPERTIES:
        if name in message.properties:
            del message.properties[name]


def due_ms(entry: message_pb2.MessageExt) -> int:
    """When a schedule-queue entry is due (the store's tag-code rule, from the record)."""
    delay = entry.properties.get(PROPERTY_DELAY_MS, "0")
    return entry.store_timestamp_ms + (int(delay) if delay.isascii() and delay.isdigit() else 0)


def source_of(entry: message_pb2.MessageExt) -> str:
    """The ``SCHEDULE_SOURCE`` value of copies made from ``entry``."""
    return f"{entry.queue_id}:{entry.queue_offset}"


def next_copy(
    entry: message_pb2.MessageExt, levels: DelayLevels, now_ms: int
) -> message_pb2.Message:
    """What a due entry becomes: its real message, or its next hop towards
    ``TIMER_DELIVER_MS`` when that is still ahead."""
    props = dict(entry.properties)
    copy = message_pb2.Message(
        topic=props.get(PROPERTY_REAL_TOPIC, ""),
        queue_id=int(props.get(PROPERTY_REAL_QID, "0")),
        body=entry.body,
        flag=entry.flag,
        sys_flag=entry.sys_flag,
        born_timestamp=entry.born_timestamp_ms,
        reconsume_times=entry.reconsume_times,
        prepared_transaction_offset=entry.prepared_transaction_offset,
    )
    props[PROPERTY_SCHEDULE_SOURCE] = source_of(entry)
    deliver_text = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    remaining = int(deliver_text) - now_ms if deliver_text.lstrip("-").isdigit() else 0
    copy.properties.update(props)
    if remaining > 0:
        level, delay_ms = levels.hop(remaining)
        schedule(copy, level, delay_ms)
    else:
        deliver_now(copy)
    return copy


class DelaySettings(Protocol):
    """The settings a delay is checked against: ``BrokerConfig``'s (named here, not
    imported: the config imports :mod:`services.broker.delay.delay_level`)."""

    @property
    def message_delay_level(self) -> str: ...

    @property
    def deliver_at_max_delay_ms(self) -> int: ...

    @property
    def deliver_at_past_tolerance_ms(self) -> int: ...


_LEVELS_BY_TEXT: dict[str, DelayLevels] = {}


def levels_of(config: DelaySettings) -> DelayLevels:
    """The broker's parsed delay levels (parsed once per setting)."""
    levels = _LEVELS_BY_TEXT.get(config.message_delay_level)
    if levels is None:
        levels = _LEVELS_BY_TEXT[config.message_delay_level] = DelayLevels.parse(
            config.message_delay_level
        )
    return levels


def schedule_delayed(messages: Iterable[message_pb2.Message], config: DelaySettings) -> None:
    """Send path: every delayed message of a batch (topic and queue chosen) in its
    schedule-queue form, or without its delay when its time has come already."""
    now_ms = time.time_ns() // 1_000_000
    for index, message in enumerate(messages):
        props = message.properties
        if not is_delayed(props):
            continue
        hop = first_hop(
            f"messages[{index}].properties",
            props,
            levels_of(config),
            now_ms,
            config.deliver_at_max_delay_ms,
            config.deliver_at_past_tolerance_ms,
        )
        if hop is None:
            deliver_now(message)
        else:
            schedule(message, *hop)


DELAY_MARKERS = (f"{PROPERTY_DELAY}\x01".encode(), f"{PROPERTY_TIMER_DELIVER_MS}\x01".encode())
"""What an encoded properties section holds when it names a delay property."""


def may_ask_for_delay(properties_raw: bytes | memoryview) -> bool:
    """Whether encoded properties (or whole records) name a delay property at all."""
    data = properties_raw if isinstance(properties_raw, bytes) else bytes(properties_raw)
    return any(marker in data for marker in DELAY_MARKERS)


def records_as_messages(
    request: broker_pb2.SendRequest, records: bytes
) -> broker_pb2.SendRequest | None:
    """A raw batch with a delayed record as the per-message request; None when no record
    asks for a delay (the raw path then goes on untouched).

    A substring search over the bytes keeps the common case free: only a batch
    holding ``DELAY\\x01`` or ``TIMER_DELIVER_MS\\x01`` somewhere is decoded.
    """
    if not may_ask_for_delay(records):
        return None
    try:
        positions = frame_records(records, request.record_count)
        view = memoryview(records)
        decoded = [
            decode_record(view, position, check_crc=True, copy_body=True) for position in positions
        ]
        properties = [d.properties for d in decoded]
    except CorruptRecord as exc:
        raise InvalidArgument(f"records: {exc}") from None
    if not any(is_delayed(p) for p in properties):
        return None
    messages = [
        message_pb2.Message(
            topic=request.topic,
            queue_id=request.queue_id,
            body=bytes(d.body),
            flag=d.flag,
            properties=p,
            born_timestamp=d.born_timestamp,
            sys_flag=d.sys_flag,
            reconsume_times=d.reconsume_times,
            prepared_transaction_offset=d.prepared_transaction_offset,
        )
        for d, p in zip(decoded, properties, strict=True)
    ]
    return broker_pb2.SendRequest(
        producer_group=request.producer_group,
        messages=messages,
        default_topic_queue_nums=request.default_topic_queue_nums,
    )
