"""MessageStore puts: where each message goes, and every field read back by every read path.

``put_message`` and ``put_messages`` report queue and CommitLog offsets, sizes,
message ids and store timestamps; a message with every field set (IPv4 and IPv6
hosts) must come back identical through get, look, view and query.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

import pytest

from boltmq.wire.record import (
    FIXED_OVERHEAD_IPV4,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_MULTI_TAGS,
    SYS_FLAG_STORE_HOST_V6,
)
from services.store import GetStatus, MessageStore, PutStatus, StoreMessage
from tests.unit.store.store_api_helpers import STORE_HOST_HEX, fields, put_ok, sample


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_put_message_reports_where_each_message_went(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    plan = [("T", 0), ("T", 0), ("T", 1), ("U", 0), ("T", 0), ("T", 1), ("U", 3)]
    before = now_ms()
    results = [
        store.put_message(StoreMessage(t, body=b"x" * (10 + i), queue_id=q))
        for i, (t, q) in enumerate(plan)
    ]
    after = now_ms()
    assert all(r.status == PutStatus.PUT_OK and r.error == "" for r in results)
    assert [r.queue_offset for r in results] == [0, 1, 0, 0, 2, 1, 0]
    assert [r.wrote_bytes for r in results] == [
        FIXED_OVERHEAD_IPV4 + len(t) + 10 + i for i, (t, _) in enumerate(plan)
    ]
    offsets = [r.commitlog_offset for r in results]
    assert offsets == [sum(r.wrote_bytes for r in results[:i]) for i in range(len(results))]
    assert [r.msg_id for r in results] == [f"{STORE_HOST_HEX}{o:016X}" for o in offsets]
    assert all(before <= r.store_timestamp <= after for r in results)
    assert [store.max_offset(t, q) for t, q in [("T", 0), ("T", 1), ("U", 0), ("U", 3)]] == [
        3,
        2,
        1,
        1,
    ]
    assert store.verify() == []


def test_put_messages_returns_one_result_per_message_in_order(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    first = put_ok(store, [sample(0)])[0]
    batch = [sample(i, queue_id=i % 2) for i in range(1, 41)]
    results = store.put_messages(batch)
    assert len(results) == len(batch)
    assert all(r.status == PutStatus.PUT_OK for r in results)
    offsets = [r.commitlog_offset for r in results]
    assert offsets[0] == first.commitlog_offset + first.wrote_bytes
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    pairs = list(zip(batch, results, strict=True))
    assert [r.queue_offset for m, r in pairs if m.queue_id == 0] == list(range(1, 21))
    assert [r.queue_offset for m, r in pairs if m.queue_id == 1] == list(range(20))
    for msg, result in pairs:
        got = fields(store.look_message(result.commitlog_offset))
        assert (got["body"], got["queue_id"], got["queue_offset"], got["msg_id"]) == (
            msg.body,
            msg.queue_id,
            result.queue_offset,
            result.msg_id,
        )
    assert store.put_messages([]) == []
    assert store.verify() == []


# --------------------------------------------------------------------------- every field


BORN_HOSTS = {
    "ipv4": ("10.1.2.3", "10.1.2.3:4242", 0),
    "ipv6": ("2001:db8::7", "[2001:db8::7]:4242", SYS_FLAG_BORN_HOST_V6),
}
STORE_HOSTS = {
    "ipv4": ("127.0.0.1", "127.0.0.1:10911", 0),
    "ipv6": ("::1", "[::1]:10911", SYS_FLAG_STORE_HOST_V6),
}


@pytest.mark.parametrize("store_host", list(STORE_HOSTS))
@pytest.mark.parametrize("born_host", list(BORN_HOSTS))
def test_every_read_path_returns_every_field(
    make_store: Callable[..., MessageStore], born_host: str, store_host: str
) -> None:
    born_addr, born_text, born_bit = BORN_HOSTS[born_host]
    store_addr, store_text, store_bit = STORE_HOSTS[store_host]
    store = make_store(store_host=store_addr)
    put_ok(store, [sample(i, topic="Orders", queue_id=5) for i in range(3)])
    msg = StoreMessage(
        topic="Orders",
        queue_id=5,
        body=bytes(range(256)) * 3,
        tags="paid",
        keys=["order-17", "cust-3"],
        properties={"UNIQ_KEY": "C0FFEE0001", "region": "eu", "ünï": "çødé ✓"},
        flag=0x1234_5678,
        # The caller's host bits are wrong on purpose: the store derives them.
        sys_flag=SYS_FLAG_COMPRESSED
        | SYS_FLAG_MULTI_TAGS
        | SYS_FLAG_BORN_HOST_V6
        | SYS_FLAG_STORE_HOST_V6,
        born_timestamp=1_700_000_000_123,
        born_host=born_addr,
        born_port=4242,
        reconsume_times=3,
        prepared_transaction_offset=98_765,
    )
    before = now_ms()
    result = store.put_message(msg)
    after = now_ms()
    assert result.status == PutStatus.PUT_OK
    assert result.queue_offset == 3
    host_hex = result.msg_id[:-16]
    assert len(result.msg_id) == (32 if store_host == "ipv4" else 56)
    assert result.msg_id == f"{host_hex}{result.commitlog_offset:016X}"
    assert before <= result.store_timestamp <= after

    expected: dict[str, object] = {
        "topic": "Orders",
        "queue_id": 5,
        "queue_offset": 3,
        "commitlog_offset": result.commitlog_offset,
        "msg_id": result.msg_id,
        "tags": "paid",
        "keys": ["order-17", "cust-3"],
        "properties": {
            "UNIQ_KEY": "C0FFEE0001",
            "region": "eu",
            "ünï": "çødé ✓",
            "TAGS": "paid",
            "KEYS": "order-17 cust-3",
        },
        "flag": 0x1234_5678,
        "sys_flag": SYS_FLAG_COMPRESSED | SYS_FLAG_MULTI_TAGS | born_bit | store_bit,
        "born_timestamp": 1_700_000_000_123,
        "born_host": born_text,
        "store_timestamp": result.store_timestamp,
        "store_host": store_text,
        "reconsume_times": 3,
        "prepared_transaction_offset": 98_765,
        "total_size": result.wrote_bytes,
        "body_crc": zlib.crc32(msg.body) & 0x7FFFFFFF,
        "body": msg.body,
    }
    got = store.get_messages("Orders", 5, 3, 1)
    assert got.status == GetStatus.FOUND and len(got.messages) == 1
    assert fields(got.messages[0]) == expected
    assert fields(store.look_message(result.commitlog_offset)) == expected
    assert fields(store.view_message(result.msg_id)) == expected
    for key in ("order-17", "cust-3", "C0FFEE0001"):
        assert [fields(m) for m in store.query_messages("Orders", key)] == [expected], key
    assert store.verify() == []


def test_born_timestamp_zero_means_the_store_time(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    result = put_ok(store, [StoreMessage("T", body=b"now")])[0]
    record = fields(store.look_message(result.commitlog_offset))
    assert record["born_timestamp"] == record["store_timestamp"] == result.store_timestamp
    assert record["born_host"] == "127.0.0.1:0"
    assert (record["tags"], record["keys"], record["properties"]) == (None, [], {})
