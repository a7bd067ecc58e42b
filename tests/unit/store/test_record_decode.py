"""Decoding bad bytes: garbage and damaged records only ever raise CorruptRecord.

Sound records come from :func:`spec_record` (tests/unit/store/record_spec.py);
random bytes and mutations of them must decode within their bounds or raise
:class:`boltmq.wire.record.CorruptRecord`, never anything else.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import MAGIC_BLANK, CorruptRecord, RecordView, decode_record
from tests.unit.store.record_spec import decode_bytes, spec_properties, spec_record

GARBAGE_EXAMPLES = 400
MUTATION_EXAMPLES = 300


def _touch_everything(record: RecordView) -> None:
    """Read every decoded field; parsing failures may only be CorruptRecord."""
    for name in (
        "total_size",
        "magic",
        "body_crc",
        "queue_id",
        "flag",
        "queue_offset",
        "commitlog_offset",
        "sys_flag",
        "born_timestamp",
        "store_timestamp",
        "reconsume_times",
        "prepared_transaction_offset",
        "topic",
    ):
        getattr(record, name)
    record.body_bytes()
    record.born_host, record.store_host, record.msg_id  # noqa: B018
    record.properties, record.tags, record.keys  # noqa: B018


def _decode_or_corrupt(raw: bytes, pos: int, check_crc: bool) -> RecordView | None:
    try:
        record = decode_record(memoryview(raw), pos, check_crc=check_crc)
        _touch_everything(record)
    except CorruptRecord:
        return None
    return record


@settings(max_examples=GARBAGE_EXAMPLES, deadline=None)
@given(raw=st.binary(max_size=400), pos=st.integers(-4, 420), check_crc=st.booleans())
def test_garbage_bytes_only_ever_raise_corrupt_record(
    raw: bytes, pos: int, check_crc: bool
) -> None:
    record = _decode_or_corrupt(raw, pos, check_crc)
    if record is not None:
        assert 0 <= pos and pos + record.total_size <= len(raw)


_SOUND_RECORDS = [
    spec_record(
        topic="T",
        body=b"0123456789",
        properties_raw=spec_properties({"TAGS": "a", "KEYS": "k1 k2"}),
        physical_offset=64,
    ),
    spec_record(
        topic="L" * 200,
        body=b"",
        born=("::1", 5),
        store=("2001:db8::2", 6),
        properties_raw=spec_properties({"p": "q"}),
    ),
]


@settings(max_examples=MUTATION_EXAMPLES, deadline=None)
@given(
    which=st.sampled_from(range(len(_SOUND_RECORDS))),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    cut=st.integers(0, 10_000),
    check_crc=st.booleans(),
)
def test_damaged_records_only_ever_raise_corrupt_record(
    which: int, edits: list[tuple[int, int]], cut: int, check_crc: bool
) -> None:
    raw = bytearray(_SOUND_RECORDS[which])
    for position, value in edits:
        raw[position % len(raw)] = value
    damaged = bytes(raw[: max(1, len(raw) - cut % 40)])
    record = _decode_or_corrupt(damaged, 0, check_crc)
    if record is not None:
        assert record.total_size <= len(damaged)


def test_sound_records_decode_and_a_blank_marker_does_not() -> None:
    for raw in _SOUND_RECORDS:
        assert decode_bytes(raw).total_size == len(raw)
    assert decode_bytes(_SOUND_RECORDS[1]).sys_flag == 0x30
    blank = struct.pack(">iI", 200, MAGIC_BLANK) + bytes(192)
    with pytest.raises(CorruptRecord):
        decode_bytes(blank)
    with pytest.raises(CorruptRecord):
        decode_bytes(_SOUND_RECORDS[0][:-1])  # one byte short of total_size
