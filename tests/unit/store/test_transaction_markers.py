"""Transaction records in the store: PREPARED and ROLLBACK never reach a consume queue,
a COMMIT marker does (once), and verify() stays clean across a restart."""

from __future__ import annotations

from collections.abc import Callable

from boltmq.wire.record import (
    SYS_FLAG_TRANSACTION_COMMIT,
    SYS_FLAG_TRANSACTION_PREPARED,
    SYS_FLAG_TRANSACTION_ROLLBACK,
)
from services.store import MessageStore, StoreMessage


def test_only_commit_markers_are_consumable_and_verify_is_clean(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    half = store.put_message(
        StoreMessage(
            topic="T", queue_id=0, body=b"half", tags="a", sys_flag=SYS_FLAG_TRANSACTION_PREPARED
        )
    )
    plain = store.put_message(StoreMessage(topic="T", queue_id=0, body=b"plain", tags="a"))
    commit = store.put_message(
        StoreMessage(
            topic="T",
            queue_id=0,
            body=b"half",
            tags="a",
            sys_flag=SYS_FLAG_TRANSACTION_COMMIT,
            prepared_transaction_offset=half.commitlog_offset,
        )
    )
    store.put_message(
        StoreMessage(
            topic="T",
            queue_id=0,
            body=b"",
            tags="a",
            sys_flag=SYS_FLAG_TRANSACTION_ROLLBACK,
            prepared_transaction_offset=half.commitlog_offset,
        )
    )
    assert store.dispatcher.wait_dispatched(store.commitlog.max_offset, 5.0)
    got = store.get_messages("T", 0, 0, 32)
    assert [bytes(m.body) for m in got.messages] == [b"plain", b"half"]
    assert [m.commitlog_offset for m in got.messages] == [
        plain.commitlog_offset,
        commit.commitlog_offset,
    ]
    assert got.messages[1].prepared_transaction_offset == half.commitlog_offset
    assert store.verify() == []
    root = store.config.root_dir
    store.shutdown()
    again = make_store(root)
    assert [bytes(m.body) for m in again.get_messages("T", 0, 0, 32).messages] == [
        b"plain",
        b"half",
    ]
    assert again.verify() == []
