"""IndexFile: a hash index from ``topic#key`` to CommitLog offsets.

One file, big-endian, ``40 + slots * 4 + entries * 20`` bytes:

Offset              | Size | Field
--------------------+------+------------------------------------------------------
0                   | 8    | begin_timestamp (store time of the first entry, ms)
8                   | 8    | end_timestamp (store time of the last entry, ms)
16                  | 8    | begin_phy_offset (CommitLog offset of the first entry)
24                  | 8    | end_phy_offset (CommitLog offset of the last entry)
32                  | 4    | hash_slot_count (number of entries in use, as RocketMQ)
36                  | 4    | index_count (next entry number; starts at 1, entry 0 unused)
40                  | 4 x slots   | slot table: number of the newest entry of the slot
40 + slots * 4      | 20 x entries| entries, entry ``n`` at ``40 + slots*4 + n*20``

Entry:

Offset | Size | Field
-------+------+---------------------------------------------------------------
0      | 4    | key_hash: ``abs(java_string_hash(topic + "#" + key))`` (MIN -> 0)
4      | 8    | phy_offset: CommitLog offset of the record
12     | 4    | time_diff_s: seconds between the record's store time and begin_timestamp
16     | 4    | prev_index: the previous entry of the same slot (0 ends the chain)

A key lands in slot ``key_hash % slots``. Queries compare hashes only; the caller
drops collisions by comparing the real key. Files are named by their creation
time, ``yyyyMMddHHmmssSSS``; the number of slots and entries of an existing file
comes from its header and size, so a store can change its configuration.
"""

from __future__ import annotations

import functools
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from boltmq.wire.record import java_hash, java_string_hash
from services.store.mapped_file import MappedFile

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE: Final = 40
assert HEADER.size == HEADER_SIZE
HEADER_BEGIN_TIMESTAMP_OFFSET: Final = 0
HEADER_END_TIMESTAMP_OFFSET: Final = 8
HEADER_BEGIN_PHY_OFFSET_OFFSET: Final = 16
HEADER_END_PHY_OFFSET_OFFSET: Final = 24
HEADER_HASH_SLOT_COUNT_OFFSET: Final = 32
HEADER_INDEX_COUNT_OFFSET: Final = 36

SLOT = struct.Struct(">i")
SLOT_SIZE: Final = 4
assert SLOT.size == SLOT_SIZE

