"""Messages between the RocketMQ 5 protocol and BoltMQ's records, both ways.

A protocol ``Message`` becomes a BoltMQ ``Message`` (what SendMessage stores):

=================================  ==============================================
protocol                           BoltMQ
=================================  ==============================================
topic.name                         topic (``resource_namespace`` must be empty)
body (IDENTITY; GZIP unpacked)     body
system_properties.tag / keys       tags / keys
system_properties.message_id       property ``UNIQ_KEY`` (the message id)
system_properties.message_group    property ``__SHARDINGKEY`` (FIFO's group; it also
                                   picks the queue: :func:`queue_of_group`)
system_properties.delivery_ts      property ``TIMER_DELIVER_MS`` (the delay service)
system_properties.trace_context    property ``traceparent`` (BoltMQ's trace context;
                                   W3C traceparent only, another format is dropped)
system_properties.born_timestamp   born_timestamp (ms)
message_type TRANSACTION           sys flag PREPARED (a half message)
user_properties                    properties (none may use a reserved name)
=================================  ==============================================

The back direction (:func:`to_protocol`) turns a stored ``MessageExt`` into the
protocol's message for consumers and transaction check-backs: the properties above
are read back, every other property is a user property, the body gets an MD5 digest
(the clients verify it), and the store's times, hosts, queue and offset are filled
in.

Delivery time: the protocol's ``delivery_timestamp`` is a Timestamp; the official
Python client 5.1.2 writes milliseconds into its ``seconds`` field, so a ``seconds``
beyond 10^11 (the year 5138) is read as milliseconds. A time in the past is
delivered at once; one beyond ``deliver_at_max_delay_ms`` is ILLEGAL_DELIVERY_TIME.
The delay service reaches the time in hops of its delay levels (1 s is the finest).
"""

from __future__ import annotations

import hashlib
import re
import time
import zlib

from google.protobuf import duration_pb2, timestamp_pb2

from boltmq.kernel.telemetry import TRACEPARENT_PROPERTY, TRACESTATE_PROPERTY
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.v1 import message_pb2
from boltmq.wire.record import (
    PROPERTY_DELAY,
    PROPERTY_DELAY_MS,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SYS_FLAG_TRANSACTION_PREPARED,
)
from boltmq.wire.topic import InvalidTopic, validate_topic
from services.broker.delay.delay_message import PROPERTY_TIMER_DELIVER_MS
from services.broker.rocketmq_v2.status import Refused
from services.broker.transaction.half_message import PROPERTY_PGROUP, PROPERTY_TRAN_MSG

PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
"""The message group of a FIFO message (RocketMQ 5's name for it)."""
RESERVED_PROPERTIES = frozenset(
    (
        PROPERTY_KEYS,
        PROPERTY_TAGS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_WAIT,
        PROPERTY_DELAY,
        PROPERTY_DELAY_MS,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QID,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TRAN_MSG,
        PROPERTY_PGROUP,
        PROPERTY_SHARDING_KEY,
        TRACEPARENT_PROPERTY,
        TRACESTATE_PROPERTY,
    )
)
"""Properties BoltMQ sets itself: a user property by one of these names is refused."""
_HIDDEN = RESERVED_PROPERTIES | {"SCHEDULE_SOURCE", "TRAN_OP"}
"""Properties never handed back as user properties."""
_TRACEPARENT = re.compile(r"\A[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}\Z")
_MESSAGE_ID = re.compile(r"\A[0-9A-Za-z_-]{1,128}\Z")
MILLISECONDS_AS_SECONDS = 10**11
"""A delivery ``seconds`` above this is milliseconds (see the module docstring)."""
_TYPES = {
    v2.NORMAL: "NORMAL",
    v2.FIFO: "FIFO",
    v2.DELAY: "DELAY",
    v2.TRANSACTION: "TRANSACTION",
}


