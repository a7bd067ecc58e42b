"""An Append of runs (records of several queues in one request) on a real MessageStore:
malformed requests refused naming the field, each run stored and answered exactly as its
own batch appended alone is, a run of a topic no append may name refused record by
record while the others are stored, records that cannot be framed all refused, and a
SYNC_FLUSH store waiting once for the whole call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from boltmq.message import Message
from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.record_batch import RecordBatch
from services.store.errors import BadRequest
from services.store.proto_conversion import parts_response
from services.store.queue_runs import RUNS_MAX, append_runs, check_runs, run_batches
from services.store.status import PutResult, PutStatus, StoredRun
from services.store.store import MessageStore
from tests.conftest import read_queue

BORN = ("10.0.0.9", 4321)
Runs = list[tuple[str, int, list[bytes]]]


def records(topic: str, bodies: list[bytes]) -> bytes:
    return b"".join(Message(topic, body, keys=[body.decode()]).to_record() for body in bodies)


def request(runs: Runs) -> store_pb2.AppendRequest:
    return store_pb2.AppendRequest(
        records=b"".join(records(topic, bodies) for topic, _, bodies in runs),
        record_count=sum(len(bodies) for _, _, bodies in runs),
        runs=[
            store_pb2.QueueRun(topic=topic, queue_id=queue_id, record_count=len(bodies))
            for topic, queue_id, bodies in runs
        ],
    )


RUNS: Runs = [
    ("Orders", 0, [b"o1", b"o2"]),
    ("Payments", 3, [b"p1"]),
    ("Orders", 1, [b"o3"]),
    ("bad topic!", 0, [b"never"]),
    ("Orders", 0, [b"o4"]),
    ("Audit", 0, [b"a%d" % n for n in range(45)]),  # stamped as columns
]


def answer_of(
    store: MessageStore, appended: store_pb2.AppendResponse
) -> tuple[list[int], list[int], dict[int, str]]:
    return list(appended.statuses), list(appended.queue_offsets), dict(appended.errors)


def test_each_run_is_stored_and_answered_as_its_own_batch_alone(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    runs_store = make_store(tmp_path / "runs")
    alone_store = make_store(tmp_path / "alone")
    sent = request(RUNS)
    check_runs(sent, sent.records)
    answer = asyncio.run(append_runs(runs_store, sent, sent.records, BORN))

    expected_statuses: list[int] = []
    expected_offsets: list[int] = []
    for topic, queue_id, bodies in RUNS:
        alone = alone_store.put_messages(
            RecordBatch(records(topic, bodies), len(bodies), topic, queue_id), BORN
        )
        expected_statuses += [int(r.status) for r in alone]
        expected_offsets += [r.queue_offset for r in alone]
    statuses, offsets, errors = answer_of(runs_store, answer)
    assert statuses == expected_statuses
    assert offsets == expected_offsets
    assert statuses[4] == message_pb2.MESSAGE_ILLEGAL  # the bad run's one record, alone
    assert set(errors) == {4} and "bad topic!" in errors[4]
    assert statuses.count(message_pb2.PUT_OK) == 50
    assert len(answer.commitlog_offsets) == 51 and answer.msg_id_prefix
    for topic, queue_id in (("Orders", 0), ("Orders", 1), ("Payments", 3), ("Audit", 0)):
        got = [(q, body) for q, _, body in read_queue(runs_store, topic, queue_id)]
        assert got == [(q, body) for q, _, body in read_queue(alone_store, topic, queue_id)]
    assert [body for _, _, body in read_queue(runs_store, "Orders", 0)] == [b"o1", b"o2", b"o4"]


def test_records_that_cannot_be_framed_are_all_refused_and_nothing_is_stored(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    sent = request([("A", 0, [b"a"]), ("B", 0, [b"b"])])
    sent.records += b"trailing"
    answer = asyncio.run(append_runs(store, sent, sent.records, BORN))
    assert list(answer.statuses) == [message_pb2.MESSAGE_ILLEGAL] * 2
    assert "bytes after the 2 records" in answer.errors[0]
    assert read_queue(store, "A", 0) == [] and read_queue(store, "B", 0) == []


def test_a_sync_flush_store_stores_every_run_and_answers_once_flushed(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store(flush_disk_type="SYNC_FLUSH")
    sent = request([("A", 0, [b"a1", b"a2"]), ("B", 1, [b"b1"])])
    answer = asyncio.run(append_runs(store, sent, sent.records, BORN))
    assert list(answer.statuses) == [message_pb2.PUT_OK] * 3
    assert list(answer.queue_offsets) == [0, 1, 0]
    assert store.commitlog.flushed_offset >= max(answer.commitlog_offsets) + 1


def malformed(**fields: object) -> store_pb2.AppendRequest:
    sent = request([("A", 0, [b"a"]), ("B", 1, [b"b"])])
    for name, value in fields.items():
        if name == "runs":
            del sent.runs[:]
            sent.runs.extend(value)  # type: ignore[arg-type]
        elif name == "messages":
            sent.messages.add(topic="A", body=b"m")
        else:
            setattr(sent, name, value)
    return sent


@pytest.mark.parametrize(
    ("fields", "named", "says"),
    [
        ({"messages": True}, "messages", "not messages"),
        ({"topic": "A"}, "topic", "each run"),
        ({"queue_id": 2}, "queue_id", "each run"),
        ({"record_count": 3}, "record_count", "the runs hold 2 records"),
        ({"record_count": 0}, "record_count", "0 records"),
        ({"records": b""}, "records", "empty"),
        (
            {
                "runs": [
                    store_pb2.QueueRun(topic="A", record_count=2),
                    store_pb2.QueueRun(topic="B"),
                ]
            },
            "runs[1].record_count",
            "at least 1",
        ),
        (
            {"runs": [store_pb2.QueueRun(topic="A", record_count=1)] * (RUNS_MAX + 1)},
            "runs",
            f"at most {RUNS_MAX}",
        ),
    ],
)
def test_a_malformed_append_of_runs_is_refused_naming_the_field(
    fields: dict[str, object], named: str, says: str
) -> None:
    sent = malformed(**fields)
    with pytest.raises(BadRequest) as refused:
        check_runs(sent, sent.records)
    assert str(refused.value).startswith(f"{named}: ")
    assert says in str(refused.value)


def test_run_batches_split_the_records_by_run() -> None:
    sent = request([("A", 0, [b"a1", b"a2"]), ("B", 4, [b"b1"])])
    batches = run_batches(sent.records, sent.runs)
    assert not isinstance(batches, Exception)
    assert [(b.topic, b.queue_id, b.count) for b in batches] == [("A", 0, 2), ("B", 4, 1)]
    assert b"".join(b.records for b in batches) == sent.records
    assert batches[1].records == records("B", [b"b1"])


def test_parts_response_joins_columns_and_lists_with_errors_at_their_place() -> None:
    stored = StoredRun("PREFIX", 77)
    stored.commitlog_offsets, stored.queue_offsets, stored.sizes = [10, 20], [0, 1], [10, 10]
    refused = [
        PutResult(PutStatus.PUT_OK, commitlog_offset=30, queue_offset=5, store_timestamp=78),
        PutResult(PutStatus.MESSAGE_ILLEGAL, error="why"),
    ]
    answer = parts_response([stored, refused], "PREFIX")
    assert list(answer.statuses) == [
        message_pb2.PUT_OK,
        message_pb2.PUT_OK,
        message_pb2.PUT_OK,
        message_pb2.MESSAGE_ILLEGAL,
    ]
    assert list(answer.commitlog_offsets) == [10, 20, 30, -1]
    assert list(answer.queue_offsets) == [0, 1, 5, -1]
    assert dict(answer.errors) == {3: "why"}
    assert answer.store_timestamp_ms == 78 and answer.msg_id_prefix == "PREFIX"
