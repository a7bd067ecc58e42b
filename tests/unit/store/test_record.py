"""The CommitLog record (docs/store-format.md), MessageId, properties, hashes and topic names.

Expected bytes come from :func:`spec_record`, an encoder written in this file
straight from the table in docs/store-format.md (stdlib ``struct``, ``zlib`` and
``ipaddress`` only), so the store's encoder and decoder are checked against the
documented format rather than against themselves. Java ``String.hashCode()``
values are literal constants known from Java, plus a reference implementation
over UTF-16 code units for the property-based check.
"""

from __future__ import annotations

import ipaddress
import random
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import (
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    MAGIC_MESSAGE_LONG_TOPIC,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_MULTI_TAGS,
    SYS_FLAG_STORE_HOST_V6,
    SYS_FLAG_TRANSACTION_COMMIT,
    CorruptRecord,
    InvalidMessage,
    RecordView,
    body_crc,
    decode_host,
    decode_properties,
    decode_record,
    java_string_hash,
    make_msg_id,
    parse_msg_id,
    tags_code,
)
from boltmq.wire.record_encoding import encode_host, encode_properties, encode_topic
from boltmq.wire.topic import (
    InvalidSubscription,
    InvalidTopic,
    parse_subscription,
    validate_topic,
)
from services.store import GetStatus, MessageStore, PutStatus, StoreMessage

MiB = 1024 * 1024
STORE_PORT = 10911  # StoreConfig's default store port
IPV4_HEAD_BYTES = 88  # total_size .. body_length with two IPv4 hosts
CRC_MASK = 0x7FFFFFFF
INT32_MIN = -(2**31)
GARBAGE_EXAMPLES = 400
MUTATION_EXAMPLES = 300


# --------------------------------------------------------------------------- spec encoder


def spec_host(host: str, port: int) -> bytes:
    """The record's host field: 4 or 16 address bytes + 4-byte port."""
    return ipaddress.ip_address(host).packed + struct.pack(">i", port)


def spec_properties(properties: dict[str, str]) -> bytes:
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode("utf-8")


def spec_record(
    *,
    topic: str,
    body: bytes,
    properties_raw: bytes = b"",
    queue_id: int = 0,
    flag: int = 0,
    queue_offset: int = 0,
    physical_offset: int = 0,
    sys_flag: int = 0,
    born_timestamp: int = 0,
    born: tuple[str, int] = ("127.0.0.1", 1),
    store_timestamp: int = 0,
    store: tuple[str, int] = ("127.0.0.1", 2),
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
) -> bytes:
    """A record laid out field by field from the table in docs/store-format.md."""
    born_raw, store_raw = spec_host(*born), spec_host(*store)
    if len(born_raw) == 20:
        sys_flag |= 0x10
    if len(store_raw) == 20:
        sys_flag |= 0x20
    topic_raw = topic.encode("utf-8")
    if len(topic_raw) > 127:
        magic, topic_field = 0xDAA320AB, struct.pack(">H", len(topic_raw)) + topic_raw
    else:
        magic, topic_field = 0xDAA320A7, struct.pack(">B", len(topic_raw)) + topic_raw
    after_size = b"".join(
        (
            struct.pack(">I", magic),
            struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF),
            struct.pack(">i", queue_id),
            struct.pack(">i", flag),
            struct.pack(">q", queue_offset),
            struct.pack(">q", physical_offset),
            struct.pack(">i", sys_flag),
            struct.pack(">q", born_timestamp),
            born_raw,
            struct.pack(">q", store_timestamp),
            store_raw,
            struct.pack(">i", reconsume_times),
            struct.pack(">q", prepared_transaction_offset),
            struct.pack(">i", len(body)),
            body,
            topic_field,
            struct.pack(">H", len(properties_raw)),
            properties_raw,
        )
    )
    return struct.pack(">i", 4 + len(after_size)) + after_size


def split_properties(raw: bytes) -> dict[str, str]:
    """Parse ``key\\x01value\\x02`` pairs independently of the store's decoder."""
    pairs = [p for p in raw.decode("utf-8").split("\x02") if p]
    return dict(p.split("\x01", 1) for p in pairs)


