"""check_heads (all heads at once, numpy) against check_header (one record at a time).

The vector check must refuse exactly the records the scalar check refuses,
with the same error: batches of good records are mutated byte by byte at
random (Hypothesis) and both checks are run over them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import CorruptRecord, InvalidMessage
from boltmq.wire.record_batch import (
    H_SYS_FLAG,
    RAW_HEAD,
    MalformedBatch,
    check_header,
    encode_send_record,
    frame_records,
)
from boltmq.wire.record_encoding import encode_topic
from boltmq.wire.record_heads import CHECK_COLUMNS_MIN, check_heads, sections_contain
from services.broker.delay.delay_message import DELAY_MARKERS
from tests.unit.store.test_record_batch import TOPIC, bad_records, record

MAX_BODY = 48 * 1024
TOPIC_FIELD, MAGIC = encode_topic(TOPIC)


def scalar(records: bytes, positions: list[int]) -> dict[int, str]:
    ends = [*positions[1:], len(records)]
    refused = {}
    for index, (position, end) in enumerate(zip(positions, ends, strict=True)):
        try:
            check_header(records, position, end - position, TOPIC_FIELD, MAGIC, MAX_BODY)
        except (InvalidMessage, CorruptRecord) as exc:
            refused[index] = f"{type(exc).__name__}: {exc}"
    return refused


def vector(records: bytes, positions: list[int]) -> dict[int, str]:
    checked = check_heads(records, positions, TOPIC_FIELD, MAGIC, MAX_BODY)
    return {i: f"{type(exc).__name__}: {exc}" for i, exc in checked.refused.items()}


@pytest.mark.parametrize("padding", [0, CHECK_COLUMNS_MIN], ids=["one by one", "numpy"])
def test_every_kind_of_bad_header_is_refused_as_check_header_refuses_it(padding: int) -> None:
    good = record(b"g" * 50, tags="t")
    cases = bad_records()
    bad = [raw for raw, _, _ in cases.values()]
    records = b"".join([good, *bad, *[good] * (padding + 1)])
    count = len(bad) + padding + 2
    assert (count >= CHECK_COLUMNS_MIN) == bool(padding)
    positions = frame_records(records, count)
    found = vector(records, positions)
    assert found == scalar(records, positions)
    # CRC and properties contents are the store's checks, not the header's.
    store_only = {"bad crc", "crc field", "broken properties"}
    assert sorted(found) == [i + 1 for i, name in enumerate(cases) if name not in store_only]


@settings(max_examples=300, deadline=None)
@given(
    bodies=st.lists(
        st.binary(min_size=0, max_size=300), min_size=1, max_size=3 * CHECK_COLUMNS_MIN
    ),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=6),
)
def test_random_damage_is_refused_alike(bodies: list[bytes], flips: list[tuple[int, int]]) -> None:
    records = bytearray(
        b"".join(encode_send_record(TOPIC, body or b"-", tags="a") for body in bodies)
    )
    for at, xor in flips:
        records[at % len(records)] ^= xor
    try:
        positions = frame_records(bytes(records), len(bodies))
    except MalformedBatch:
        return  # framing is checked before any head
    assert vector(bytes(records), positions) == scalar(bytes(records), positions)


@pytest.mark.parametrize("count", [2, CHECK_COLUMNS_MIN])
def test_heads_are_the_raw_head_fields(count: int) -> None:
    records = b"".join(record(b"x" * (i + 1), tags="x", keys=[f"k{i}"]) for i in range(count))
    positions = frame_records(records, count)
    checked = check_heads(records, positions, TOPIC_FIELD, MAGIC, MAX_BODY)
    assert checked.heads() == [RAW_HEAD.unpack_from(records, p) for p in positions]
    assert checked.ends == [*positions[1:], len(records)]
    sections = [records[a:b] for a, b in zip(checked.properties_starts, checked.ends, strict=True)]
    assert sections == [f"TAGS\x01x\x02KEYS\x01k{i}\x02".encode() for i in range(count)]


@pytest.mark.parametrize("count", [2, CHECK_COLUMNS_MIN])
def test_flagged_records_are_those_whose_sys_flag_has_a_bit_of_the_mask(count: int) -> None:
    records = bytearray()
    for i in range(count):  # sys flags 0..15 over and over (host bits left alone)
        raw = bytearray(record(b"x" * (i + 1), tags="x"))
        head = list(RAW_HEAD.unpack_from(raw, 0))
        head[H_SYS_FLAG] = i % 16
        RAW_HEAD.pack_into(raw, 0, *head)
        records += raw
    positions = frame_records(bytes(records), count)
    checked = check_heads(bytes(records), positions, TOPIC_FIELD, MAGIC, MAX_BODY)
    assert not checked.refused
    for mask in (0x1, 0x4, 0xC, 0xF):
        assert checked.flagged(mask) == [i for i in range(count) if i % 16 & mask]


@pytest.mark.parametrize("copies", [1, CHECK_COLUMNS_MIN])
@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({}, False),
        ({"DELAY": "3"}, True),
        ({"TIMER_DELIVER_MS": "123"}, True),
        ({"KEYS": "DELAY"}, False),  # the name as a value is no delay
    ],
)
def test_delay_names_are_found_in_properties_sections_only(
    keys: dict[str, str], expected: bool, copies: int
) -> None:
    body_with_marker = b"DELAY\x01" * 10  # in a body: never a delay
    records = encode_send_record(TOPIC, body_with_marker, tags="a") * copies + encode_send_record(
        TOPIC, b"b", properties=keys
    )
    positions = frame_records(records, copies + 1)
    checked = check_heads(records, positions, TOPIC_FIELD, MAGIC, MAX_BODY)
    assert (
        sections_contain(records, checked.properties_starts, checked.ends, DELAY_MARKERS)
        is expected
    )


@pytest.mark.parametrize("delayed_at", [None, 0, CHECK_COLUMNS_MIN - 1])
def test_delay_names_are_found_in_sections_of_one_width(delayed_at: int | None) -> None:
    """Sections all of one width (one producer's batch) are gathered as rows."""
    plain = {"KEYS": "DELAY0"}  # as wide as the delay's section, the name only as a value
    records = b"".join(
        encode_send_record(
            TOPIC, b"DELAY\x01" * 10, properties={"DELAY": "30000"} if i == delayed_at else plain
        )
        for i in range(CHECK_COLUMNS_MIN)
    )
    positions = frame_records(records, CHECK_COLUMNS_MIN)
    checked = check_heads(records, positions, TOPIC_FIELD, MAGIC, MAX_BODY)
    starts, ends = checked.properties_starts, checked.ends
    widths = {end - start for start, end in zip(starts, ends, strict=True)}
    assert len(widths) == 1
    found = sections_contain(records, checked.properties_starts, checked.ends, DELAY_MARKERS)
    assert found is (delayed_at is not None)


def test_no_sections_contain_nothing() -> None:
    empty = np.array([], dtype=np.int64)
    assert not sections_contain(b"DELAY\x01", empty, empty, DELAY_MARKERS)


def test_windows_are_the_overlapping_rows_of_the_data() -> None:
    """Row i of the windows is data[i:i + width], for data laid out byte after byte
    or not (read from a copy); read-only unless asked for and the data allows it."""
    from boltmq.wire.record_heads import byte_windows

    raw = bytearray(range(200))
    writable = np.frombuffer(raw, dtype=np.uint8)
    for data in (np.frombuffer(bytes(raw), dtype=np.uint8), writable, writable[::2]):
        for width in (1, 7, len(data), len(data) + 5):
            windows = byte_windows(data, width, writeable=False)
            assert windows.shape == (max(len(data) - width + 1, 0), width)
            for i in range(0, len(windows), 13):
                assert bytes(windows[i]) == bytes(data[i : i + width])
            assert not windows.flags.writeable
    stamped = byte_windows(writable, 4, writeable=True)
    stamped[10] = [9, 9, 9, 9]
    assert raw[10:14] == b"\t\t\t\t"
    with pytest.raises(ValueError, match="read-only"):
        byte_windows(np.frombuffer(bytes(8), dtype=np.uint8), 4, writeable=True)
    with pytest.raises(ValueError, match="byte after byte"):
        byte_windows(writable[::2], 4, writeable=True)
