"""The embedding API of MessageStore: puts, gets, lookups, queries, bad input, lifecycle.

Everything goes through the public facade on a real store in ``tmp_path``;
reads are compared field by field against what was put, and every refused
input is checked against a byte snapshot of the files under the root.
"""

from __future__ import annotations

import shutil
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from boltmq.wire.record import (
    FIXED_OVERHEAD_IPV4,
    SYS_FLAG_BORN_HOST_V6,
    SYS_FLAG_COMPRESSED,
    SYS_FLAG_MULTI_TAGS,
    SYS_FLAG_STORE_HOST_V6,
)
from services.store import GetStatus, MessageStore, PutResult, PutStatus, StoreLocked, StoreMessage
from services.store.errors import StoreNotRunning
from services.store.message import MessageExt
from tests.conftest import small_config

MAX_BODY_BYTES = 48 * 1024  # small_config's max_message_size_bytes
MAX_PROPERTIES_BYTES = 32767
MAX_QUEUE_ID = 1023  # StoreConfig default
STORE_HOST_HEX = "7F000001" + "00002A9F"  # 127.0.0.1, port 10911 (StoreConfig defaults)
READ_BATCH = 32
# Files a running store rewrites on its own (lock, abort marker, flush timestamps).
VOLATILE_NAMES = frozenset({"lock", "abort", "checkpoint"})
FIELDS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "msg_id",
    "tags",
    "keys",
    "properties",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "total_size",
    "body_crc",
)


# --------------------------------------------------------------------------- helpers


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def fields(record: MessageExt | None) -> dict[str, object]:
    """Every field of a returned message, the body copied out of the mapping."""
    assert record is not None
    out: dict[str, object] = {name: getattr(record, name) for name in FIELDS}
    out["properties"] = dict(record.properties)
    out["body"] = bytes(record.body)
    return out


def put_ok(store: MessageStore, msgs: Sequence[StoreMessage]) -> list[PutResult]:
    results = [store.put_message(m) for m in msgs]
    assert [r.status for r in results] == [PutStatus.PUT_OK] * len(msgs), results
    return results


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[dict[str, object]]:
    """Every message the queue serves, from its min offset, following next_begin_offset."""
    out: list[dict[str, object]] = []
    offset = store.min_offset(topic, queue_id)
    while True:
        got = store.get_messages(topic, queue_id, offset, READ_BATCH)
        if got.status != GetStatus.FOUND:
            break
        out.extend(fields(m) for m in got.messages)
        offset = got.next_begin_offset
    return out


def disk_snapshot(root: Path) -> dict[str, bytes | None]:
    """Every directory (None) and file (its bytes) under ``root``, minus volatile files.

    Pre-allocated ``.tmp`` segments are left out: the background thread may
    still be writing one, and they are never data.
    """
    snapshot: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        if path.name in VOLATILE_NAMES or path.name.endswith(".tmp"):
            continue
        snapshot[str(path.relative_to(root))] = path.read_bytes() if path.is_file() else None
    return snapshot