ENTRY = struct.Struct(">iqii")
ENTRY_SIZE: Final = 20
assert ENTRY.size == ENTRY_SIZE
ENTRY_COLUMNS: Final = np.dtype(
    [("hash", ">i4"), ("phy_offset", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")]
)
"""ENTRY as a numpy record (packed, big-endian)."""
assert ENTRY_COLUMNS.itemsize == ENTRY_SIZE
COLUMNS_MIN: Final = 16
"""Entries of one :meth:`IndexFile.put_many` from which they are written as arrays."""

INT32_MAX: Final = 0x7FFFFFFF


class CorruptIndexFile(ValueError):
    """An index file whose header or size does not describe a valid file."""


def key_hash(topic: str, key: str) -> int:
    """The entry hash of ``topic#key``: abs of the Java hash, Integer.MIN_VALUE -> 0."""
    h = java_hash(f"{topic}#{key}")  # uncached: most keys are unique ids, seen once
    return 0 if h == -0x80000000 else abs(h)


def key_hashes(topic: str, keys: Sequence[str]) -> list[int]:
    """:func:`key_hash` of every key, computed together: the keys of one length as a
    matrix of UTF-16 code units times the powers of 31 (each product < 2^48, a row's
    sum < 2^63, so uint64 holds it exactly before the modulo). Every message the SDK
    sends has a unique UNIQ_KEY, so a bulk append hashes a key per record; one at a
    time in Python that cost more than the rest of the append."""
    same = _ascii_key_hashes(topic, keys)
    if same is not None:
        return same
    prefix = f"{topic}#"
    encoded = [(prefix + key).encode("utf-16-le") for key in keys]
    by_length: dict[int, list[int]] = {}
    for at, text in enumerate(encoded):
        by_length.setdefault(len(text) // 2, []).append(at)
    out = [0] * len(encoded)
    for length, places in by_length.items():
        codes = np.frombuffer(b"".join(encoded[at] for at in places), dtype="<u2")
        sums = codes.reshape(len(places), length).astype(np.uint64) @ _powers(length)
        for at, h in zip(places, _entry_hashes(sums), strict=True):
            out[at] = h
    return out


def _ascii_key_hashes(topic: str, keys: Sequence[str]) -> list[int] | None:
    """:func:`key_hashes` of keys all ASCII and of one length (the SDK's unique ids: 32
    hex digits), whose bytes are their UTF-16 code units: one matrix from one encode,
    the topic's ``topic#`` prefix added as its hash times 31^length. None otherwise."""
    if len(keys) < 2:
        return None
    length = len(keys[0])
    if not length or any(len(key) != length for key in keys):
        return None
    joined = "".join(keys)
    if not joined.isascii():
        return None
    return column_key_hashes(
        topic, np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(len(keys), length)
    )


def column_key_hashes(topic: str, codes: npt.NDArray[np.uint8]) -> list[int]:
    """:func:`key_hash` of every key of a ``count x length`` matrix of ASCII bytes, one key
    a row (a :class:`boltmq.wire.key_column.KeyColumn`'s ids): the ``topic#`` prefix
    added as its hash times 31^length."""
    length = codes.shape[1]
    sums = codes.astype(np.uint64) @ _powers(length)
    return _entry_hashes(sums + np.uint64(_prefix_term(topic, length)))


def topics_key_hashes(topics: Sequence[str], keys: Sequence[str]) -> list[int]:
    """:func:`key_hash` of each ``(topics[i], keys[i])``: the keys of the one-record
    sections of an append of many topics, hashed together. Keys all ASCII of one
    length (the SDK's unique ids) are one matrix whatever their topics, each row's
    ``topic#`` prefix added as its hash times 31^length; any others one by one."""
    if len(keys) < 2:
        return [key_hash(topic, key) for topic, key in zip(topics, keys, strict=True)]
    length = len(keys[0])
    joined = "".join(keys)
    if not length or any(len(key) != length for key in keys) or not joined.isascii():
        return [key_hash(topic, key) for topic, key in zip(topics, keys, strict=True)]
    terms = {topic: _prefix_term(topic, length) for topic in dict.fromkeys(topics)}
    codes = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(len(keys), length)
    sums = codes.astype(np.uint64) @ _powers(length)
    prefixes = np.fromiter(map(terms.__getitem__, topics), dtype=np.uint64, count=len(keys))
    return _entry_hashes(sums + prefixes)


@functools.lru_cache(maxsize=4096)
def _prefix_term(topic: str, length: int) -> int:
    """What ``topic#`` adds to the Java hash of ``topic#key`` for a key of ``length``
    code units: its own hash times 31^length, modulo 2^32 (remembered: a store's appends
    hash the same topics' unique ids, of one length, over and over)."""
    term = (java_string_hash(f"{topic}#") & 0xFFFFFFFF) * pow(31, length, 1 << 32)
    return term & 0xFFFFFFFF


@functools.lru_cache(maxsize=4096)
def _powers(length: int) -> npt.NDArray[np.uint64]:
    """31^(length-1) .. 31^0 modulo 2^32, for strings of ``length`` UTF-16 code units
    (kept by length: a store sees few key lengths; read-only, as every caller shares it)."""
    powers = np.array([pow(31, length - 1 - i, 1 << 32) for i in range(length)], dtype=np.uint64)
    powers.setflags(write=False)
    return powers


def _entry_hashes(sums: npt.NDArray[np.uint64]) -> list[int]:
    """Java hashes (as sums modulo 2^32) made entry hashes: the signed int32, then abs,
    with Integer.MIN_VALUE as 0 (:func:`key_hash`'s rule). The cast to uint32 keeps the
    sums modulo 2^32; abs of MIN_VALUE wraps to itself, which the maximum makes 0."""
    signed = sums.astype(np.uint32).view(np.int32)
    hashes: list[int] = np.maximum(np.abs(signed), 0).tolist()
    return hashes


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE


def index_file_name(now_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of ``now_ms`` in local time (as RocketMQ names them)."""
    seconds, millis = divmod(now_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{millis:03d}"


class IndexFile:
    """One index file, mapped read-write."""

    def __init__(
        self, path: Path, slots: int, entries: int, *, create: bool = False, durable: bool = True
    ) -> None:
        self.path = path
        self.slots = slots
        self.max_entries = entries
        size = index_file_size(slots, entries)
        self.mapped = MappedFile(path, size, create=create, durable=durable)
        self.entries_at = HEADER_SIZE + slots * SLOT_SIZE
        """Where entry 0 would begin: the slot table lies before it."""
        self.dirty = False
        self.released_to = 0
        """The index's page-cache window released the pages before this position at
        least once (services/store/index_window.py)."""
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = HEADER.unpack_from(self.mapped.mm, 0)
        if create:
            self.index_count = 1
            self.hash_slot_count = 0
            self._write_header()
        elif self.index_count <= 0:
            self.index_count = 1  # in memory only: opening a file never writes it
        # What is on disk (clean) ends at the last entry: none after a create.
        self.mapped.flushed_position = 0 if create else self.entries_end
        if self.index_count > entries:
            self.mapped.close()
            raise CorruptIndexFile(
                f"{path.name}: index_count {self.index_count} exceeds capacity {entries}"
            )

    @classmethod
    def open_existing(cls, path: Path, default_slots: int) -> IndexFile:
        """Open a file, taking its geometry from the header and the file size."""
        size = path.stat().st_size
        if size < HEADER_SIZE:
            raise CorruptIndexFile(f"{path.name}: {size} bytes is shorter than the header")
        with path.open("rb") as fh:
            header = fh.read(HEADER_SIZE)
        *_, index_count = HEADER.unpack(header)
        for slots in (default_slots, *_slot_counts_fitting(size)):
            room = size - HEADER_SIZE - slots * SLOT_SIZE
            if (
                slots > 0
                and room >= 0
                and room % ENTRY_SIZE == 0
                and room // ENTRY_SIZE >= max(index_count, 1)
            ):
                return cls(path, slots, room // ENTRY_SIZE)
        raise CorruptIndexFile(f"{path.name}: {size} bytes fits no slot/entry geometry")

    # ---------------------------------------------------------------- state
    @property
    def entry_count(self) -> int:
        """Entries in use (index_count counts from 1)."""
        return self.index_count - 1

    def is_full(self) -> bool:
        return self.index_count >= self.max_entries

    @property
    def entries_end(self) -> int:
        """Where the next entry goes: the end of the entries written."""
        return self._entry_pos(self.index_count)

    @property
    def flushed_end(self) -> int:
        """The end of the entries the last flush made durable (the file before it too)."""
        return self.mapped.flushed_position

    def _write_header(self) -> None:
        HEADER.pack_into(
            self.mapped.mm,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def _slot_pos(self, h: int) -> int:
        return HEADER_SIZE + (h % self.slots) * SLOT_SIZE

    def _entry_pos(self, number: int) -> int:
        return self.entries_at + number * ENTRY_SIZE

    # ---------------------------------------------------------------- writes
    def put(self, h: int, phy_offset: int, store_ts: int) -> bool:
        """Add one entry; False when the file is full."""
        return self.put_many((h,), (phy_offset,), store_ts) == 1

    def put_many(self, hashes: Sequence[int], phy_offsets: Sequence[int], store_ts: int) -> int:
        """:meth:`put` of each ``(hash, offset)`` in order, the header written once at
        the end; returns how many fit (the rest go to the next file)."""
        number = self.index_count
        room = min(len(hashes), self.max_entries - number)
        if room <= 0:
            return 0
        if number == 1:
            self.begin_timestamp = store_ts
            self.begin_phy_offset = phy_offsets[0]
        diff = (store_ts - self.begin_timestamp) // 1000
        diff = 0 if diff < 0 else min(diff, INT32_MAX)
        put = self._put_columns if room >= COLUMNS_MIN else self._put_each
        put(hashes[:room], phy_offsets[:room], diff, number)
        number += room
        self.hash_slot_count += number - self.index_count
        self.index_count = number
        if store_ts > self.end_timestamp:
            self.end_timestamp = store_ts
        self.end_phy_offset = phy_offsets[room - 1]
        self._write_header()
        self.dirty = True
        return room

    def _put_each(
        self, hashes: Sequence[int], phy_offsets: Sequence[int], diff: int, number: int
    ) -> None:
        """The entries of a small :meth:`put_many`, one at a time, numbered from ``number``."""
        mm, slots, entries_at = self.mapped.mm, self.slots, self.entries_at
        read_slot, write_slot, write_entry = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
        for h, phy_offset in zip(hashes, phy_offsets, strict=True):
            slot_pos = HEADER_SIZE + (h % slots) * SLOT_SIZE
            prev = read_slot(mm, slot_pos)[0]
            if prev < 0 or prev >= number:
                prev = 0  # a slot pointing at garbage starts a fresh chain
            # Entry first, then the slot (the header after the loop): a concurrent
            # reader that sees the new slot value finds a complete entry behind it.
            write_entry(mm, entries_at + number * ENTRY_SIZE, h, phy_offset, diff, prev)
            write_slot(mm, slot_pos, number)
            number += 1

    def _put_columns(
        self, hashes: Sequence[int], phy_offsets: Sequence[int], diff: int, number: int
    ) -> None:
        """The entries :meth:`put_many`'s loop writes, numbered from ``number``, as
        arrays: every entry in one write, then the slots. An entry's ``prev_index`` is
        the batch's previous entry of its slot, else the slot's value when valid (in
        ``0 .. its own number - 1``, :meth:`_put_each`'s rule), else 0; each slot ends
        pointing at the batch's last entry of it."""
        count = len(hashes)
        keys = np.asarray(hashes, dtype=np.int64)
        slot_of = keys % self.slots
        numbers = number + np.arange(count, dtype=np.int64)
        table = np.ndarray((self.slots,), dtype=">i4", buffer=self.mapped.mm, offset=HEADER_SIZE)
        try:
            prev = table[slot_of].astype(np.int64)
            prev[(prev < 0) | (prev >= numbers)] = 0  # garbage starts a fresh chain
            order = np.argsort(slot_of, kind="stable")  # by slot, then in batch order
            ordered = slot_of[order]
            follows = ordered[1:] == ordered[:-1]
            prev[order[1:][follows]] = numbers[order[:-1][follows]]
            entries = np.empty(count, dtype=ENTRY_COLUMNS)
            entries["hash"] = keys
            entries["phy_offset"] = np.asarray(phy_offsets, dtype=np.int64)
            entries["time_diff"] = diff
            entries["prev"] = prev
            start = self.entries_at + number * ENTRY_SIZE
            # Entries first, then the slots: a concurrent reader that sees a new slot
            # value finds a complete entry behind it.
            self.mapped.mm[start : start + count * ENTRY_SIZE] = entries.tobytes()
            last = np.ones(count, dtype=bool)
            last[:-1] = ~follows
            table[ordered[last]] = numbers[order[last]]
        finally:
            del table  # the mapping cannot close while a view of it lives

    def truncate_to(self, keep_entries: int) -> int:
        """Drop entries numbered above ``keep_entries``; returns how many were dropped.

        Entries are appended in CommitLog order, so the survivors are a prefix.
        Each slot that points at a dropped entry is walked back along its chain
        to the newest surviving entry.
        """
        last = self.index_count - 1
        if keep_entries >= last:
            return 0
        mm = self.mapped.mm
        for number in range(last, keep_entries, -1):
            h = ENTRY.unpack_from(mm, self._entry_pos(number))[0]
            slot_pos = self._slot_pos(h if h >= 0 else 0)
            value = SLOT.unpack_from(mm, slot_pos)[0]
            steps = 0
            while value > keep_entries and steps <= last:
                nxt = ENTRY.unpack_from(mm, self._entry_pos(value))[3] if value <= last else 0
                value = nxt if 0 <= nxt < value else 0
                steps += 1
            SLOT.pack_into(mm, slot_pos, value)
        start = self._entry_pos(keep_entries + 1)
        mm[start : self._entry_pos(last + 1)] = bytes(self._entry_pos(last + 1) - start)
        dropped = last - keep_entries
        self.index_count = keep_entries + 1
        self.mapped.flushed_position = min(self.mapped.flushed_position, self.entries_end)
        self.hash_slot_count = max(0, self.hash_slot_count - dropped)
        if keep_entries == 0:
            self.begin_timestamp = self.end_timestamp = 0
            self.begin_phy_offset = self.end_phy_offset = 0
        else:
            _, phy, diff, _ = ENTRY.unpack_from(mm, self._entry_pos(keep_entries))
            self.end_phy_offset = phy
            self.end_timestamp = self.begin_timestamp + diff * 1000
        self._write_header()
        self.dirty = True
        return dropped

    def entries_until(self, timestamp_ms: int) -> int:
        """How many leading entries surely were stored at or before ``timestamp_ms``.

        Entry times are whole seconds, so an entry of the checkpoint's own second
        counts as after it: cutting a little too much is safe (re-dispatch adds it
        back), keeping an entry whose record may be gone is not.
        """
        mm = self.mapped.mm
        low, high = 0, self.index_count - 1
        while low < high:  # entries are in append order, store times non-decreasing
            mid = (low + high + 1) // 2
            diff = ENTRY.unpack_from(mm, self._entry_pos(mid))[2]
            if self.begin_timestamp + diff * 1000 + 999 <= timestamp_ms:
                low = mid
            else:
                high = mid - 1
        return low

    def entries_below(self, commitlog_offset: int) -> int:
        """How many leading entries point below ``commitlog_offset``."""
        mm = self.mapped.mm
        low, high = 0, self.index_count - 1
        while low < high:  # entries are in CommitLog order
            mid = (low + high + 1) // 2
            if ENTRY.unpack_from(mm, self._entry_pos(mid))[1] < commitlog_offset:
                low = mid
            else:
                high = mid - 1
        return low

    # ---------------------------------------------------------------- reads
    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        return self.begin_timestamp <= end_ms and self.end_timestamp >= begin_ms - 999

    def lookup(self, h: int, max_count: int, begin_ms: int, end_ms: int, out: list[int]) -> None:
        """Append to ``out`` the offsets of entries with hash ``h`` in [begin_ms, end_ms].

        An entry's time is stored in whole seconds, so an entry matches when its
        second overlaps the range; the caller compares exact store times.
        """
        mm = self.mapped.mm
        number = SLOT.unpack_from(mm, self._slot_pos(h))[0]
        limit = self.index_count
        steps = 0
        while 0 < number < limit and len(out) < max_count and steps < limit:
            entry_hash, phy, diff, prev = ENTRY.unpack_from(mm, self._entry_pos(number))
            at = self.begin_timestamp + diff * 1000
            if at + 999 < begin_ms:
                break  # the chain runs newest to oldest: nothing older can match
            if entry_hash == h and at <= end_ms:
                out.append(phy)
            if prev >= number:
                break  # a chain must run backwards; anything else is damage
            number = prev
            steps += 1

    def check(self) -> list[str]:
        """Structural problems of this file (empty when sound)."""
        problems = []
        mm = self.mapped.mm
        limit = self.index_count
        for slot in range(self.slots) if self.slots * 4 <= 1 << 24 else ():
            value = SLOT.unpack_from(mm, HEADER_SIZE + slot * SLOT_SIZE)[0]
            if value < 0 or value >= limit:
                problems.append(
                    f"index {self.path.name}: slot {slot} points at entry {value} of {limit - 1}"
                )
        previous_phy = -1
        for number in range(1, limit):
            h, phy, diff, prev = ENTRY.unpack_from(mm, self._entry_pos(number))
            if h < 0 or diff < 0 or prev < 0 or prev >= number or phy < previous_phy:
                problems.append(
                    f"index {self.path.name}: entry {number} is malformed "
                    f"(hash {h}, offset {phy}, diff {diff}, prev {prev})"
                )
            previous_phy = max(previous_phy, phy)
        return problems

    def entries(self) -> list[tuple[int, int, int, int]]:
        """Every entry (hash, phy_offset, time_diff_s, prev_index), oldest first."""
        mm = self.mapped.mm
        return [ENTRY.unpack_from(mm, self._entry_pos(n)) for n in range(1, self.index_count)]

    # ---------------------------------------------------------------- lifecycle
    def flush(self) -> None:
        """fdatasync the file when anything changed since the last flush.

        Afterwards :attr:`flushed_end` is the end of the entries written before the sync
        began (read first: a writer on another thread may add more meanwhile), the bound
        of what the page-cache window may release.
        """
        if not self.dirty:
            return
        self.dirty = False
        mapped = self.mapped
        mapped.committed_position = self.entries_end
        mapped.flushed_position = 0  # the file syncs whole whatever was synced before
        mapped.flush()

    def hold(self) -> bool:
        return self.mapped.hold()

    def release(self) -> None:
        self.mapped.release()

    def destroy(self, force_after_s: float = 120.0) -> bool:
        return self.mapped.destroy(force_after_s)

    def close(self) -> None:
        self.mapped.close()


def _slot_counts_fitting(size: int) -> list[int]:
    """Slot counts RocketMQ deployments commonly use, tried after the configured one."""
    return [n for n in (5_000_000, 500_000, 50_000, 1000) if HEADER_SIZE + n * SLOT_SIZE <= size]
