"""RecordBatch: CommitLog records a client encoded itself, sent back to back.

The raw send path: a producer encodes each message once, in the record format
of :mod:`boltmq.wire.record`, the broker checks the headers and forwards the
bytes untouched, and the store verifies every record and patches the fields
only it knows. Records lie back to back with nothing between them; the batch
goes to one topic and one queue. Big-endian, as every record field.

Offset | Size | Field             | the sender writes         | the store writes
-------+------+-------------------+---------------------------+------------------------------
0      | 4    | total_size        | the record's size         | (checked)
4      | 4    | magic             | 0xDAA320A7 (0xDAA320AB)   | (checked)
8      | 4    | body_crc          | crc32(body) & 0x7FFFFFFF  | (checked before the append)
12     | 4    | queue_id          | anything                  | the batch's queue
16     | 4    | flag              | the user flag             | (kept)
20     | 8    | queue_offset      | anything                  | the queue's next offset
28     | 8    | physical_offset   | anything                  | the record's CommitLog offset
36     | 4    | sys_flag          | 0 or 0x301 (zlib body)    | (kept)
40     | 8    | born_timestamp    | ms (0: the store's clock) | the store's clock when 0
48     | 8    | born_host         | 8 placeholder bytes       | the producer's address
56     | 8    | store_timestamp   | anything                  | the store's clock
64     | 8    | store_host        | 8 placeholder bytes       | the store's address
72     | ...  | reconsume_times .. properties, as in the record format (kept)

Raw records always use the IPv4 host layout (8-byte hosts): the sender does
not know its address as the store sees it, nor the store's, so both are
placeholders of fixed size, and a store whose hosts need the 20-byte IPv6 form
re-encodes the batch message by message instead (:func:`decode_batch`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from boltmq.wire.body_compression import compress_body
from boltmq.wire.record import (
    FIXED_OVERHEAD_IPV4,
    HEADS,
    HOST_V6_BITS,
    MAX_PROPERTIES_BYTES,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SHORT,
    CorruptRecord,
    InvalidMessage,
    RecordHead,
    body_crc,
    decode_properties,
    decode_record,
    tags_code,
)
from boltmq.wire.record_encoding import (
    encode_host,
    encode_properties,
    encode_topic,
    message_properties,
)

RAW_HEAD: Final = HEADS[(False, False)]
"""total_size .. body_length of a raw record (IPv4 host layout), 88 bytes."""
assert RAW_HEAD.size == 88
PATCH: Final = struct.Struct(">iiqqiq8sq8s")
"""What the store writes at PATCH_OFFSET: queue_id, flag, queue_offset, physical_offset,
sys_flag, born_timestamp, born_host, store_timestamp, store_host (one pack_into)."""
PATCH_OFFSET: Final = 12
assert PATCH_OFFSET + PATCH.size == RAW_HEAD.size - 16  # reconsume, prepared, body_len follow
HOST_PLACEHOLDER: Final = bytes(8)
RAW_BORN_HOST_DEFAULT: Final = encode_host("127.0.0.1", 0)
"""The born host of raw records when the caller names none (as a store Message's default)."""
RECORDS_MAX: Final = 16_384
"""Records in one batch at most (the store's Append limit)."""
_TOTAL = struct.Struct(">i")

# Head tuple indexes (RAW_HEAD field order), literal so that a RecordHead indexed with
# one has that field's type.
H_TOTAL: Final = 0
H_MAGIC: Final = 1
H_CRC: Final = 2
H_QUEUE_ID: Final = 3
H_FLAG: Final = 4
H_QUEUE_OFFSET: Final = 5
H_PHYSICAL: Final = 6
H_SYS_FLAG: Final = 7
H_BORN_TS: Final = 8
H_BORN_HOST: Final = 9
H_STORE_TS: Final = 10
H_STORE_HOST: Final = 11
H_RECONSUME: Final = 12
H_PREPARED: Final = 13
H_BODY_LEN: Final = 14


class MalformedBatch(CorruptRecord):
    """The records of a batch cannot be told apart (sizes that do not tile the bytes)."""


class PropertiesTooLarge(InvalidMessage):
    """A record's properties exceed 32767 bytes (PROPERTIES_SIZE_EXCEEDED)."""


@dataclass(frozen=True, slots=True)
class RecordBatch:
    """``count`` raw records for ``topic`` / ``queue_id`` (see the module docstring)."""

    records: bytes
    count: int
    topic: str
    queue_id: int

    def __len__(self) -> int:
        return self.count


# --------------------------------------------------------------------------- encode


_tails: dict[tuple[str, str | None], tuple[bytes, bytes, bytes, int]] = {}
"""(topic, tags) -> (tail, topic field, properties section, magic) of the records with
no keys or other properties."""
_TAILS_MAX: Final = 4096


def plain_tail(topic: str, tags: str | None) -> tuple[bytes, bytes, bytes, int]:
    """(tail, topic field, properties section, magic) of a record of ``topic`` with ``tags``
    at most (no keys, no other properties), cached; InvalidMessage as
    :func:`send_record_parts` raises it."""
    cached = _tails.get((topic, tags))
    if cached is None:
        topic_field, magic = encode_topic(topic)
        properties_raw = encode_properties(message_properties(tags, None, None))
        cached = (_tail(topic_field, properties_raw), topic_field, properties_raw, magic)
        if len(_tails) < _TAILS_MAX:
            _tails[(topic, tags)] = cached
    return cached


def encode_send_record(
    topic: str,
    body: bytes,
    tags: str | None = None,
    keys: Iterable[str] | None = None,
    properties: Mapping[str, str] | None = None,
    flag: int = 0,
    born_timestamp_ms: int = 0,
) -> bytes:
    """One raw record of a message (placeholders where the store writes).

    InvalidMessage for what no store would accept: a topic that does not
    encode, separators in properties, bad keys, properties over 32767 bytes.
    """
    return b"".join(send_record_parts(topic, body, tags, keys, properties, flag, born_timestamp_ms))


def send_record_parts(
    topic: str,
    body: bytes,
    tags: str | None = None,
    keys: Iterable[str] | None = None,
    properties: Mapping[str, str] | None = None,
    flag: int = 0,
    born_timestamp_ms: int = 0,
    unique_id: str | None = None,
    compress_over: int = 0,
) -> tuple[bytes, bytes, bytes]:
    """:func:`encode_send_record` as its three parts (head, body, tail), so a batch
    joins all of its records' parts at once (one copy of each body, not two).

    ``unique_id``: the message's UNIQ_KEY property (:mod:`boltmq.unique_id`),
    added to the others (it replaces a UNIQ_KEY among ``properties``).
    ``compress_over``: a body longer than this is stored zlib-compressed, with the
    sys_flag bits saying so (:mod:`boltmq.wire.body_compression`); 0: never."""
    if keys or properties:
        topic_field, magic = encode_topic(topic)
        if unique_id:
            properties = {**(properties or {}), PROPERTY_UNIQ_KEY: unique_id}
        tail = _tail(topic_field, encode_properties(message_properties(tags, keys, properties)))
    else:
        # Most messages carry tags at most: the tail depends on (topic, tags) alone,
        # but for the unique id, appended as one more property.
        tail, topic_field, properties_raw, magic = plain_tail(topic, tags)
        if unique_id:
            properties_raw += _unique_id_pair(unique_id)
            tail = _tail(topic_field, properties_raw)
    sys_flag = 0
    if compress_over > 0 and len(body) > compress_over:
        body, sys_flag = compress_body(body, compress_over)
    body_len = len(body)
    return (
        RAW_HEAD.pack(
            RAW_HEAD.size + body_len + len(tail),
            magic,
            body_crc(body),
            0,
            flag,
            0,
            0,
            sys_flag,
            born_timestamp_ms,
            HOST_PLACEHOLDER,
            0,
            HOST_PLACEHOLDER,
            0,
            0,
            body_len,
        ),
        body,
        tail,
    )


_UNIQ_PAIR_HEAD: Final = PROPERTY_UNIQ_KEY.encode() + b"\x01"


def _unique_id_pair(unique_id: str) -> bytes:
    """``UNIQ_KEY\x01<id>\x02`` (what encode_properties makes of it, at a third of its cost:
    every message the SDK sends carries one)."""
    if "\x01" in unique_id or "\x02" in unique_id:
        raise InvalidMessage(f"property {PROPERTY_UNIQ_KEY!r} contains a \\x01 or \\x02 separator")
    try:
        return _UNIQ_PAIR_HEAD + unique_id.encode() + b"\x02"
    except UnicodeEncodeError:
        raise InvalidMessage("properties do not encode as UTF-8") from None


def _tail(topic_field: bytes, properties_raw: bytes) -> bytes:
    if len(properties_raw) > MAX_PROPERTIES_BYTES:
        raise PropertiesTooLarge(
            f"properties are {len(properties_raw)} bytes, at most {MAX_PROPERTIES_BYTES}"
        )
    return topic_field + SHORT.pack(len(properties_raw)) + properties_raw


# --------------------------------------------------------------------------- framing


def uniform_positions(records: bytes | memoryview, count: int) -> list[int] | None:
    """The positions when every record has the same size (fixed-size messages: each
    total_size field compared bytewise in C), else None (then the sizes are followed)."""
    end = len(records)
    if count < 2 or end % count:
        return None
    total = end // count
    if total < FIXED_OVERHEAD_IPV4 or _TOTAL.unpack_from(records, 0)[0] != total:
        return None
    field = bytes(records[0 : _TOTAL.size])
    for at in range(_TOTAL.size):
        if records[at::total] != field[at : at + 1] * count:
            return None
    return list(range(0, end, total))


def frame_records(records: bytes | memoryview, count: int) -> list[int]:
    """The start of each of the ``count`` records; MalformedBatch naming where it breaks.

    Only the sizes are read: the records must tile the bytes exactly.
    """
    if not 0 < count <= RECORDS_MAX:
        raise MalformedBatch(f"record_count: {count} is not 1..{RECORDS_MAX}")
    uniform = uniform_positions(records, count)
    if uniform is not None:
        return uniform
    end = len(records)
    positions = []
    position = 0
    unpack = _TOTAL.unpack_from
    for index in range(count):
        if position + FIXED_OVERHEAD_IPV4 > end:
            raise MalformedBatch(
                f"records[{index}]: the bytes end at {end}, before record "
                f"{index} of {count} (at byte {position})"
            )
        total = unpack(records, position)[0]
        if total < FIXED_OVERHEAD_IPV4 or position + total > end:
            raise MalformedBatch(
                f"records[{index}]: total_size {total} at byte {position} "
                f"does not fit the {end} bytes of the batch"
            )
        positions.append(position)
        position += total
    if position != end:
        raise MalformedBatch(
            f"records: {end - position} bytes after the {count} records "
            f"(record_count too small, or a total_size wrong)"
        )
    return positions


# --------------------------------------------------------------------------- checks


def check_header(
    records: bytes | memoryview,
    position: int,
    total: int,
    topic_field: bytes,
    magic: int,
    max_body_bytes: int,
) -> RecordHead:
    """The head tuple of the record at ``position`` after checking its framing.

    Checks magic, host layout, that body, topic and properties add up to
    ``total``, that the topic is the batch's and the body 1..max_body_bytes
    long. Reads headers only (no CRC, no properties parse): what the broker
    needs. InvalidMessage / CorruptRecord / PropertiesTooLarge otherwise.
    """
    head = RAW_HEAD.unpack_from(records, position)
    if head[H_MAGIC] != magic:
        raise CorruptRecord(f"magic 0x{head[H_MAGIC]:08X} is not 0x{magic:08X}")
    if head[H_SYS_FLAG] & HOST_V6_BITS:
        raise InvalidMessage(
            "sys_flag has IPv6 host bits: raw records carry 8-byte host placeholders"
        )
    body_len = head[H_BODY_LEN]
    if body_len <= 0 or body_len > max_body_bytes:
        raise InvalidMessage(f"body is {body_len} bytes, must be 1..{max_body_bytes}")
    cursor = position + RAW_HEAD.size + body_len
    topic_end = cursor + len(topic_field)
    if topic_end + 2 > position + total:
        raise CorruptRecord(
            f"body of {body_len} bytes leaves no room for topic and "
            f"properties in total_size {total}"
        )
    if records[cursor:topic_end] != topic_field:
        raise InvalidMessage(
            f"topic {_topic_text(records, cursor)!r} is not the batch's "
            f"topic {topic_field[1:].decode()!r}"
        )
    properties_len = SHORT.unpack_from(records, topic_end)[0]
    if properties_len > MAX_PROPERTIES_BYTES:
        raise PropertiesTooLarge(
            f"properties are {properties_len} bytes, at most {MAX_PROPERTIES_BYTES}"
        )
    if topic_end + 2 + properties_len != position + total:
        raise CorruptRecord(
            f"sections add up to {topic_end + 2 + properties_len - position} "
            f"bytes, total_size says {total}"
        )
    return head


def _topic_text(records: bytes | memoryview, cursor: int) -> str:
    length = records[cursor]
    return bytes(records[cursor + 1 : cursor + 1 + length]).decode("utf-8", "replace")[:60]


# A record checked by the store: (position, total, head, tags_code, index_keys, consumable).
Checked = tuple[int, int, RecordHead, int, tuple[str, ...], bool]
_derived: dict[bytes, tuple[int, tuple[str, ...]]] = {}
_DERIVED_MAX: Final = 4096


def derive_properties(properties_raw: bytes) -> tuple[int, tuple[str, ...]]:
    """(tags code, index keys) of an encoded properties section, which it validates.

    CorruptRecord when the section does not decode. Memoised for the keyless
    sections, which most records repeat (same tags, no keys): the store's
    appends, the replica's chunks and recovery all look them up here.
    """
    derived = _derived.get(properties_raw)
    if derived is None:
        props = decode_properties(properties_raw)
        index_keys = index_keys_of(props)
        derived = (tags_code(props.get(PROPERTY_TAGS)), index_keys)
        if not index_keys and len(_derived) < _DERIVED_MAX:
            _derived[properties_raw] = derived
    return derived


def index_keys_of(props: Mapping[str, str]) -> tuple[str, ...]:
    """The IndexFile keys of a message: its KEYS (space-separated), then its UNIQ_KEY."""
    keys = props.get(PROPERTY_KEYS)
    uniq = props.get(PROPERTY_UNIQ_KEY)
    result = tuple(keys.split(" ")) if keys else ()
    return (*result, uniq) if uniq else result


def decode_batch(batch: RecordBatch, checked: Iterable[Checked]) -> list[RawMessage]:
    """The checked records as messages for the per-message append (the store's path
    when its hosts need the IPv6 form)."""
    view = memoryview(batch.records)
    out = []
    for position, *_ in checked:
        record = decode_record(view, position, check_crc=False, copy_body=True)
        out.append(
            RawMessage(
                record.topic,
                bytes(record.body),
                batch.queue_id,
                record.properties,
                record.flag,
                record.sys_flag,
                record.born_timestamp,
                record.reconsume_times,
                record.prepared_transaction_offset,
            )
        )
    return out


@dataclass(slots=True)
class RawMessage:
    """A raw record as a message the per-message append path reads."""

    topic: str
    body: bytes
    queue_id: int
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp: int
    reconsume_times: int
    prepared_transaction_offset: int
    tags: None = None
    keys: None = None


def select(batch: RecordBatch, positions: list[int], keep: Iterable[int]) -> RecordBatch:
    """A batch of only the records at indexes ``keep`` (the broker drops refused ones)."""
    view = memoryview(batch.records)
    ends = positions[1:] + [len(batch.records)]
    parts = [view[positions[i] : ends[i]] for i in keep]
    return RecordBatch(b"".join(parts), len(parts), batch.topic, batch.queue_id)
