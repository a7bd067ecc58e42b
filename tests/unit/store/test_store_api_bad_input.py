"""MessageStore bad input: every refused message leaves no byte on disk and uses up nothing.

Each bad topic, queue id, body, property, tag, key and host is refused with its
status, alone and in a batch; the files under the whole ``tmp_path`` are
compared byte for byte before and after, and the limits themselves are accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from services.store import MessageStore, PutStatus, StoreMessage
from tests.unit.store.store_api_helpers import (
    MAX_QUEUE_ID,
    disk_snapshot,
    fields,
    put_ok,
    read_queue,
    sample,
)

MAX_BODY_BYTES = 48 * 1024  # small_config's max_message_size_bytes
MAX_PROPERTIES_BYTES = 32767


def all_bytes_under(root: Path) -> bytes:
    """The bytes of every file under ``root``, end to end (to search for a marker)."""
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


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