def all_bytes_under(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def sample(i: int, topic: str = "T", queue_id: int = 0, **extra: object) -> StoreMessage:
    """Message ``i``: tags, one key and a UNIQ_KEY, so every read path can find it."""
    values: dict[str, object] = dict(
        topic=topic,
        queue_id=queue_id,
        body=f"body-{topic}-{queue_id}-{i}".encode() * (i % 5 + 1),
        tags=f"tag{i % 3}",
        keys=[f"key-{i}"],
        properties={"UNIQ_KEY": f"U{topic}{i:06d}"},
    )
    values.update(extra)
    return StoreMessage(**values)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- puts


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


# --------------------------------------------------------------------------- gets


def test_get_messages_statuses_offsets_and_counts(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    results = put_ok(store, [sample(i) for i in range(10)])
    put_ok(store, [sample(0, queue_id=1)])

    for topic, queue_id in (("nope", 0), ("T", 2), ("T", MAX_QUEUE_ID)):
        got = store.get_messages(topic, queue_id, 0)
        assert (got.status, got.messages, got.next_begin_offset) == (
            GetStatus.NO_MATCHED_LOGIC_QUEUE,
            [],
            0,
        )

    got = store.get_messages("T", 0, 0, max_count=4)
    assert got.status == GetStatus.FOUND
    assert [m.queue_offset for m in got.messages] == [0, 1, 2, 3]
    assert [m.commitlog_offset for m in got.messages] == [r.commitlog_offset for r in results[:4]]
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (4, 0, 10)

    got = store.get_messages("T", 0, 7)  # default count: everything that is left
    assert [m.queue_offset for m in got.messages] == [7, 8, 9]
    assert got.next_begin_offset == 10

    got = store.get_messages("T", 0, 3, max_count=1)
    assert [bytes(m.body) for m in got.messages] == [sample(3).body]
    assert got.next_begin_offset == 4

    got = store.get_messages("T", 0, 0, max_bytes=1)  # one message always fits
    assert [m.queue_offset for m in got.messages] == [0]

    got = store.get_messages("T", 0, 10)
    assert (got.status, got.messages, got.next_begin_offset) == (
        GetStatus.OFFSET_OVERFLOW_ONE,
        [],
        10,
    )
    got = store.get_messages("T", 0, 11)
    assert (got.status, got.messages, got.next_begin_offset) == (
        GetStatus.OFFSET_OVERFLOW_BADLY,
        [],
        0,
    )
    got = store.get_messages("T", 0, -1)
    assert (got.status, got.messages, got.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, [], 0)
    assert all(
        (g.min_offset, g.max_offset) == (0, 10)
        for g in (
            store.get_messages("T", 0, 10),
            store.get_messages("T", 0, 11),
            store.get_messages("T", 0, -1),
        )
    )
    assert store.verify() == []


def test_get_messages_filters_by_subscription(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    put_ok(store, [sample(i) for i in range(12)])  # tags: tag0, tag1, tag2, tag0, ...

    def offsets(subscription: str | None, start: int = 0, count: int = 32) -> list[int]:
        return [
            m.queue_offset for m in store.get_messages("T", 0, start, count, subscription).messages
        ]

    everything = list(range(12))
    assert offsets(None) == offsets("*") == offsets("") == offsets(" * ") == everything
    assert offsets("tag1") == [1, 4, 7, 10]
    assert offsets("tag0 || tag2") == [0, 2, 3, 5, 6, 8, 9, 11]
    assert offsets("tag2||tag1", start=5) == [5, 7, 8, 10, 11]
    assert all(m.tags == "tag1" for m in store.get_messages("T", 0, 0, 32, "tag1").messages)

    got = store.get_messages("T", 0, 0, 2, "tag1")
    assert [m.queue_offset for m in got.messages] == [1, 4]
    assert got.next_begin_offset == 5  # the next get starts after the last one returned

    got = store.get_messages("T", 0, 0, 32, "no-such-tag")
    assert (got.status, got.messages) == (GetStatus.NO_MATCHED_MESSAGE, [])
    assert got.next_begin_offset == 12  # everything was scanned: do not scan it again

    got = store.get_messages("T", 0, 3, 32, "tag1 || ")  # malformed expression
    assert (got.status, got.messages, got.next_begin_offset) == (
        GetStatus.NO_MATCHED_MESSAGE,
        [],
        3,
    )
    assert store.verify() == []


# --------------------------------------------------------------------------- look and view


def test_look_message_finds_records_and_nothing_else(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    msgs = [sample(i, queue_id=i % 3) for i in range(60)]
    results = put_ok(store, msgs)
    for msg, result in zip(msgs, results, strict=True):
        got = fields(store.look_message(result.commitlog_offset))
        assert (got["body"], got["topic"], got["queue_id"]) == (msg.body, "T", msg.queue_id)
    end = store.commitlog.max_offset
    for offset in (
        -1,
        -1000,
        end,
        end + 1,
        end + 10 * 1024 * 1024,
        results[5].commitlog_offset + 1,
        results[5].commitlog_offset + 4,
    ):
        assert store.look_message(offset) is None, offset
    assert store.verify() == []


def test_view_message_resolves_an_offset_id_without_any_index(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    msgs = [sample(i) for i in range(30)]
    results = put_ok(store, msgs)
    store.shutdown()
    shutil.rmtree(store.root / "index")

    store = make_store()
    assert not list((store.root / "index").glob("*"))
    assert store.query_messages("T", "key-3") == []  # the index really is gone
    for msg, result in zip(msgs, results, strict=True):
        assert result.msg_id == f"{STORE_HOST_HEX}{result.commitlog_offset:016X}"
        got = fields(store.view_message(result.msg_id))
        assert (got["body"], got["commitlog_offset"], got["msg_id"]) == (
            msg.body,
            result.commitlog_offset,
            result.msg_id,
        )
    # A well-formed id that points where no record starts.
    end = store.commitlog.max_offset
    for offset in (end, end + 4096, results[1].commitlog_offset + 2):
        assert store.view_message(f"{STORE_HOST_HEX}{offset:016X}") is None
    assert store.view_message(f"{STORE_HOST_HEX}{'F' * 16}") is None  # offset -1
    assert store.verify() == []


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "7F",
        "7F00000100002A9F",
        "7F00000100002A9F000000000000000",  # 31 characters
        "7F00000100002A9F00000000000000000",  # 33
        "ZZ00000100002A9F0000000000000000",  # not hex
        "7F000001 0002A9F0000000000000000",
        "00000000000000000000000000000001" + "00002A9F" + "00000000000000G0",  # 56, not hex
        "7F00000100002A9F" + "0" * 24,  # 40: neither IPv4 nor IPv6
    ],
)
def test_view_message_rejects_a_malformed_id(
    make_store: Callable[..., MessageStore], msg_id: str
) -> None:
    store = make_store()
    put_ok(store, [sample(0)])
    with pytest.raises(ValueError):
        store.view_message(msg_id)


# --------------------------------------------------------------------------- query, time, offsets


def test_query_messages_by_key_and_unique_key(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    t_msgs = [sample(i, queue_id=i % 2) for i in range(20)]
    shared = [
        StoreMessage("T", body=f"shared-{i}".encode(), queue_id=i % 3, keys=["dup", f"s{i}"])
        for i in range(6)
    ]
    t_results = put_ok(store, t_msgs)
    shared_results = put_ok(store, shared)
    u_result = put_ok(store, [sample(3, topic="U")])[0]  # same key-3, other topic

    def found(topic: str, key: str, **kwargs: int) -> list[int]:
        return sorted(m.commitlog_offset for m in store.query_messages(topic, key, **kwargs))

    assert found("T", "key-3") == [t_results[3].commitlog_offset]
    assert found("U", "key-3") == [u_result.commitlog_offset]
    assert found("T", "UT000007") == [t_results[7].commitlog_offset]
    assert found("U", "UU000003") == [u_result.commitlog_offset]
    assert found("T", "UU000003") == []
    assert found("T", "dup") == [r.commitlog_offset for r in shared_results]
    assert found("T", "s4") == [shared_results[4].commitlog_offset]
    limited = found("T", "dup", max_count=2)
    assert len(limited) == 2 and set(limited) <= {r.commitlog_offset for r in shared_results}
    assert found("T", "dup", max_count=0) == []
    assert found("T", "missing") == [] and found("nope", "key-3") == []
    # Every returned message really carries the key asked for.
    assert all("dup" in m.keys for m in store.query_messages("T", "dup"))
    stored_at = t_results[3].store_timestamp
    assert found("T", "key-3", begin_ms=stored_at + 3_600_000) == []
    assert found("T", "key-3", begin_ms=0, end_ms=stored_at - 3_600_000) == []
    assert found("T", "key-3", begin_ms=stored_at - 3_600_000, end_ms=stored_at + 3_600_000) == [
        t_results[3].commitlog_offset
    ]
    assert store.verify() == []


def test_offset_by_time_is_the_first_message_stored_at_or_after(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    results = []
    for i in range(12):
        results.append(put_ok(store, [sample(i)])[0])
        time.sleep(0.003)  # spread the store timestamps; expectations come from the results
    stamps = [r.store_timestamp for r in results]
    assert stamps == sorted(stamps) and len(set(stamps)) > 1

    def expected(ts: int) -> int:
        return next((i for i, s in enumerate(stamps) if s >= ts), len(stamps))

    probes = {0, stamps[0] - 1, stamps[-1] + 1, stamps[-1] + 10**9}
    probes |= {s + d for s in stamps for d in (-1, 0, 1)}
    for ts in sorted(probes):
        assert store.offset_by_time("T", 0, ts) == expected(ts), ts
    assert store.offset_by_time("T", 7, stamps[0]) == 0
    assert store.offset_by_time("nope", 0, stamps[0]) == 0
    assert store.verify() == []


def test_min_and_max_offset(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    assert (store.min_offset("T", 0), store.max_offset("T", 0)) == (0, 0)
    put_ok(store, [sample(i, queue_id=i % 4) for i in range(22)])
    assert [store.max_offset("T", q) for q in range(5)] == [6, 6, 5, 5, 0]
    assert [store.min_offset("T", q) for q in range(5)] == [0] * 5
    assert (store.min_offset("nope", 0), store.max_offset("nope", 0)) == (0, 0)
    assert store.verify() == []


# --------------------------------------------------------------------------- bad input

TOO_BIG_PROPERTY = {"p": "x" * (MAX_PROPERTIES_BYTES - 2)}  # "p\x01" + value + "\x02"
BAD_INPUTS: dict[str, tuple[StoreMessage, PutStatus]] = {
    "topic-empty": (StoreMessage("", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-dot": (StoreMessage(".", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-dotdot": (StoreMessage("..", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-slash": (StoreMessage("/", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-path": (StoreMessage("a/b", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-traversal": (StoreMessage("../escape", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-absolute": (StoreMessage("/tmp/evil", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-dotted": (StoreMessage("a.b", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-128-chars": (StoreMessage("t" * 128, b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-nul": (StoreMessage("a\x00b", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-tab": (StoreMessage("a\tb", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-newline-inside": (StoreMessage("a\nb", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-trailing-newline": (StoreMessage("abc\n", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-escape-char": (StoreMessage("a\x1bb", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-space": (StoreMessage("a b", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-non-ascii": (StoreMessage("tópico", b"x"), PutStatus.MESSAGE_ILLEGAL),
    "topic-not-a-string": (StoreMessage(b"T", b"x"), PutStatus.MESSAGE_ILLEGAL),  # type: ignore[arg-type]
    "queue-negative": (StoreMessage("T", b"x", queue_id=-1), PutStatus.MESSAGE_ILLEGAL),
    "queue-past-max": (
        StoreMessage("T", b"x", queue_id=MAX_QUEUE_ID + 1),
        PutStatus.MESSAGE_ILLEGAL,
    ),
    "queue-huge": (StoreMessage("T", b"x", queue_id=2**31), PutStatus.MESSAGE_ILLEGAL),
    "queue-not-int": (StoreMessage("T", b"x", queue_id="0"), PutStatus.MESSAGE_ILLEGAL),  # type: ignore[arg-type]
    "queue-bool": (StoreMessage("T", b"x", queue_id=True), PutStatus.MESSAGE_ILLEGAL),
    "body-too-large": (StoreMessage("T", bytes(MAX_BODY_BYTES + 1)), PutStatus.MESSAGE_ILLEGAL),
    "body-not-bytes": (StoreMessage("T", "text"), PutStatus.MESSAGE_ILLEGAL),  # type: ignore[arg-type]
    "properties-over-32767": (
        StoreMessage("T", b"x", properties=TOO_BIG_PROPERTY),
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
    ),
    "properties-over-in-utf8-bytes": (
        StoreMessage("T", b"x", properties={"p": "é" * 16383}),
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
    ),
    "keys-over-32767": (
        StoreMessage("T", b"x", keys=[f"k{i:07d}" for i in range(4000)]),
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
    ),
    "property-name-separator": (
        StoreMessage("T", b"x", properties={"a\x01b": "v"}),
        PutStatus.MESSAGE_ILLEGAL,
    ),
    "property-value-separator": (
        StoreMessage("T", b"x", properties={"a": "v\x02w"}),
        PutStatus.MESSAGE_ILLEGAL,
    ),
    "property-name-empty": (
        StoreMessage("T", b"x", properties={"": "v"}),
        PutStatus.MESSAGE_ILLEGAL,
    ),
    "property-value-not-str": (
        StoreMessage("T", b"x", properties={"a": 1}),  # type: ignore[dict-item]
        PutStatus.MESSAGE_ILLEGAL,
    ),
    "tags-separator": (StoreMessage("T", b"x", tags="a\x01b"), PutStatus.MESSAGE_ILLEGAL),
    "key-with-space": (StoreMessage("T", b"x", keys=["a b"]), PutStatus.MESSAGE_ILLEGAL),
    "key-empty": (StoreMessage("T", b"x", keys=["ok", ""]), PutStatus.MESSAGE_ILLEGAL),
    "born-host-not-ip": (
        StoreMessage("T", b"x", born_host="example.com"),
        PutStatus.MESSAGE_ILLEGAL,
    ),
    "born-port-negative": (StoreMessage("T", b"x", born_port=-1), PutStatus.MESSAGE_ILLEGAL),
}


def assert_refused_without_a_trace(
    store: MessageStore, tmp_path: Path, bad: Sequence[StoreMessage], statuses: Sequence[PutStatus]
) -> None:
    """``bad`` is refused with ``statuses`` one by one and as a batch; nothing on disk changes.

    The snapshot covers all of ``tmp_path``, so a path that escaped the root
    would be caught too.
    """
    store.wait_dispatched()
    before = disk_snapshot(tmp_path)
    commitlog_end = store.commitlog.max_offset
    queue_end = store.max_offset("T", 0)
    for results in ([store.put_message(m) for m in bad], store.put_messages(bad)):
        assert [r.status for r in results] == list(statuses), results
        for result in results:
            assert result.error, result
            assert (result.msg_id, result.commitlog_offset, result.queue_offset) == ("", -1, -1)
            assert not result.status.stored
    store.flush()
    assert disk_snapshot(tmp_path) == before
    assert store.commitlog.max_offset == commitlog_end
    # Nothing was used up: the next good message takes the next queue offset and CommitLog byte.
    good = put_ok(store, [sample(99)])[0]
    assert (good.queue_offset, good.commitlog_offset) == (queue_end, commitlog_end)
    assert store.verify() == []


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_refused_and_changes_nothing_on_disk(
    make_store: Callable[..., MessageStore], tmp_path: Path, case: str
) -> None:
    store = make_store()
    put_ok(store, [sample(i) for i in range(3)])
    msg, status = BAD_INPUTS[case]
    assert_refused_without_a_trace(store, tmp_path, [msg], [status])


def test_bad_input_on_an_empty_store_creates_nothing(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    store = make_store()
    bad = [m for m, _ in BAD_INPUTS.values()]
    store.wait_dispatched()
    before = disk_snapshot(tmp_path)
    results = store.put_messages(bad)
    assert [r.status for r in results] == [s for _, s in BAD_INPUTS.values()]
    store.flush()
    assert disk_snapshot(tmp_path) == before
    assert store.commitlog.max_offset == 0
    assert store.verify() == []


def test_limits_themselves_are_accepted(make_store: Callable[..., MessageStore]) -> None:
    store = make_store()
    exact_properties = {"p": "x" * (MAX_PROPERTIES_BYTES - 3)}  # exactly 32767 bytes
    edge = [
        StoreMessage("t" * 127, b"x"),
        StoreMessage("%RETRY%group|x_-9", b"x"),
        StoreMessage("T", b"x", queue_id=MAX_QUEUE_ID),
        StoreMessage("T", bytes(MAX_BODY_BYTES)),
        StoreMessage("T", b"x", properties=exact_properties),
    ]
    results = put_ok(store, edge)
    for msg, result in zip(edge, results, strict=True):
        got = fields(store.look_message(result.commitlog_offset))
        assert (got["topic"], got["queue_id"], got["body"]) == (msg.topic, msg.queue_id, msg.body)
    assert (
        fields(store.look_message(results[-1].commitlog_offset))["properties"] == exact_properties
    )
    assert store.verify() == []


def test_batch_with_bad_messages_stores_only_the_good_ones(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    """One result per message: the bad ones are refused and leave no byte anywhere."""
    store = make_store()
    poison = b"POISON-0123456789"
    batch = [
        sample(0),
        StoreMessage("..", poison + b"topic"),
        sample(1),
        StoreMessage("T", poison + b"props", properties=TOO_BIG_PROPERTY),
        StoreMessage("T", poison + bytes(MAX_BODY_BYTES)),
        sample(2),
    ]
    results = store.put_messages(batch)
    assert [r.status for r in results] == [
        PutStatus.PUT_OK,
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.PUT_OK,
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.PUT_OK,
    ]
    good = [results[0], results[2], results[5]]
    assert [r.queue_offset for r in good] == [0, 1, 2]
    assert good[1].commitlog_offset == good[0].commitlog_offset + good[0].wrote_bytes
    assert good[2].commitlog_offset == good[1].commitlog_offset + good[1].wrote_bytes
    assert [r["body"] for r in read_queue(store, "T", 0)] == [sample(i).body for i in range(3)]
    store.flush()
    assert poison not in all_bytes_under(tmp_path)
    # A batch of nothing but bad messages changes nothing at all.
    assert_refused_without_a_trace(
        store,
        tmp_path,
        [batch[1], batch[3], batch[4]],
        [PutStatus.MESSAGE_ILLEGAL, PutStatus.PROPERTIES_SIZE_EXCEEDED, PutStatus.MESSAGE_ILLEGAL],
    )


# --------------------------------------------------------------------------- lifecycle

OPERATIONS: dict[str, Callable[[MessageStore], object]] = {
    "get_messages": lambda s: s.get_messages("T", 0, 0),
    "look_message": lambda s: s.look_message(0),
    "view_message": lambda s: s.view_message(f"{STORE_HOST_HEX}{0:016X}"),
    "query_messages": lambda s: s.query_messages("T", "key-0"),
    "offset_by_time": lambda s: s.offset_by_time("T", 0, 0),
    "min_offset": lambda s: s.min_offset("T", 0),
    "max_offset": lambda s: s.max_offset("T", 0),
    "flush": lambda s: s.flush(),
    "verify": lambda s: s.verify(),
}


def test_puts_on_a_store_that_never_started_are_refused(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    for result in [store.put_message(sample(0)), *store.put_messages([sample(1), sample(2)])]:
        assert result.status == PutStatus.SERVICE_NOT_AVAILABLE
        assert "not running" in result.error
    assert not (tmp_path / "store").exists()


def test_puts_on_a_store_that_was_shut_down_are_refused(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    store = make_store()
    put_ok(store, [sample(0)])
    store.shutdown()
    before = disk_snapshot(tmp_path)
    result = store.put_message(sample(1))
    assert result.status == PutStatus.SERVICE_NOT_AVAILABLE and "not running" in result.error
    assert disk_snapshot(tmp_path) == before


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_reads_on_a_store_that_never_started_raise(tmp_path: Path, operation: str) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    with pytest.raises(StoreNotRunning):
        OPERATIONS[operation](store)


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_reads_on_a_store_that_was_shut_down_raise(
    make_store: Callable[..., MessageStore], operation: str
) -> None:
    store = make_store()
    put_ok(store, [sample(0)])
    store.shutdown()
    with pytest.raises(StoreNotRunning):
        OPERATIONS[operation](store)


def test_start_twice_and_a_second_store_on_the_root_are_refused(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    store = make_store()
    with pytest.raises(RuntimeError, match="already started"):
        store.start()
    other = MessageStore(small_config(store.root))
    with pytest.raises(StoreLocked):
        other.start()
    assert put_ok(store, [sample(0)])[0].queue_offset == 0  # the first store is unharmed
    assert store.verify() == []


def snapshot_reads(
    store: MessageStore, results: Sequence[PutResult], queues: Sequence[tuple[str, int]]
) -> dict[str, object]:
    """What every read path says about the store's messages."""
    return {
        "queues": {q: read_queue(store, *q) for q in queues},
        "bounds": {q: (store.min_offset(*q), store.max_offset(*q)) for q in queues},
        "look": [fields(store.look_message(r.commitlog_offset)) for r in results],
        "view": [fields(store.view_message(r.msg_id)) for r in results],
        "query": {
            key: sorted(m.commitlog_offset for m in store.query_messages("T", key))
            for key in ("key-0", "key-7", "UT000011", "key-999")
        },
        "by_time": [store.offset_by_time("T", 1, r.store_timestamp) for r in results],
    }


def test_a_restarted_store_serves_the_same_messages(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    msgs = [sample(i, queue_id=i % 3, body=f"{i}".encode() * (40 * i + 1)) for i in range(90)]
    msgs += [sample(i, topic="U", queue_id=7) for i in range(10)]
    results = put_ok(store, msgs)
    assert store.commitlog.max_offset > 2 * store.config.mapped_file_size_commitlog
    queues = [("T", 0), ("T", 1), ("T", 2), ("U", 7)]
    before = snapshot_reads(store, results, queues)
    assert before["query"]["key-7"] == [results[7].commitlog_offset]
    store.shutdown()

    store = make_store()
    assert snapshot_reads(store, results, queues) == before
    more = put_ok(store, [sample(1000, queue_id=q) for q in range(3)])
    assert [r.queue_offset for r in more] == [30, 30, 30]
    assert more[0].commitlog_offset == results[-1].commitlog_offset + results[-1].wrote_bytes
    assert store.verify() == []


def test_the_same_store_object_can_be_started_again(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    store.start()
    try:
        results = put_ok(store, [sample(i, queue_id=i % 2) for i in range(40)])
        before = snapshot_reads(store, results, [("T", 0), ("T", 1)])
        store.shutdown()
        store.start()
        assert snapshot_reads(store, results, [("T", 0), ("T", 1)]) == before
        assert put_ok(store, [sample(50)])[0].queue_offset == 20
        assert store.verify() == []
    finally:
        store.shutdown()
