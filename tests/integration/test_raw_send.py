"""SendMessage with raw records (the SDK's form) through a real broker and store.

The broker checks each record's header and forwards the bytes; the store
verifies and patches them. A bad record gets its own status and error; the
good ones of the same batch are stored and served.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.pull_consumer import decode_records
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2
from boltmq.wire.record import (
    BODY_CRC_OFFSET,
    SYS_FLAG_OFFSET,
    SYS_FLAG_TRANSACTION_COMMIT,
    SYS_FLAG_TRANSACTION_PREPARED,
    TOTAL_SIZE_OFFSET,
)
from boltmq.wire.record_batch import encode_send_record
from services.broker.config import BrokerConfig
from tests.integration.broker_fixtures import RPC_TIMEOUT_S, pull, upsert
from tests.integration.conftest import Cluster

INT = struct.Struct(">i")
BODY_MAX = BrokerConfig().max_message_size_bytes


@pytest.fixture
def stub(cluster: Cluster) -> Iterator[broker_pb2_grpc.BrokerServiceStub]:
    chan = sync_channel(cluster.broker.address)
    yield broker_pb2_grpc.BrokerServiceStub(chan)
    chan.close()


def records_request(
    *records: bytes, topic: str, queue_id: int = -1, count: int | None = None
) -> broker_pb2.SendRequest:
    return broker_pb2.SendRequest(
        producer_group="pg",
        records=b"".join(records),
        record_count=len(records) if count is None else count,
        topic=topic,
        queue_id=queue_id,
    )


def send_raw(
    stub: broker_pb2_grpc.BrokerServiceStub, request: broker_pb2.SendRequest
) -> broker_pb2.SendResponse:
    response: broker_pb2.SendResponse = stub.SendMessage(request, timeout=RPC_TIMEOUT_S)
    assert len(response.statuses) == len(response.put_statuses) == request.record_count
    return response


def with_int(raw: bytes, offset: int, value: int) -> bytes:
    data = bytearray(raw)
    INT.pack_into(data, offset, value)
    return bytes(data)


def test_raw_records_are_stored_and_pulled_back(stub: broker_pb2_grpc.BrokerServiceStub) -> None:
    upsert(stub, "Raw", queues=2)
    records = [
        encode_send_record("Raw", f"m{i}".encode(), tags="A", keys=[f"k{i}"]) for i in range(5)
    ]
    response = send_raw(stub, records_request(*records, topic="Raw", queue_id=1))
    assert list(response.statuses) == [broker_pb2.SEND_OK] * 5
    assert (response.topic, response.queue_id) == ("Raw", 1)
    assert list(response.queue_offsets) == [0, 1, 2, 3, 4]
    pulled = decode_records(pull(stub, "Raw", queue_id=1, raw_records=True).records)
    assert [(bytes(m.body), m.tags, m.keys, m.queue_id) for m in pulled] == [
        (f"m{i}".encode(), "A", [f"k{i}"], 1) for i in range(5)
    ]
    assert [m.commitlog_offset for m in pulled] == list(response.commitlog_offsets)


def test_each_bad_record_gets_its_own_status_and_the_rest_are_stored(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "Raw", queues=1)
    good = encode_send_record("Raw", b"good")
    bad = {
        1: (with_int(good, BODY_CRC_OFFSET, 12345), message_pb2.MESSAGE_ILLEGAL, "CRC"),
        2: (encode_send_record("Elsewhere", b"x"), message_pb2.MESSAGE_ILLEGAL, "topic"),
        3: (
            encode_send_record("Raw", b"x" * (BODY_MAX + 1)),
            message_pb2.MESSAGE_ILLEGAL,
            "body is",
        ),
        # A client may not write transaction markers (or half messages) itself.
        4: (
            with_int(good, SYS_FLAG_OFFSET, SYS_FLAG_TRANSACTION_COMMIT),
            message_pb2.MESSAGE_ILLEGAL,
            "transaction bits",
        ),
        5: (
            with_int(good, SYS_FLAG_OFFSET, SYS_FLAG_TRANSACTION_PREPARED),
            message_pb2.MESSAGE_ILLEGAL,
            "transaction bits",
        ),
    }  # 1 passes the broker's header checks: the store's CRC check refuses it
    records = [good, bad[1][0], bad[2][0], bad[3][0], bad[4][0], bad[5][0], good]
    response = send_raw(stub, records_request(*records, topic="Raw", queue_id=0))
    assert [response.statuses[i] for i in (0, 6)] == [broker_pb2.SEND_OK] * 2
    for index, (_, put_status, reason) in bad.items():
        assert response.statuses[index] == broker_pb2.SEND_FAILED
        assert response.put_statuses[index] == put_status
        assert response.commitlog_offsets[index] == -1
        assert reason in response.errors[index] and "records[" in response.errors[index]
    pulled = decode_records(pull(stub, "Raw", queue_id=0, raw_records=True).records)
    assert [bytes(m.body) for m in pulled] == [b"good", b"good"]


def test_records_that_cannot_be_told_apart_are_all_refused(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "Raw", queues=1)
    good = encode_send_record("Raw", b"good")
    broken = with_int(good, TOTAL_SIZE_OFFSET, 7)
    response = send_raw(stub, records_request(good, broken, topic="Raw", queue_id=0))
    assert list(response.statuses) == [broker_pb2.SEND_FAILED] * 2
    assert all("records[1]" in response.errors[i] for i in (0, 1))
    status = pull(stub, "Raw", queue_id=0, raw_records=True)
    assert status.record_count == 0


@pytest.mark.parametrize(
    "fields, reason",
    [
        (dict(record_count=0), "record_count"),
        (dict(records=b""), "records"),
        (dict(topic="bad topic"), "topic"),
        (dict(queue_id=-2), "queue_id"),
        (dict(messages=[message_pb2.Message(topic="Raw", body=b"x")]), "not both"),
    ],
)
def test_malformed_raw_requests_are_invalid_arguments(
    stub: broker_pb2_grpc.BrokerServiceStub, fields: dict[str, object], reason: str
) -> None:
    upsert(stub, "Raw", queues=1)
    request = records_request(encode_send_record("Raw", b"x"), topic="Raw")
    for name, value in fields.items():
        if name == "messages":
            request.messages.extend(value)  # type: ignore[arg-type]
        else:
            setattr(request, name, value)
    with pytest.raises(grpc.RpcError) as caught:
        stub.SendMessage(request, timeout=RPC_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert reason in caught.value.details()  # type: ignore[attr-defined]


def test_sends_given_up_while_the_store_is_frozen_do_not_fail_a_send_still_waiting(
    cluster: Cluster, stub: broker_pb2_grpc.BrokerServiceStub
) -> None:
    """Sends whose clients' deadlines pass while the store is frozen (SIGSTOP) must not
    take the broker's one AppendStream call down with them: a send still waiting is
    stored and answered once the store resumes, once."""
    upsert(stub, "Frozen", queues=1)
    batch = [encode_send_record("Frozen", b"h" * 1024) for _ in range(256)]
    hasty_request = records_request(*batch, topic="Frozen", queue_id=0)
    assert list(send_raw(stub, hasty_request).statuses) == [broker_pb2.SEND_OK] * 256
    patient_request = records_request(
        encode_send_record("Frozen", b"patient"), topic="Frozen", queue_id=0
    )
    cluster.store.pause()
    try:
        hasty = [stub.SendMessage.future(hasty_request, timeout=1.0) for _ in range(40)]
        time.sleep(0.3)  # the hasty ones fill the stream's window first
        patient = stub.SendMessage.future(patient_request, timeout=30.0)
        time.sleep(2.0)  # every hasty deadline has passed, the broker cancelled them
    finally:
        cluster.store.resume()
    answered = patient.result()
    assert list(answered.statuses) == [broker_pb2.SEND_OK]
    for call in hasty:
        with pytest.raises(grpc.RpcError) as failed:
            call.result()
        assert failed.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    stored = []
    offset = 0
    while True:
        pulled = pull(
            stub, "Frozen", offset=offset, raw_records=True, max_messages=1024, max_bytes=4 << 20
        )
        if not pulled.records:
            break
        stored += [bytes(m.body) for m in decode_records(pulled.records)]
        offset = pulled.next_begin_offset
    assert stored.count(b"patient") == 1
    assert stored[-1] == b"patient"  # after whatever of the given-up sends was stored
    assert "Traceback" not in cluster.broker.log()