def java_hash_reference(text: str) -> int:
    """``String.hashCode()``: h = 31*h + unit over UTF-16 code units, as a signed int32."""
    raw = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", raw):
        h = (31 * h + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def stored_bytes(store: MessageStore, offset: int, size: int) -> bytes:
    data = store.commitlog.read_bytes(offset, size)
    assert len(data) == size
    return data


def decode_bytes(raw: bytes, pos: int = 0) -> RecordView:
    return decode_record(memoryview(raw), pos, copy_body=True)


def sound_message(topic: str = "T", **fields: object) -> StoreMessage:
    values: dict[str, object] = dict(
        topic=topic, body=b"payload", tags="TagA", keys=["k1", "k2"], properties={"color": "blue"}
    )
    values.update(fields)
    return StoreMessage(**values)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- layout


def test_stored_bytes_follow_the_documented_layout(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    store.put_message(StoreMessage(topic="Warmup", body=b"x"))  # the record under test is not at 0
    msg = StoreMessage(
        topic="Orders",
        body=b"hello body",
        queue_id=3,
        tags="TagA",
        keys=["k1", "k2"],
        properties={"color": "blue"},
        flag=77,
        sys_flag=SYS_FLAG_MULTI_TAGS,
        born_timestamp=1_700_000_000_123,
        born_host="10.1.2.3",
        born_port=4567,
        reconsume_times=5,
        prepared_transaction_offset=987,
    )
    result = store.put_message(msg)
    assert result.status == PutStatus.PUT_OK
    raw = stored_bytes(store, result.commitlog_offset, result.wrote_bytes)

    topic_field_at = IPV4_HEAD_BYTES + len(msg.body)
    props_len_at = topic_field_at + 1 + len("Orders")
    (props_len,) = struct.unpack_from(">H", raw, props_len_at)
    props_raw = raw[props_len_at + 2 :]
    assert len(props_raw) == props_len
    assert split_properties(props_raw) == {"color": "blue", "TAGS": "TagA", "KEYS": "k1 k2"}
    expected = spec_record(
        topic="Orders",
        body=msg.body,
        properties_raw=props_raw,
        queue_id=3,
        flag=77,
        queue_offset=result.queue_offset,
        physical_offset=result.commitlog_offset,
        sys_flag=SYS_FLAG_MULTI_TAGS,
        born_timestamp=1_700_000_000_123,
        born=("10.1.2.3", 4567),
        store_timestamp=result.store_timestamp,
        store=("127.0.0.1", STORE_PORT),
        reconsume_times=5,
        prepared_transaction_offset=987,
    )
    assert raw == expected
    assert result.wrote_bytes == 91 + len(msg.body) + len("Orders") + props_len


@pytest.mark.parametrize("born_host", ["10.0.0.7", "2001:db8::7"])
@pytest.mark.parametrize("store_host", ["127.0.0.1", "::1"])
def test_every_field_round_trips(
    make_store: Callable[..., MessageStore], born_host: str, store_host: str
) -> None:
    store = make_store(store_host=store_host, store_port=9876)
    # The caller's host bits are wrong on purpose: the store derives them from the hosts.
    user_bits = SYS_FLAG_COMPRESSED | SYS_FLAG_MULTI_TAGS | SYS_FLAG_TRANSACTION_COMMIT
    msg = sound_message(
        "Rt",
        body=b"\x00\x01body\xff",
        queue_id=2,
        flag=-5,
        sys_flag=user_bits | SYS_FLAG_BORN_HOST_V6 | SYS_FLAG_STORE_HOST_V6,
        born_timestamp=1_600_000_000_999,
        born_host=born_host,
        born_port=1234,
        reconsume_times=3,
        prepared_transaction_offset=42,
        properties={"color": "blue", "UNIQ_KEY": "U1"},
    )
    result = store.put_message(msg)
    assert result.status == PutStatus.PUT_OK
    born_v6, store_v6 = ":" in born_host, ":" in store_host
    expected_flags = (
        user_bits
        | (SYS_FLAG_BORN_HOST_V6 if born_v6 else 0)
        | (SYS_FLAG_STORE_HOST_V6 if store_v6 else 0)
    )
    head_bytes = IPV4_HEAD_BYTES + (12 if born_v6 else 0) + (12 if store_v6 else 0)

    got = store.get_messages("Rt", 2, 0, 1)
    assert got.status == GetStatus.FOUND
    looked = store.look_message(result.commitlog_offset)
    assert looked is not None
    for record in (got.messages[0], looked):
        assert record.magic == MAGIC_MESSAGE
        assert record.topic == "Rt"
        assert record.body_bytes() == msg.body
        assert record.body_crc == zlib.crc32(msg.body) & CRC_MASK
        assert (record.queue_id, record.flag, record.queue_offset) == (2, -5, 0)
        assert record.commitlog_offset == result.commitlog_offset
        assert record.sys_flag == expected_flags
        assert record.born_timestamp == 1_600_000_000_999
        assert record.store_timestamp == result.store_timestamp
        assert record.born_host == (f"[{born_host}]:1234" if born_v6 else f"{born_host}:1234")
        assert record.store_host == (f"[{store_host}]:9876" if store_v6 else f"{store_host}:9876")
        assert decode_host(record.born_host_raw) == (born_host, 1234)
        assert len(record.born_host_raw) == (20 if born_v6 else 8)
        assert len(record.store_host_raw) == (20 if store_v6 else 8)
        assert (record.reconsume_times, record.prepared_transaction_offset) == (3, 42)
        assert record.tags == "TagA" and record.keys == ["k1", "k2"]
        assert record.properties == {
            "color": "blue",
            "UNIQ_KEY": "U1",
            "TAGS": "TagA",
            "KEYS": "k1 k2",
        }
        assert record.total_size == result.wrote_bytes
        assert record.msg_id == result.msg_id
    assert len(result.msg_id) == (56 if store_v6 else 32)
    raw = stored_bytes(store, result.commitlog_offset, result.wrote_bytes)
    (sys_flag,) = struct.unpack_from(">i", raw, 36)
    assert sys_flag == expected_flags
    (body_len,) = struct.unpack_from(">i", raw, head_bytes - 4)
    assert raw[head_bytes : head_bytes + body_len] == msg.body


def test_host_fields_are_address_bytes_then_port() -> None:
    assert encode_host("192.168.1.2", 258) == bytes([192, 168, 1, 2, 0, 0, 1, 2])
    v6 = encode_host("2001:db8::1", 7)
    assert len(v6) == 20 and v6[:4] == bytes.fromhex("20010db8") and v6[-4:] == b"\0\0\0\x07"
    assert decode_host(v6) == ("2001:db8::1", 7)
    for bad_host, port in (
        ("example.com", 1),
        ("1.2.3", 1),
        ("127.0.0.1", -1),
        ("127.0.0.1", 2**31),
    ):
        with pytest.raises(InvalidMessage):
            encode_host(bad_host, port)


# --------------------------------------------------------------------------- topics in records


def test_long_topic_switches_magic_and_topic_length_width() -> None:
    assert encode_topic("t" * 127) == (bytes([127]) + b"t" * 127, MAGIC_MESSAGE)
    field, magic = encode_topic("t" * 128)
    assert magic == MAGIC_MESSAGE_LONG_TOPIC == 0xDAA320AB
    assert field == b"\x00\x80" + b"t" * 128
    multibyte = "é" * 64  # 64 characters but 128 UTF-8 bytes: the byte length decides
    assert encode_topic(multibyte)[1] == MAGIC_MESSAGE_LONG_TOPIC
    with pytest.raises(InvalidMessage):
        encode_topic("t" * 65536)


@pytest.mark.parametrize("topic_bytes", [127, 128, 300, 65535])
def test_long_topic_record_decodes(topic_bytes: int) -> None:
    topic = "L" * topic_bytes
    props = spec_properties({"TAGS": "x"})
    raw = spec_record(topic=topic, body=b"abc", properties_raw=props, physical_offset=500)
    padded = b"\xee" * 9 + raw + b"\xee" * 5  # decoding must stop at total_size
    record = decode_bytes(padded, 9)
    assert record.topic == topic
    assert record.magic == (MAGIC_MESSAGE if topic_bytes <= 127 else MAGIC_MESSAGE_LONG_TOPIC)
    assert (record.total_size, record.commitlog_offset) == (len(raw), 500)
    assert record.body_bytes() == b"abc" and record.tags == "x"
    length_at = IPV4_HEAD_BYTES + 3
    if topic_bytes > 127:
        assert struct.unpack_from(">H", raw, length_at)[0] == topic_bytes


def test_store_refuses_topics_beyond_127_bytes(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    assert store.put_message(StoreMessage(topic="t" * 127, body=b"x")).status == PutStatus.PUT_OK
    assert (
        store.put_message(StoreMessage(topic="t" * 128, body=b"x")).status
        == PutStatus.MESSAGE_ILLEGAL
    )


# --------------------------------------------------------------------------- bodies and CRC


def test_empty_body_round_trips(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    result = store.put_message(StoreMessage(topic="E", body=b"", tags="t"))
    assert result.status == PutStatus.PUT_OK
    assert result.wrote_bytes == 91 + len("E") + len(spec_properties({"TAGS": "t"}))
    record = store.look_message(result.commitlog_offset)
    assert record is not None
    assert record.body_bytes() == b"" and record.body_crc == 0 and record.tags == "t"
    got = store.get_messages("E", 0, 0)
    assert got.status == GetStatus.FOUND and got.messages[0].body_bytes() == b""


def test_four_mib_body_round_trips(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(max_message_size_bytes=4 * MiB, mapped_file_size_commitlog=8 * MiB)
    body = random.Random(4).randbytes(4 * MiB)
    result = store.put_message(StoreMessage(topic="Big", body=body))
    assert result.status == PutStatus.PUT_OK
    assert result.wrote_bytes == 91 + len("Big") + 4 * MiB
    got = store.get_messages("Big", 0, 0)  # one message is served even above the byte limit
    assert got.status == GetStatus.FOUND
    record = got.messages[0]
    assert record.body_bytes() == body
    assert record.body_crc == zlib.crc32(body) & CRC_MASK
    too_big = store.put_message(StoreMessage(topic="Big", body=body + b"!"))
    assert too_big.status == PutStatus.MESSAGE_ILLEGAL
    assert store.max_offset("Big", 0) == 1


def test_body_crc_drops_the_top_bit(make_store: Callable[..., MessageStore]) -> None:
    body = next(b for i in range(1000) if zlib.crc32(b := f"body-{i}".encode()) & 0x80000000)
    assert body_crc(body) == zlib.crc32(body) & CRC_MASK != zlib.crc32(body)
    store = make_store()
    result = store.put_message(StoreMessage(topic="C", body=body))
    raw = stored_bytes(store, result.commitlog_offset, result.wrote_bytes)
    assert struct.unpack_from(">i", raw, 8)[0] == zlib.crc32(body) & CRC_MASK


def test_a_body_that_does_not_match_its_crc_is_corrupt() -> None:
    raw = bytearray(spec_record(topic="T", body=b"abcdef"))
    raw[IPV4_HEAD_BYTES] ^= 0x01  # first body byte
    with pytest.raises(CorruptRecord, match="CRC"):
        decode_bytes(bytes(raw))
    assert decode_record(memoryview(bytes(raw)), 0, check_crc=False).body_bytes() == b"`bcdef"


# --------------------------------------------------------------------------- unicode


def test_unicode_tags_keys_and_properties_round_trip(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    tag = "标签-A🎯"
    msg = StoreMessage(
        topic="Uni",
        body="тело".encode(),
        tags=tag,
        keys=["ключ", "🔑key"],
        properties={"émoji": "😀 ok"},
    )
    result = store.put_message(msg)
    assert result.status == PutStatus.PUT_OK
    other = store.put_message(StoreMessage(topic="Uni", body=b"other", tags="plain"))
    assert other.status == PutStatus.PUT_OK
    store.wait_dispatched()

    record = store.look_message(result.commitlog_offset)
    assert record is not None
    assert record.tags == tag and record.keys == ["ключ", "🔑key"]
    assert record.properties["émoji"] == "😀 ok"
    assert record.body_bytes().decode() == "тело"
    cq = store.queues.get("Uni", 0)
    assert cq is not None
    assert cq.entry(0) == (result.commitlog_offset, result.wrote_bytes, java_hash_reference(tag))
    got = store.get_messages("Uni", 0, 0, subscription=f"{tag} || nothing")
    assert [m.commitlog_offset for m in got.messages] == [result.commitlog_offset]
    for key in ("ключ", "🔑key"):
        assert [m.msg_id for m in store.query_messages("Uni", key)] == [result.msg_id]


# --------------------------------------------------------------------------- java hash


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("abc", 96354),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", INT32_MIN),  # the well-known Integer.MIN_VALUE string
        ("TagA", ((84 * 31 + 97) * 31 + 103) * 31 + 65),
    ],
)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_java_string_hash_counts_a_surrogate_pair_as_two_units() -> None:
    # U+1F511 is D83D DD11 in UTF-16.
    assert java_string_hash("🔑") == 31 * 0xD83D + 0xDD11
    assert java_string_hash("a🔑") == (97 * 31 + 0xD83D) * 31 + 0xDD11
    assert java_string_hash("\U0001f511") == java_hash_reference("\ud83d\udd11")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_java_string_hash_matches_the_utf16_reference(text: str) -> None:
    h = java_string_hash(text)
    assert h == java_hash_reference(text)
    assert INT32_MIN <= h < 2**31
    assert tags_code(text) == (h if text else 0)


def test_tags_code_is_zero_without_tags() -> None:
    assert tags_code(None) == 0 and tags_code("") == 0


# --------------------------------------------------------------------------- message ids


def test_msg_id_is_store_host_port_and_offset_in_uppercase_hex(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    results = [store.put_message(StoreMessage(topic="Id", body=b"x" * 300)) for _ in range(3)]
    for result in results:
        assert result.msg_id == f"7F000001{STORE_PORT:08X}{result.commitlog_offset:016X}"
        assert result.msg_id == result.msg_id.upper() and len(result.msg_id) == 32
        assert parse_msg_id(result.msg_id) == ("127.0.0.1", STORE_PORT, result.commitlog_offset)
        viewed = store.view_message(result.msg_id)
        assert viewed is not None and viewed.commitlog_offset == result.commitlog_offset
    assert results[2].commitlog_offset > 0


def test_ipv6_msg_id_has_56_characters(make_store: Callable[..., MessageStore]) -> None:
    store = make_store(store_host="fe80::1:2", store_port=7)
    result = store.put_message(StoreMessage(topic="Id6", body=b"x"))
    store.put_message(StoreMessage(topic="Id6", body=b"y"))
    second = store.put_message(StoreMessage(topic="Id6", body=b"z"))
    expected_host = ipaddress.ip_address("fe80::1:2").packed.hex().upper()
    assert second.msg_id == f"{expected_host}00000007{second.commitlog_offset:016X}"
    assert len(result.msg_id) == 56
    assert parse_msg_id(second.msg_id) == ("fe80::1:2", 7, second.commitlog_offset)
    viewed = store.view_message(second.msg_id)
    assert viewed is not None and viewed.body_bytes() == b"z"


@settings(max_examples=200, deadline=None)
@given(
    address=st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)),
    port=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
)
def test_msg_id_round_trips(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, offset: int
) -> None:
    msg_id = make_msg_id(encode_host(str(address), port), offset)
    assert len(msg_id) == (32 if address.version == 4 else 56)
    assert msg_id == msg_id.upper()
    assert parse_msg_id(msg_id) == (str(address), port, offset)


VALID_V4_ID = f"7F000001{STORE_PORT:08X}{16:016X}"


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "7F000001",
        VALID_V4_ID[:-1],
        VALID_V4_ID + "0",
        "G" * 32,
        "7F00000100002A9F000000000000001Z",
        "é" * 32,
        "0x" + VALID_V4_ID[2:],
        VALID_V4_ID + " " * 24,  # 56 characters, but only an IPv4 id's worth of hex
        VALID_V4_ID[:8] + " " + VALID_V4_ID[9:],  # 32 characters with a space in them
    ],
)
def test_malformed_msg_ids_raise_value_error(msg_id: str) -> None:
    with pytest.raises(ValueError):
        parse_msg_id(msg_id)


def test_view_message_rejects_a_malformed_id(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    with pytest.raises(ValueError):
        store.view_message("not-an-id")
    assert store.view_message(VALID_V4_ID) is None  # well formed, nothing stored there


# --------------------------------------------------------------------------- properties


def test_properties_encoding_is_key_sep_value_sep() -> None:
    assert encode_properties({}) == b""
    assert encode_properties({"a": "1", "KEYS": "k1 k2"}) == b"a\x011\x02KEYS\x01k1 k2\x02"
    assert encode_properties({"é": ""}) == "é\x01\x02".encode()
    assert decode_properties(b"a\x011\x02KEYS\x01k1 k2\x02") == {"a": "1", "KEYS": "k1 k2"}
    assert decode_properties(b"") == {}
    assert decode_properties(b"a\x01x\x01y\x02") == {"a": "x\x01y"}


@pytest.mark.parametrize(
    "properties",
    [
        {"": "v"},
        {"a\x01": "v"},
        {"a": "v\x02"},
        {"a": "v\x01w"},
        {"a": 1},
    ],
)
def test_properties_that_cannot_be_encoded(properties: dict[str, object]) -> None:
    with pytest.raises(InvalidMessage):
        encode_properties(properties)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", [b"novalue\x02", b"a\x011\x02junk", b"\xff\xfe\x01x\x02"])
def test_malformed_properties_are_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptRecord):
        decode_properties(raw)


_PROPERTY_TEXT = st.text(
    st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_PROPERTY_TEXT.filter(bool), _PROPERTY_TEXT, max_size=8))
