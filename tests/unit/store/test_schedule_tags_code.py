"""The one delay rule the store knows: a SCHEDULE_TOPIC_XXXX record's consume-queue tag
code is its delivery time (store timestamp + DELAY_MS), on every path that builds an entry
(per-message append, raw records, and re-dispatch after a crash)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from boltmq.wire.record import SCHEDULE_TOPIC, scheduled_tags_code, tags_code
from boltmq.wire.record_batch import RecordBatch, encode_send_record
from services.store import MessageStore, StoreMessage


def _code(store: MessageStore, topic: str, queue_id: int, queue_offset: int) -> int:
    assert store.wait_dispatched()
    cq = store.queues.get(topic, queue_id)
    assert cq is not None
    entry = cq.entry(queue_offset)
    assert entry is not None
    return entry[2]


def test_rule_only_for_schedule_records_with_a_valid_delay() -> None:
    assert scheduled_tags_code(SCHEDULE_TOPIC, {"DELAY_MS": "1500"}, 1000, 7) == 2500
    assert scheduled_tags_code("Orders", {"DELAY_MS": "1500"}, 1000, 7) == 7
    for bad in ("", "-5", "1e3", "\u00b2", "9" * 13):
        assert scheduled_tags_code(SCHEDULE_TOPIC, {"DELAY_MS": bad}, 1000, 7) == 7
    assert scheduled_tags_code(SCHEDULE_TOPIC, {}, 1000, 7) == 7


def test_append_paths_and_recovery_write_the_delivery_time(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    store = make_store()
    props = {"DELAY_MS": "5000", "REAL_TOPIC": "T", "REAL_QID": "0"}
    per_message = store.put_message(
        StoreMessage(topic=SCHEDULE_TOPIC, queue_id=2, body=b"a", tags="x", properties=props)
    )
    raw = encode_send_record(SCHEDULE_TOPIC, b"b", "x", None, props)
    raw_result = store.put_messages(RecordBatch(raw, 1, SCHEDULE_TOPIC, 2))[0]
    plain = store.put_message(
        StoreMessage(topic="T", queue_id=0, body=b"c", tags="x", properties=props)
    )
    assert _code(store, SCHEDULE_TOPIC, 2, 0) == per_message.store_timestamp + 5000
    assert _code(store, SCHEDULE_TOPIC, 2, 1) == raw_result.store_timestamp + 5000
    assert _code(store, "T", 0, plain.queue_offset) == tags_code("x")
    # A crash: the consume queue is rebuilt from the CommitLog with the same codes.
    store.flush()
    store.shutdown()
    (tmp_path / "store" / "abort").touch()
    shutil.rmtree(tmp_path / "store" / "consumequeue")
    again = make_store()
    assert _code(again, SCHEDULE_TOPIC, 2, 0) == per_message.store_timestamp + 5000
    assert _code(again, SCHEDULE_TOPIC, 2, 1) == raw_result.store_timestamp + 5000
