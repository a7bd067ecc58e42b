"""The CommitLog record's bytes (docs/store-format.md): layout, hosts, topics, bodies, unicode.

What the store writes is compared byte for byte with :func:`spec_record`
(tests/unit/store/record_spec.py), and every field is read back through the
store's own decoder.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable

import pytest

from boltmq.wire.record import (
    MAGIC_MESSAGE,
    MAGIC_MESSAGE_LONG_TOPIC,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_MULTI_TAGS,
    SYS_FLAG_STORE_HOST_V6,
    SYS_FLAG_TRANSACTION_COMMIT,
    CorruptRecord,
    InvalidMessage,
    body_crc,
    decode_host,
    decode_record,
)
from boltmq.wire.record_encoding import encode_host, encode_topic
from services.store import GetStatus, MessageStore, PutStatus, StoreMessage
from tests.unit.store.record_spec import (
    STORE_PORT,
    decode_bytes,
    java_hash_reference,
    spec_properties,
    spec_record,
)

MiB = 1024 * 1024
IPV4_HEAD_BYTES = 88  # total_size .. body_length with two IPv4 hosts
CRC_MASK = 0x7FFFFFFF


def split_properties(raw: bytes) -> dict[str, str]:
    """Parse ``key\\x01value\\x02`` pairs independently of the store's decoder."""
    pairs = [p for p in raw.decode("utf-8").split("\x02") if p]
    return dict(p.split("\x01", 1) for p in pairs)


def stored_bytes(store: MessageStore, offset: int, size: int) -> bytes:
    """The ``size`` bytes the store's CommitLog holds at ``offset``."""
    data = store.commitlog.read_bytes(offset, size)
    assert len(data) == size
    return data


def sound_message(topic: str = "T", **fields: object) -> StoreMessage:
    """A valid message with tags, keys and a property; ``fields`` override them."""
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
