"""Records decoded column by column: the readers' fast path from record bytes to Arrow.

Both readers hold CommitLog records laid back to back in one buffer (a mapped
segment, a pull's raw ``records``). Decoding them one by one costs ~9 us per
row in Python; here only two loops stay per record (:func:`record_starts`
follows the size fields, :meth:`RecordBlock.crc_bad` runs the body CRC) and
every field is taken for all records at once:

- the 88-byte heads (the IPv4 layout of :mod:`boltmq.wire.record`) are
  gathered into one numpy array and read through the store's
  :data:`boltmq.wire.record_heads.HEAD_DTYPE`, a
  big-endian structured view of the same fields;
- topics and property blocks are gathered into Arrow string buffers, and the
  properties are split into tags, keys and the rest with Arrow compute;
- ``msg_id`` is hex-encoded with a lookup table, bodies are cut out of the
  buffer through a ``binary_view`` array pointing into it (one copy, in C++).

A block takes only the common layout: IPv4 hosts, a short topic, sections that
add up to ``total_size``, UTF-8 text. :attr:`RecordBlock.plain` is False for
anything else, and the caller decodes that stretch record by record with the
store's own decoder, which names the damage exactly. The two paths give equal
rows (tests/spark/test_record_columns.py compares them).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from zlib_ng.zlib_ng import crc32

from boltmq.wire.body_compression import CorruptBody, inflate_body
from boltmq.wire.record import (
    BLANK_MARKER_SIZE,
    FIXED_OVERHEAD_IPV4,
    HOST_V6_BITS,
    KEY_SEPARATOR,
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    SYS_FLAG_COMPRESSED,
)
from boltmq.wire.record_batch import RAW_HEAD
from boltmq.wire.record_heads import gather_heads, gather_rows

HEAD_SIZE = RAW_HEAD.size
"""Bytes from total_size to body_length with IPv4 hosts (88)."""

_MSG_ID_PARTS = ((64, 72), (28, 36))
"""Byte ranges of a head that make the offset MessageId: store host + port, then offset."""
_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
_US_PER_MS = 1000
_INLINE_MAX = 12
"""binary_view: values up to 12 bytes live in the view itself, longer ones in a buffer."""
_TOTAL_AND_MAGIC = struct.Struct(">iI")


def record_starts(
    view: memoryview | bytes, position: int, size: int, limit: int, until: int | None = None
) -> tuple[list[int], int]:
    """Where up to ``limit`` records start, from ``position`` on, following size fields.

    Records must end by ``size``; only those starting before ``until`` (default
    ``size``) are listed. Returns ``(starts, next)``: ``next`` is where the walk
    stopped: at or past ``until``, after ``limit`` records, at a blank marker or
    an all-zero header (a segment's unwritten space), or at a size that cannot
    be a record (the caller decodes from there record by record to report it).
    """
    starts: list[int] = []
    unpack = _TOTAL_AND_MAGIC.unpack_from
    append = starts.append
    end = size if until is None else min(until, size)
    previous = 0
    while position < end and position + BLANK_MARKER_SIZE <= size and len(starts) < limit:
        total, magic = unpack(view, position)
        if magic == MAGIC_BLANK or total < FIXED_OVERHEAD_IPV4 or position + total > size:
            break
        append(position)
        position += total
        if total == previous:  # a run of equal sizes: check the next ones at once
            most = min(
                limit - len(starts),
                (min(end, size - total + 1) - position + total - 1) // total,
                _EQUAL_RUN_MAX,
            )
            run = _equal_run(view, position, total, most) if most > 1 else 0
            starts.extend(range(position, position + run * total, total))
            position += run * total
        previous = total
    return starts, position


_EQUAL_RUN_MAX = 4096
"""Records :func:`_equal_run` checks at once at most."""


def _equal_run(view: memoryview | bytes, position: int, total: int, most: int) -> int:
    """How many records of ``total`` bytes follow each other from ``position`` (at most
    ``most``, every one inside the bytes): each size field says ``total`` and no magic
    is a blank marker's. The record-by-record walk takes over after them."""
    data = np.frombuffer(view, dtype=np.uint8)
    at = position + total * np.arange(most, dtype=np.int64)
    words = gather_rows(data, at, _TOTAL_AND_MAGIC.size).view(">u4").reshape(most, 2)
    same = (words[:, 0] == total) & (words[:, 1] != MAGIC_BLANK)
    return most if bool(same.all()) else int(np.argmin(same))


def _gather(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[Any, Any]:
    """``(offsets, bytes)`` of the ragged slices ``data[start:start + length]`` (Arrow buffers)."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    count = int(offsets[-1])
    if count == 0:
        return pa.py_buffer(offsets), pa.py_buffer(b"")
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(count, dtype=np.int64)
    return pa.py_buffer(offsets), pa.py_buffer(data[index])


def _strings(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.StringArray | None:
    """The slices as a string array; None when one of them is not UTF-8."""
    offsets, values = _gather(data, starts, lengths)
    array = pa.StringArray.from_buffers(len(starts), offsets, values)
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return None
    return array


def _counts_to_offsets(counts: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.array(offsets)


def _names_repeat(parents: np.ndarray, names: pa.Array) -> bool:
    """Does a record name one property twice? (``parents``: each name's record)"""
    if len(parents) < 2 or not np.any(parents[1:] == parents[:-1]):
        return False  # one property per record at most
    encoded = pc.dictionary_encode(names)
    pairs = parents * len(encoded.dictionary) + encoded.indices.to_numpy()
    pairs.sort()
    return bool(np.any(pairs[1:] == pairs[:-1]))


class RecordBlock:
    """Records of one buffer, given by their starts, decoded column-wise (module docstring).

    Check :attr:`plain` first: every other member assumes it is True.
    """

    def __init__(self, data: np.ndarray, starts: Sequence[int] | np.ndarray) -> None:
        self.data = data
        self.starts = np.asarray(starts, dtype=np.int64)
        self.heads = gather_heads(data, self.starts)
        self.plain = self._frame()
        self._topics: pa.StringArray | None = None
        self._properties: tuple[pa.Array, pa.Array, pa.Array] | None = None
        if self.plain:
            self.plain = self._decode_text()

    def __len__(self) -> int:
        return len(self.starts)

    def _frame(self) -> bool:
        """Common layout and sections adding up to total_size, for every record."""
        heads, starts, data = self.heads, self.starts, self.data
        if not len(starts):
            return True
        if np.any(heads["magic"] != MAGIC_MESSAGE) or np.any(heads["sys_flag"] & HOST_V6_BITS):
            return False
        ends = starts + heads["total_size"].astype(np.int64)
        body_starts = starts + HEAD_SIZE
        body_lengths = heads["body_length"].astype(np.int64)
        body_ends = body_starts + body_lengths
        if np.any(body_lengths < 0) or np.any(body_ends + 3 > ends):
            return False
        topic_lengths = data[body_ends].astype(np.int64)
        topic_ends = body_ends + 1 + topic_lengths
        if np.any(topic_ends + 2 > ends):
            return False
        property_lengths = (data[topic_ends].astype(np.int64) << 8) | data[topic_ends + 1]
        if np.any(topic_ends + 2 + property_lengths != ends):
            return False
        self.body_starts, self.body_lengths = body_starts, body_lengths
        self.topic_starts, self.topic_lengths = body_ends + 1, topic_lengths
        self.property_starts, self.property_lengths = topic_ends + 2, property_lengths
        return True

    def _decode_text(self) -> bool:
        """Topics and property blocks as Arrow strings; False when one is not UTF-8."""
        if not len(self):
            self._topics = pa.array([], pa.string())
            return True
        self._topics = _strings(self.data, self.topic_starts, self.topic_lengths)
        self._raw_properties = _strings(self.data, self.property_starts, self.property_lengths)
        return (
            self._topics is not None
            and self._raw_properties is not None
            and self._split_properties()
        )

    # ------------------------------------------------------------------ selection
    @property
    def topics(self) -> pa.StringArray:
        assert self._topics is not None
        return self._topics

    def take(self, keep: np.ndarray) -> RecordBlock:
        """The records where ``keep`` (a boolean array) is True."""
        block = object.__new__(RecordBlock)
        block.data = self.data
        block.starts = self.starts[keep]
        block.heads = self.heads[keep]
        block.plain = True
        for name in (
            "body_starts",
            "body_lengths",
            "topic_starts",
            "topic_lengths",
            "property_starts",
            "property_lengths",
        ):
            setattr(block, name, getattr(self, name)[keep])
        mask = pa.array(keep)
        block._topics = self.topics.filter(mask)
        tags, keys, properties = self._split()
        block._properties = (tags.filter(mask), keys.filter(mask), properties.filter(mask))
        return block

    def crc_bad(self) -> np.ndarray:
        """Per record: does the body's CRC differ from the stored one?"""
        bodies = map(
            self.data.data.__getitem__,
            map(slice, self.body_starts.tolist(), (self.body_starts + self.body_lengths).tolist()),
        )
        crcs = np.fromiter(map(crc32, bodies), dtype=np.int64, count=len(self))  # in C
        return (crcs & 0x7FFFFFFF) != self.heads["body_crc"]

    # ------------------------------------------------------------------ properties
    def _split_properties(self) -> bool:
        """tags, keys and the remaining properties map; False for a pair without \\x01."""
        raw = self._raw_properties
        count = len(self)
        pairs = pc.split_pattern(raw, PROPERTY_SEPARATOR)
        parents = pc.list_parent_indices(pairs).to_numpy()
        flat = pairs.flatten()
        filled = pc.greater(pc.binary_length(flat), 0)
        flat = flat.filter(filled)
        parents = parents[filled.to_numpy(zero_copy_only=False)]
        split = pc.split_pattern(flat, NAME_VALUE_SEPARATOR, max_splits=1)
        if len(flat) and pc.min(pc.list_value_length(split)).as_py() != 2:
            return False
        names = pc.list_element(split, 0)
        values = pc.list_element(split, 1)
        if _names_repeat(parents, names):
            return False  # the record-by-record path keeps the last, as a dict does
        tags_at = np.full(count, -1, dtype=np.int64)
        keys_at = np.full(count, -1, dtype=np.int64)
        is_tags = pc.equal(names, PROPERTY_TAGS).to_numpy(zero_copy_only=False)
        is_keys = pc.equal(names, PROPERTY_KEYS).to_numpy(zero_copy_only=False)
        entries = np.arange(len(names), dtype=np.int64)
        tags_at[parents[is_tags]] = entries[is_tags]
        keys_at[parents[is_keys]] = entries[is_keys]
        tags = values.take(pa.array(tags_at, mask=tags_at < 0))
        key_text = values.take(pa.array(keys_at, mask=keys_at < 0))
        key_text = pc.if_else(pc.equal(key_text, ""), pa.scalar(None, pa.string()), key_text)
        key_lists = pc.split_pattern(key_text, KEY_SEPARATOR)
        key_counts = pc.fill_null(pc.list_value_length(key_lists), 0).to_numpy()
        keys = pa.ListArray.from_arrays(_counts_to_offsets(key_counts), key_lists.flatten())
        rest = ~(is_tags | is_keys)
        properties = pa.MapArray.from_arrays(
            _counts_to_offsets(np.bincount(parents[rest], minlength=count)),
            names.filter(pa.array(rest)),
            values.filter(pa.array(rest)),
        )
        self._properties = (tags, keys, properties)
        return True

    def _split(self) -> tuple[pa.Array, pa.Array, pa.Array]:
        assert self._properties is not None
        return self._properties

    # ------------------------------------------------------------------ output
    def msg_ids(self) -> pa.StringArray:
        """Offset MessageIds: store host, port and commitlog offset as uppercase hex."""
        raw = np.concatenate(
            [gather_rows(self.data, self.starts + low, high - low) for low, high in _MSG_ID_PARTS],
            axis=1,
        )
        text = np.empty((len(self), raw.shape[1] * 2), dtype=np.uint8)
        text[:, 0::2] = _HEX[raw >> 4]
        text[:, 1::2] = _HEX[raw & 0x0F]
        offsets = np.arange(0, text.size + 1, text.shape[1], dtype=np.int32)
        return pa.StringArray.from_buffers(len(self), pa.py_buffer(offsets), pa.py_buffer(text))

    def bodies(self) -> pa.Array:
        """The bodies, copied out of the buffer in one pass."""
        count = len(self)
        lengths = self.body_lengths
        views = np.zeros((count, 4), dtype="<i4")
        views[:, 0] = lengths
        inline = lengths <= _INLINE_MAX
        if np.any(inline):
            short = np.flatnonzero(inline)
            index = self.body_starts[short, None] + np.arange(_INLINE_MAX)
            chunk = self.data[np.minimum(index, len(self.data) - 1)]
            chunk[np.arange(_INLINE_MAX) >= lengths[short, None]] = 0
            views[short, 1:] = chunk.view("<i4")
        long = np.flatnonzero(~inline)
        # The data buffer is the stretch the bodies lie in, not the whole mapping.
        low = int(self.body_starts[long].min()) if len(long) else 0
        high = int((self.body_starts[long] + lengths[long]).max()) if len(long) else 0
        views[long, 1] = gather_rows(self.data, self.body_starts[long], 4).view("<i4")[:, 0]
        views[long, 2] = 0
        views[long, 3] = self.body_starts[long] - low
        array = pa.Array.from_buffers(
            pa.binary_view(), count, [None, pa.py_buffer(views), pa.py_buffer(self.data[low:high])]
        ).cast(pa.binary())
        compressed = np.flatnonzero(self.heads["sys_flag"] & SYS_FLAG_COMPRESSED)
        return self._inflated(array, compressed) if len(compressed) else array

    def _inflated(self, array: pa.Array, compressed: np.ndarray) -> pa.Array:
        """``array`` with the bodies at ``compressed`` inflated (:mod:`boltmq.wire.
        body_compression`); CorruptBody naming the record when one does not inflate."""
        bodies = array.to_pylist()
        flags = self.heads["sys_flag"]
        for index in compressed.tolist():
            try:
                bodies[index] = inflate_body(bodies[index], int(flags[index]))
            except CorruptBody as exc:
                head = self.heads[index]
                raise CorruptBody(
                    f"queue {int(head['queue_id'])} offset {int(head['queue_offset'])} "
                    f"(commitlog {int(head['commitlog_offset'])}): {exc}"
                ) from None
        return pa.array(bodies, pa.binary())

    def to_batch(
        self,
        schema: pa.Schema,
        broker_name: str | None,
        *,
        include_body: bool,
        commitlog_extras: bool = False,
        corrupt: np.ndarray | None = None,
    ) -> pa.RecordBatch:
        """The records in ``schema``'s columns (as :class:`~boltmq.spark.schema.RowBuffer`)."""
        heads, count = self.heads, len(self)
        types = schema.types
        tags, keys, properties = self._split()
        columns: list[Any] = [
            self.topics,
            pa.array([broker_name] * count, pa.string()),
            pa.array(heads["queue_id"].astype(np.int32)),
            pa.array(heads["queue_offset"].astype(np.int64)),
            pa.array(heads["commitlog_offset"].astype(np.int64)),
            self.msg_ids(),
            pa.array(heads["born_timestamp"].astype(np.int64) * _US_PER_MS, types[6]),
            pa.array(heads["store_timestamp"].astype(np.int64) * _US_PER_MS, types[7]),
            tags,
            keys.cast(types[9]),
            properties.cast(types[10]),
            self.bodies() if include_body else pa.nulls(count, pa.binary()),
        ]
        if commitlog_extras:
            columns += [
                pa.array(heads["sys_flag"].astype(np.int32)),
                pa.array(heads["reconsume_times"].astype(np.int32)),
            ]
        if corrupt is not None:
            columns.append(pa.array(corrupt))
        return pa.RecordBatch.from_arrays(columns, schema=schema)
