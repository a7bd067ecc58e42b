"""What store tests through the MessageStore facade share: sample messages, reads, snapshots.

The ``test_store_api_*`` modules (and the CommitLog tests' byte snapshots) go
through the public facade on a real store in ``tmp_path``; these helpers put
messages, read them back as plain dicts of every field, and take byte
snapshots of the files under a root.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from services.store import GetStatus, MessageStore, PutResult, PutStatus, StoreMessage
from services.store.message import MessageExt

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


def fields(record: MessageExt | None) -> dict[str, object]:
    """Every field of a returned message, the body copied out of the mapping."""
    assert record is not None
    out: dict[str, object] = {name: getattr(record, name) for name in FIELDS}
    out["properties"] = dict(record.properties)
    out["body"] = bytes(record.body)
    return out


def put_ok(store: MessageStore, msgs: Sequence[StoreMessage]) -> list[PutResult]:
    """Put ``msgs`` one by one; every one must be stored."""
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