def test_properties_round_trip(properties: dict[str, str]) -> None:
    raw = encode_properties(properties)
    assert raw == spec_properties(properties)
    assert decode_properties(raw) == properties


def test_oversized_properties_and_bad_keys_are_refused(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    fits = {"p": "v" * (32767 - len("p\x01\x02"))}
    assert store.put_message(StoreMessage(topic="P", properties=fits)).status == PutStatus.PUT_OK
    too_big = {"p": "v" * (32768 - len("p\x01\x02"))}
    assert (
        store.put_message(StoreMessage(topic="P", properties=too_big)).status
        == PutStatus.PROPERTIES_SIZE_EXCEEDED
    )
    for keys in (["has space"], [""]):
        assert (
            store.put_message(StoreMessage(topic="P", keys=keys)).status
            == PutStatus.MESSAGE_ILLEGAL
        )
    assert store.max_offset("P", 0) == 1


# --------------------------------------------------------------------------- bad bytes


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


# --------------------------------------------------------------------------- topic names


@pytest.mark.parametrize("topic", ["T", "%RETRY%group-1", "a|b", "Az_09-", "t" * 127])
def test_valid_topics(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "",
        ".",
        "..",
        "/",
        "a/b",
        "../etc",
        "a.b",
        "t" * 128,
        "a b",
        "é",
        "a\x00b",
        "a\tb",
        "\x7f",
        "abc\n",
        "abc\r",
        "\nabc",
    ],
)
def test_invalid_topics(topic: str) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic(topic)