def topic_of(resource: v2.Resource, field: str) -> str:
    """The BoltMQ topic a resource names; ILLEGAL_TOPIC naming ``field`` otherwise."""
    if resource.resource_namespace:
        raise Refused(
            v2.BAD_REQUEST,
            f"{field}.resource_namespace: BoltMQ has no namespaces; leave it empty",
        )
    try:
        return validate_topic(resource.name)
    except InvalidTopic as exc:
        raise Refused(v2.ILLEGAL_TOPIC, f"{field}.name: {exc}") from None


def delivery_ms(stamp: timestamp_pb2.Timestamp) -> int:
    """A delivery Timestamp in ms since the epoch (milliseconds-in-seconds read as ms)."""
    if stamp.seconds > MILLISECONDS_AS_SECONDS:
        return stamp.seconds
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def queue_of_group(group: str, queue_count: int) -> int:
    """The queue of a FIFO message group: the same group, the same queue (CRC32)."""
    return zlib.crc32(group.encode()) % queue_count


def to_boltmq(
    message: v2.Message, index: int, max_body_bytes: int, max_delay_ms: int
) -> message_pb2.Message:
    """The BoltMQ message to store for ``message`` (``messages[index]`` of a send)."""
    field = f"messages[{index}]"
    topic = topic_of(message.topic, f"{field}.topic")
    system = message.system_properties
    body = _body(message.body, system.body_encoding, field, max_body_bytes)
    if not _MESSAGE_ID.match(system.message_id):
        raise Refused(
            v2.ILLEGAL_MESSAGE_ID,
            f"{field}.system_properties.message_id: 1..128 letters, digits, '_' or '-'",
        )
    for key in message.user_properties:
        if key in RESERVED_PROPERTIES or not key:
            raise Refused(
                v2.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"{field}.user_properties: {key[:60]!r} is reserved for the broker",
            )
    properties = dict(message.user_properties)
    properties[PROPERTY_UNIQ_KEY] = system.message_id
    if _TRACEPARENT.match(system.trace_context):  # W3C only; another format is dropped
        properties[TRACEPARENT_PROPERTY] = system.trace_context
    sys_flag = _typed(message, field, properties, max_delay_ms)
    return message_pb2.Message(
        topic=topic,
        queue_id=-1,
        body=body,
        tags=system.tag if system.HasField("tag") else "",
        keys=list(system.keys),
        properties=properties,
        born_timestamp=system.born_timestamp.seconds * 1000
        + system.born_timestamp.nanos // 1_000_000,
        sys_flag=sys_flag,
    )


def _body(body: bytes, encoding: int, field: str, max_body_bytes: int) -> bytes:
    if encoding == v2.GZIP:
        try:
            unpacked = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, max_body_bytes + 1)
        except zlib.error as exc:
            raise Refused(v2.MESSAGE_CORRUPTED, f"{field}.body: not gzip ({exc})") from None
        body = unpacked
    elif encoding not in (v2.IDENTITY, v2.ENCODING_UNSPECIFIED):
        raise Refused(v2.BAD_REQUEST, f"{field}.system_properties.body_encoding: {encoding}")
    if not body:
        raise Refused(v2.MESSAGE_BODY_EMPTY, f"{field}.body is empty")
    if len(body) > max_body_bytes:
        raise Refused(
            v2.MESSAGE_BODY_TOO_LARGE,
            f"{field}.body: over {max_body_bytes} bytes (the broker's max_message_size)",
        )
    return body


