"""An Append of runs (the raw records of several queues in one request) against real store
processes: unary and on an AppendStream, it stores exactly the records, and answers exactly
the entries, that the same batches sent one Append each give; a malformed one is refused
INVALID_ARGUMENT naming the field, with nothing stored; under SYNC_FLUSH it is answered
once its records are flushed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from boltmq.wire.record_batch import RecordBatch
from services.broker.store.store_client import runs_request
from tests.integration.procs import ServiceProcess
from tests.integration.test_append_stream import SMALL, OpenStream
from tests.integration.test_append_stream_together import raw, stored, with_bad_crc

Spawn = Callable[..., ServiceProcess]


def batches() -> list[store_pb2.AppendRequest]:
    """Raw batches of several topics and queues, a refused record among them."""
    return [
        raw("Orders", b"o1", b"o2"),
        raw("Payments", b"p1", queue_id=3),
        with_bad_crc(raw("Orders", b"o3", b"refused", b"o4"), 1),
        raw("Orders", b"o5", queue_id=1),
        raw("Audit", *(b"a%d" % i for i in range(45))),  # stamped as columns
        raw("Payments", b"p2", queue_id=3),
    ]


def of_runs(parts: list[store_pb2.AppendRequest]) -> store_pb2.AppendRequest:
    """The parts as one Append of runs, built as the broker builds it."""
    batches = [RecordBatch(p.records, p.record_count, p.topic, p.queue_id) for p in parts]
    return runs_request(batches, "10.0.0.7:4000")


def entries(answer: store_pb2.AppendResponse) -> tuple[list[int], list[int], list[int]]:
    return list(answer.statuses), list(answer.commitlog_offsets), list(answer.queue_offsets)


def one_by_one(address: str) -> tuple[list[int], list[int], list[int], dict[int, str]]:
    """Each batch as its own unary Append: the entries joined, errors at their place."""
    statuses, physicals, offsets, errors = [], [], [], {}
    with sync_channel(address) as chan:
        stub = store_pb2_grpc.StoreServiceStub(chan)
        for part in batches():
            part.born_host = "10.0.0.7:4000"
            answer = stub.Append(part, timeout=30)
            errors.update({len(statuses) + i: e for i, e in answer.errors.items()})
            statuses += answer.statuses
            physicals += answer.commitlog_offsets
            offsets += answer.queue_offsets
    return statuses, physicals, offsets, errors


@pytest.mark.parametrize("call", ["unary", "stream"])
def test_an_append_of_runs_stores_and_answers_what_one_append_a_batch_does(
    spawn: Spawn, tmp_path: Path, call: str
) -> None:
    runs_store = spawn("store", f"root_dir={tmp_path / 'runs'}", *SMALL)
    alone_store = spawn("store", f"root_dir={tmp_path / 'alone'}", *SMALL)
    if call == "unary":
        with sync_channel(runs_store.address) as chan:
            answer = store_pb2_grpc.StoreServiceStub(chan).Append(of_runs(batches()), timeout=30)
    else:
        stream = OpenStream(runs_store.address)
        stream.send_message(store_pb2.AppendStreamRequest(id=7, append=of_runs(batches())))
        response = stream.receive()
        stream.close()
        assert response.id == 7 and response.error_code == 0
        answer = response.append
    statuses, physicals, offsets, errors = one_by_one(alone_store.address)

    assert entries(answer) == (statuses, physicals, offsets)
    assert dict(answer.errors) == errors and set(errors) == {4}  # the bad CRC, at its place
    assert statuses.count(message_pb2.PUT_OK) == 52
    assert stored(runs_store.address) == stored(alone_store.address)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("topic", "Orders", "topic: an Append of runs names the topic in each run"),
        ("record_count", 49, "record_count: 49, but the runs hold 53 records"),
    ],
)
def test_a_malformed_append_of_runs_is_refused_naming_the_field_and_stores_nothing(
    spawn: Spawn, tmp_path: Path, field: str, value: object, says: str
) -> None:
    store = spawn("store", f"root_dir={tmp_path / 's'}", *SMALL)
    sent = of_runs(batches())
    setattr(sent, field, value)
    with sync_channel(store.address) as chan:
        with pytest.raises(grpc.RpcError) as refused:
            store_pb2_grpc.StoreServiceStub(chan).Append(sent, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details() == says
    assert stored(store.address) == []


def test_under_sync_flush_an_append_of_runs_is_answered_flushed(
    spawn: Spawn, tmp_path: Path
) -> None:
    store = spawn("store", f"root_dir={tmp_path / 's'}", "flush_disk_type=SYNC_FLUSH", *SMALL)
    with sync_channel(store.address) as chan:
        stub = store_pb2_grpc.StoreServiceStub(chan)
        answer = stub.Append(of_runs(batches()), timeout=30)
        info = stub.GetStoreInfo(store_pb2.GetStoreInfoRequest(), timeout=30)
    assert list(answer.statuses).count(message_pb2.PUT_OK) == 52
    assert info.flushed_offset >= max(answer.commitlog_offsets)