@pytest.mark.parametrize("topic", [None, 5, b"T"])
def test_non_string_topics(topic: object) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic(topic)


@pytest.mark.parametrize("topic", ["..", "a/b", "abc\n"])
def test_store_never_makes_a_directory_for_a_bad_topic(
    make_store: Callable[..., MessageStore], tmp_path: Path, topic: str
) -> None:
    store = make_store()
    assert (
        store.put_message(StoreMessage(topic=topic, body=b"x")).status == PutStatus.MESSAGE_ILLEGAL
    )
    store.wait_dispatched()
    queue_root = tmp_path / "store" / "consumequeue"
    assert not queue_root.exists() or list(queue_root.iterdir()) == []


# --------------------------------------------------------------------------- subscriptions


@pytest.mark.parametrize("expression", ["*", "", None, "  *  ", "tagA || *"])
def test_subscriptions_that_match_everything(expression: str | None) -> None:
    sub = parse_subscription(expression)
    assert sub.matches_all and sub.expression == "*"
    assert sub.matches_code(12345) and sub.matches_tag(None) and sub.matches_tag("x")


def test_tag_subscription() -> None:
    sub = parse_subscription(" tagA ||tagB|| tagC ")
    assert not sub.matches_all
    assert sub.tags == {"tagA", "tagB", "tagC"}
    assert sub.codes == {java_hash_reference(t) for t in ("tagA", "tagB", "tagC")}
    assert sub.matches_tag("tagB") and not sub.matches_tag("tagD") and not sub.matches_tag(None)
    assert sub.matches_code(java_hash_reference("tagC"))
    assert not sub.matches_code(java_hash_reference("tagD")) and not sub.matches_code(0)
    single = parse_subscription("tagA")
    assert single.tags == {"tagA"} and not single.matches_tag("taga")


@pytest.mark.parametrize("expression", ["tagA ||", "|| tagA", "tagA || || tagB", "||"])
def test_subscriptions_with_an_empty_tag_are_invalid(expression: str) -> None:
    with pytest.raises(InvalidSubscription):
        parse_subscription(expression)