def _typed(message: v2.Message, field: str, properties: dict[str, str], max_delay_ms: int) -> int:
    """Check the message type against what the message carries, set the properties it
    implies; the sys flag (PREPARED for a transaction's half, else 0)."""
    system = message.system_properties
    kind = system.message_type
    group = system.message_group if system.HasField("message_group") else ""
    delayed = system.HasField("delivery_timestamp")
    if kind not in _TYPES:
        raise Refused(
            v2.UNSUPPORTED,
            f"{field}.system_properties.message_type "
            f"{v2.MessageType.Name(kind) if kind in v2.MessageType.values() else kind}: "
            "BoltMQ serves NORMAL, FIFO, DELAY and TRANSACTION messages",
        )
    name = _TYPES[kind]
    if (kind == v2.FIFO) != bool(group) or (kind == v2.DELAY) != delayed:
        raise Refused(
            v2.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"{field}: a {name} message "
            + ("needs" if kind in (v2.FIFO, v2.DELAY) else "has no")
            + " message_group (FIFO) / delivery_timestamp (DELAY)",
        )
    if group:
        if len(group) > 255:
            raise Refused(v2.ILLEGAL_MESSAGE_GROUP, f"{field}: message_group over 255 characters")
        properties[PROPERTY_SHARDING_KEY] = group
    if delayed:
        due_ms = delivery_ms(system.delivery_timestamp)
        now_ms = int(time.time() * 1000)
        if due_ms - now_ms > max_delay_ms:
            raise Refused(
                v2.ILLEGAL_DELIVERY_TIME,
                f"{field}.system_properties.delivery_timestamp: {due_ms - now_ms} ms ahead, "
                f"at most {max_delay_ms} (deliver_at_max_delay_ms)",
            )
        if due_ms > now_ms:
            properties[PROPERTY_TIMER_DELIVER_MS] = str(due_ms)
    return SYS_FLAG_TRANSACTION_PREPARED if kind == v2.TRANSACTION else 0


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_id_of(ext: message_pb2.MessageExt) -> str:
    """The id a client knows a stored message by: its UNIQ_KEY, else the store's id."""
    return ext.properties.get(PROPERTY_UNIQ_KEY) or ext.msg_id


def to_protocol(
    ext: message_pb2.MessageExt,
    message_type: v2.MessageType.ValueType = v2.NORMAL,
    topic: str = "",
    delivery_attempt: int = 0,
    receipt_handle: str = "",
    invisible_ms: int = 0,
) -> v2.Message:
    """The protocol's message for a stored one (``topic``: the name to show, when the
    record is a copy in another topic, such as a retry)."""
    properties = ext.properties
    group = properties.get(PROPERTY_SHARDING_KEY, "")
    if group:
        message_type = v2.FIFO
    system = v2.SystemProperties(
        keys=list(ext.keys),
        message_id=message_id_of(ext),
        body_digest=v2.Digest(type=v2.MD5, checksum=hashlib.md5(ext.body).hexdigest().upper()),
        body_encoding=v2.IDENTITY,
        message_type=message_type,
        born_timestamp=_timestamp(ext.born_timestamp_ms),
        born_host=ext.born_host.rpartition(":")[0] or ext.born_host,
        store_timestamp=_timestamp(ext.store_timestamp_ms),
        store_host=ext.store_host,
        queue_id=ext.queue_id,
        queue_offset=ext.queue_offset,
    )
    if ext.tags:
        system.tag = ext.tags
    if group:
        system.message_group = group
    if TRACEPARENT_PROPERTY in properties:
        system.trace_context = properties[TRACEPARENT_PROPERTY]
    if delivery_attempt:
        system.delivery_attempt = delivery_attempt
    if receipt_handle:
        system.receipt_handle = receipt_handle
    if invisible_ms:
        system.invisible_duration.CopyFrom(
            duration_pb2.Duration(seconds=invisible_ms // 1000, nanos=invisible_ms % 1000 * 10**6)
        )
    if PROPERTY_TIMER_DELIVER_MS in properties and properties[PROPERTY_TIMER_DELIVER_MS].isdigit():
        system.delivery_timestamp.CopyFrom(_timestamp(int(properties[PROPERTY_TIMER_DELIVER_MS])))
    return v2.Message(
        topic=v2.Resource(name=topic or ext.topic),
        user_properties={k: v for k, v in properties.items() if k not in _HIDDEN},
        system_properties=system,
        body=ext.body,
    )
