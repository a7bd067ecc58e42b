"""The SDK's message model: what a producer sends and what it gets back.

A received message is a :class:`boltmq.wire.record.RecordView` decoded from
the raw CommitLog records the broker returns (``raw_records``): every record
field is an attribute (topic, queue_id, queue_offset, commitlog_offset,
msg_id, unique_id, body, tags, keys, properties, born/store timestamps and
hosts, reconsume_times), and the body is a view, not a copy. A body the
producer compressed (longer than ``ProducerOptions.compress_body_over``) is
inflated when first read (:mod:`boltmq.wire.body_compression`).

Two ids name a message: ``msg_id``, the offset id of the stored copy (where
it lies), and ``unique_id``, the producer's id (the ``UNIQ_KEY`` property,
:mod:`boltmq.unique_id`), given once before the first send attempt, so the
copies a retried send may leave all carry it. A message whose properties
already hold ``UNIQ_KEY`` keeps it (a Message sent twice that way is one id).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple

from boltmq.unique_id import new_unique_id, new_unique_ids
from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.record import PROPERTY_UNIQ_KEY, InvalidMessage, RecordView
from boltmq.wire.record_batch import send_record_parts
from boltmq.wire.send_columns import COLUMNS_MIN, encode_plain_batch

MAX_DELAY_LEVEL = 18
"""Delay levels a broker may have (queues of SCHEDULE_TOPIC_XXXX); the broker checks its own."""
PROPERTY_DELAY = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"

ReceivedMessage = RecordView
"""A message as consumers receive it (see the module docstring)."""


class MessageError(ValueError):
    """A message the SDK refuses before sending (empty topic, body of the wrong type)."""


@dataclass
class Message:
    """A message to send. ``keys`` are indexed (query by key); ``tags`` filter."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0
    delay_level: int = 0
    """1..18 (the broker's ``message_delay_level``): delivered that long after it is stored."""
    deliver_at_ms: int = 0
    """Delivered at this time (ms since the epoch); at most 3 days ahead by default."""

    def _check(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise MessageError("message topic must be a non-empty string")
        if not isinstance(self.body, bytes | bytearray | memoryview):
            raise MessageError(f"message body must be bytes, not {type(self.body).__name__}")
        if isinstance(self.keys, str):
            raise MessageError("message keys must be a list of strings, not one string")
        delay_level, deliver_at_ms = self.delay_level, self.deliver_at_ms
        if (
            type(delay_level) is not int
            or type(deliver_at_ms) is not int
            or delay_level < 0
            or deliver_at_ms < 0
        ):
            for name, value in (("delay_level", delay_level), ("deliver_at_ms", deliver_at_ms)):
                if type(value) is not int or value < 0:
                    raise MessageError(f"message {name} must be a non-negative int, not {value!r}")
        if not delay_level and not deliver_at_ms:
            return
        if delay_level and deliver_at_ms:
            raise MessageError("set delay_level or deliver_at_ms, not both")
        if self.delay_level > MAX_DELAY_LEVEL:
            raise MessageError(
                f"message delay_level {self.delay_level} is not 1..{MAX_DELAY_LEVEL}"
            )

    def _properties(self, trace_context: Mapping[str, str] | None = None) -> Mapping[str, str]:
        """User properties plus the delay ones (RocketMQ's DELAY / TIMER_DELIVER_MS) and
        the producer span's trace context (:mod:`boltmq.kernel.telemetry`)."""
        if not self.delay_level and not self.deliver_at_ms and not trace_context:
            return self.properties
        merged = dict(self.properties)
        if trace_context:
            merged.update(trace_context)
        if self.delay_level:
            merged[PROPERTY_DELAY] = str(self.delay_level)
        elif self.deliver_at_ms:
            merged[PROPERTY_TIMER_DELIVER_MS] = str(self.deliver_at_ms)
        return merged

    def unique_id(self) -> str:
        """The id a send of this message carries: its ``UNIQ_KEY`` property, else a new one."""
        return self.properties.get(PROPERTY_UNIQ_KEY) or new_unique_id()

    def to_record(
        self,
        born_timestamp_ms: int = 0,
        trace_context: Mapping[str, str] | None = None,
        unique_id: str | None = None,
        compress_over: int = 0,
    ) -> bytes:
        """The message as a CommitLog record, the form the SDK sends (encoded once, here).

        ``trace_context``: ``traceparent`` / ``tracestate`` properties to add
        (the message's own properties are left as they are).

        MessageError for what no store would accept (a topic that does not
        encode, property names or values with the \\x01 / \\x02 separators,
        keys with spaces, properties over 32767 bytes).
        ``unique_id``: its ``UNIQ_KEY`` property (:meth:`unique_id`).
        ``compress_over``: a body longer than this many bytes is stored zlib-compressed
        (:mod:`boltmq.wire.body_compression`); 0: never.
        """
        return b"".join(
            self.record_parts(born_timestamp_ms, trace_context, unique_id, compress_over)
        )

    def record_parts(
        self,
        born_timestamp_ms: int = 0,
        trace_context: Mapping[str, str] | None = None,
        unique_id: str | None = None,
        compress_over: int = 0,
    ) -> tuple[bytes, bytes, bytes]:
        """:meth:`to_record` in three parts (head, body, tail): a batch joins every
        message's parts at once (:func:`batch_records`).

        The common message (bytes body, tags at most, no keys, properties, delay or
        trace context) skips the checks and merges below (~0.5 us of ~1.2 us); one
        that send_record_parts refuses takes the full path, which names the error."""
        body, topic = self.body, self.topic
        if not trace_context and self._plain():
            try:
                return send_record_parts(
                    topic,
                    body,
                    self.tags or None,
                    None,
                    None,
                    self.flag,
                    born_timestamp_ms,
                    unique_id,
                    compress_over,
                )
            except (InvalidMessage, TypeError, struct.error):
                pass
        self._check()
        try:
            return send_record_parts(
                self.topic,
                body if type(body) is bytes else bytes(body),
                self.tags or None,
                self.keys,
                self._properties(trace_context),
                self.flag,
                born_timestamp_ms,
                unique_id,
                compress_over,
            )
        except (InvalidMessage, TypeError) as exc:
            raise MessageError(f"message to {self.topic[:60]!r}: {exc}") from None
        except struct.error as exc:  # flag outside int32
            raise MessageError(
                f"message to {self.topic[:60]!r}: flag {self.flag!r}: {exc}"
            ) from None

    def _plain(self) -> bool:
        """Whether the message is the common one: a bytes body, a topic, tags at most (no
        keys, properties or delay), so its record needs no check or merge first."""
        delay_level, deliver_at_ms = self.delay_level, self.deliver_at_ms
        return (
            type(self.body) is bytes
            and type(self.topic) is str
            and bool(self.topic)
            and type(self.keys) is tuple
            and not self.keys
            and not self.properties
            and type(delay_level) is int
            and type(deliver_at_ms) is int
            and not (delay_level or deliver_at_ms)
        )

    def to_proto(self, queue_id: int = -1) -> message_pb2.Message:
        """The message as a protobuf Message (the per-message form other clients send)."""
        self._check()
        proto = message_pb2.Message(
            topic=self.topic,
            queue_id=queue_id,
            body=bytes(self.body),
            flag=self.flag,
            tags=self.tags or "",
        )
        if self.keys:  # empty containers are skipped: most messages have neither
            proto.keys.extend(self.keys)
        properties = self._properties()
        if properties:
            proto.properties.update(properties)
        return proto


def check_messages(msgs: Sequence[Message]) -> None:
    """TypeError naming the type of anything in ``msgs`` that is not a Message."""
    for msg in msgs:
        if not isinstance(msg, Message):
            raise TypeError(f"send takes Message(topic, body) objects, not {type(msg).__name__}")


def batch_records(
    msgs: Sequence[Message],
    born_timestamp_ms: int = 0,
    trace_context: Mapping[str, str] | None = None,
    unique_ids: Sequence[str] | None = None,
    compress_over: int = 0,
) -> bytes:
    """Every message as a CommitLog record, back to back: the body of a batch send
    (the bytes of ``to_record`` of each, joined; the same MessageError).
    ``unique_ids``: one per message (:meth:`Message.unique_id`), or none.
    ``compress_over``: as :meth:`Message.to_record`'s, for each message."""
    if unique_ids is not None and not trace_context and len(msgs) >= COLUMNS_MIN:
        plain = _plain_batch(msgs, born_timestamp_ms, unique_ids, compress_over)
        if plain is not None:
            return plain
    parts: list[bytes] = []
    extend = parts.extend
    if unique_ids is None:
        for msg in msgs:
            extend(msg.record_parts(born_timestamp_ms, trace_context, None, compress_over))
    else:
        for msg, unique_id in zip(msgs, unique_ids, strict=True):
            extend(msg.record_parts(born_timestamp_ms, trace_context, unique_id, compress_over))
    return b"".join(parts)


def _plain_batch(
    msgs: Sequence[Message], born_timestamp_ms: int, unique_ids: Sequence[str], compress_over: int
) -> bytes | None:
    """:func:`batch_records` of messages all of one topic and tags, with a bytes body and
    nothing else (no keys, properties or delay; no body to compress) encoded as columns
    (:mod:`boltmq.wire.send_columns`); None for any other batch."""
    first = msgs[0]
    topic, tags = first.topic, first.tags or None
    bodies: list[bytes] = []
    flags: list[int] = []
    for msg in msgs:
        body = msg.body
        if (
            not msg._plain()
            or msg.topic != topic
            or (msg.tags or None) != tags
            or type(msg.flag) is not int
            or 0 < compress_over < len(body)
        ):
            return None
        bodies.append(body)
        flags.append(msg.flag)
    try:
        return encode_plain_batch(topic, tags, bodies, flags, born_timestamp_ms, unique_ids)
    except (InvalidMessage, TypeError):
        return None  # encoded one by one, the error names the message


def message_unique_ids(msgs: Sequence[Message]) -> list[str]:
    """:meth:`Message.unique_id` of each message, the new ones made together."""
    if len(msgs) == 1:  # a send alone: one id made costs a third of a batch's of one
        return [msgs[0].unique_id()]
    fresh = new_unique_ids(len(msgs))
    return [
        msg.properties.get(PROPERTY_UNIQ_KEY) or made for msg, made in zip(msgs, fresh, strict=True)
    ]


@dataclass(frozen=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker group.

    Its hash is computed once: a consumer of 1,024 queues looks each up in a
    few dicts every pull round, and the generated ``__hash__`` built a tuple
    each time.
    """

    topic: str
    broker_name: str
    queue_id: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.broker_name, self.queue_id)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[MessageQueue], tuple[str, str, int]]:
        # Pickled by its fields: a string's hash differs between processes.
        return MessageQueue, (self.topic, self.broker_name, self.queue_id)

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}/{self.queue_id}"


class SendStatus(enum.Enum):
    """How a send ended (RocketMQ's SendStatus); anything but SEND_OK is still stored
    except SEND_FAILED."""

    SEND_OK = broker_pb2.SEND_OK
    FLUSH_DISK_TIMEOUT = broker_pb2.SEND_FLUSH_DISK_TIMEOUT
    FLUSH_SLAVE_TIMEOUT = broker_pb2.SEND_FLUSH_SLAVE_TIMEOUT
    SLAVE_NOT_AVAILABLE = broker_pb2.SEND_SLAVE_NOT_AVAILABLE
    SEND_FAILED = broker_pb2.SEND_FAILED


class SendResult(NamedTuple):
    """The outcome of one message's send (immutable).

    A named tuple rather than a frozen dataclass: a batch builds one per message,
    and a frozen dataclass's ``__init__`` costs four times as much (about 1 us
    against 0.25 us a result, measured with ``timeit``).
    """

    status: SendStatus
    msg_id: str
    queue: MessageQueue
    queue_offset: int
    commitlog_offset: int = -1
    error: str = ""
    put_status: str = "PUT_OK"
    """The store's PutMessageStatus name (why a SEND_FAILED failed)."""
    unique_id: str = ""
    """The producer's id of the message (``UNIQ_KEY``; the module docstring)."""


def send_results(
    response: broker_pb2.SendResponse, unique_ids: Sequence[str] | None = None
) -> list[SendResult]:
    """One SendResult per message of a SendResponse (packed arrays, in order), with
    ``unique_ids`` (one per message) when given."""
    offsets_field = response.commitlog_offsets
    if len(offsets_field) == 1 and not response.errors:  # one message (a send alone)
        offset = offsets_field[0]
        if (
            offset >= 0
            and response.statuses[0] == _SEND_OK
            and response.put_statuses[0] == _PUT_OK
            and len(response.queue_offsets) == 1
            and (unique_ids is None or len(unique_ids) == 1)
        ):
            return [
                tuple.__new__(
                    SendResult,
                    (
                        SendStatus.SEND_OK,
                        f"{response.msg_id_prefix}{offset:016X}",
                        _queue_of(response),
                        response.queue_offsets[0],
                        offset,
                        "",
                        "PUT_OK",
                        unique_ids[0] if unique_ids is not None else "",
                    ),
                )
            ]
    queue = _queue_of(response)
    prefix = response.msg_id_prefix
    offsets = list(response.commitlog_offsets)
    count = len(offsets)
    if (
        not response.errors
        and count
        and (unique_ids is None or len(unique_ids) == count)
        and list(response.statuses).count(_SEND_OK) == count
        and list(response.put_statuses).count(_PUT_OK) == count
        and min(offsets) >= 0
        and len(response.queue_offsets) == count
    ):
        # Every message stored (the usual answer): the columns zipped in C, each msg_id
        # cut from one hex string of every offset (together half the general path's cost).
        hexed = struct.pack(f">{count}Q", *offsets).hex().upper()
        new = tuple.__new__
        return [
            new(SendResult, fields)
            for fields in zip(
                repeat(SendStatus.SEND_OK, count),
                [prefix + hexed[at : at + 16] for at in range(0, 16 * count, 16)],
                repeat(queue, count),
                response.queue_offsets,
                offsets,
                repeat("", count),
                repeat("PUT_OK", count),
                unique_ids if unique_ids is not None else repeat("", count),
                strict=True,
            )
        ]
    errors = response.errors
    status_of = _SEND_STATUSES
    put_name = _PUT_STATUS_NAMES
    make = SendResult._make
    return [
        make(
            (
                status_of[status],
                f"{prefix}{offset:016X}" if offset >= 0 else "",
                queue,
                queue_offset,
                offset,
                errors.get(index, "") if errors else "",
                put_name[put_status],
                unique_id,
            )
        )
        for index, (status, put_status, queue_offset, offset, unique_id) in enumerate(
            zip(
                response.statuses,
                response.put_statuses,
                response.queue_offsets,
                response.commitlog_offsets,
                unique_ids if unique_ids is not None else [""] * len(response.statuses),
                strict=True,
            )
        )
    ]


def _queue_of(response: broker_pb2.SendResponse) -> MessageQueue:
    """The queue a SendResponse answers for (the last few made are kept: a producer's
    results name the same queues over and over)."""
    key = (response.topic, response.broker_name, response.queue_id)
    queue = _QUEUES.get(key)
    if queue is None:
        if len(_QUEUES) >= _QUEUES_MAX:
            _QUEUES.clear()
        queue = _QUEUES[key] = MessageQueue(*key)
    return queue


_QUEUES: dict[tuple[str, str, int], MessageQueue] = {}
_QUEUES_MAX = 4096
_SEND_STATUSES = {status.value: status for status in SendStatus}
_PUT_STATUS_NAMES = {value: name for name, value in message_pb2.PutMessageStatus.items()}
_SEND_OK = SendStatus.SEND_OK.value
_PUT_OK = message_pb2.PutMessageStatus.Value("PUT_OK")


class ConsumeResult(enum.Enum):
    """What a listener returns: SUCCESS (or None) or RECONSUME_LATER (or raise)."""

    SUCCESS = "SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
