"""MessageStore reads: get_messages, look_message, view_message, query_messages, offsets.

Statuses and next offsets of ``get_messages`` (with and without a tag
subscription), lookups by CommitLog offset and by message id (with no index at
all), queries by key and unique key, ``offset_by_time`` and the queue bounds.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

import pytest

from services.store import GetStatus, MessageStore, StoreMessage
from tests.unit.store.store_api_helpers import (
    MAX_QUEUE_ID,
    STORE_HOST_HEX,
    fields,
    put_ok,
    sample,
)

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
