"""A batch of plain messages encoded as columns: the SDK's raw records without a loop of packs.

Most batches a producer sends are messages of one topic carrying a body, tags
at most and the unique id the SDK gives each (no keys, no other properties,
no delay, no compression). Their records differ only in the head's size, body
CRC, flag and body length, in the body, and in the ``UNIQ_KEY`` value of the
properties (:mod:`boltmq.wire.record_batch` describes the record). Packed one
message at a time that cost ~1.2 us a message; here the heads of the batch
are one numpy array of ``HEAD_DTYPE`` filled column by column, the tail is the
same bytes for every record but for the id, and the records are joined at
once: the same bytes, at about half the cost
(``tests/unit/sdk/test_send_columns.py`` compares them with
:func:`boltmq.wire.record_batch.send_record_parts` of each message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from boltmq.wire.record import MAX_PROPERTIES_BYTES, PROPERTY_UNIQ_KEY, SHORT, crc32
from boltmq.wire.record_batch import RAW_HEAD, plain_tail
from boltmq.wire.record_heads import HEAD_DTYPE

COLUMNS_MIN: Final = 16
"""Below this many messages the numpy calls cost more than packing each record."""
_ID_HEAD: Final = PROPERTY_UNIQ_KEY.encode() + b"\x01"
_BODY_CRC_MASK: Final = 0x7FFFFFFF


def encode_plain_batch(
    topic: str,
    tags: str | None,
    bodies: Sequence[bytes],
    flags: Sequence[int],
    born_timestamp_ms: int,
    unique_ids: Sequence[str],
) -> bytes | None:
    """The records of messages of ``topic`` with ``tags`` at most, each its body, flag and
    unique id, back to back (what :func:`boltmq.message.batch_records` joins one by
    one). None when the ids are not all ASCII of one length without separators, or a
    flag does not fit a record: the caller encodes those one by one, which names what
    is wrong. InvalidMessage for a topic or tags no store would accept."""
    count = len(bodies)
    if not count or len(flags) != count or len(unique_ids) != count:
        return None
    width = len(unique_ids[0])
    joined = "".join(unique_ids)
    if (
        not width
        or any(len(unique_id) != width for unique_id in unique_ids)
        or not joined.isascii()
        or "\x01" in joined
        or "\x02" in joined
    ):
        return None
    _, topic_field, properties_raw, magic = plain_tail(topic, tags)
    properties_size = len(properties_raw) + len(_ID_HEAD) + width + 1
    if properties_size > MAX_PROPERTIES_BYTES:
        return None
    before_id = topic_field + SHORT.pack(properties_size) + properties_raw + _ID_HEAD
    heads = np.zeros(count, dtype=HEAD_DTYPE)
    try:
        heads["flag"] = flags
    except (OverflowError, ValueError, TypeError):
        return None
    lengths = np.fromiter(map(len, bodies), dtype=np.int64, count=count)
    heads["total_size"] = lengths + (RAW_HEAD.size + len(before_id) + width + 1)
    heads["magic"] = magic
    heads["body_crc"] = np.fromiter(map(crc32, bodies), dtype=np.int64, count=count) & (
        _BODY_CRC_MASK
    )
    heads["born_timestamp"] = born_timestamp_ms
    heads["body_length"] = lengths
    head_bytes = heads.tobytes()
    id_bytes = joined.encode("ascii")
    size = RAW_HEAD.size
    parts: list[bytes] = []
    extend = parts.extend
    for at, body in enumerate(bodies):
        extend(
            (
                head_bytes[at * size : (at + 1) * size],
                body,
                before_id,
                id_bytes[at * width : (at + 1) * width],
                b"\x02",
            )
        )
    return b"".join(parts)
