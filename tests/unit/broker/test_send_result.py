"""How the store's PutMessageStatus reaches the producer as a SendStatus."""

from __future__ import annotations

import pytest

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from services.broker.send_processor import to_send_result

STORED: dict[int, int] = {
    message_pb2.PUT_OK: broker_pb2.SEND_OK,
    message_pb2.FLUSH_DISK_TIMEOUT: broker_pb2.SEND_FLUSH_DISK_TIMEOUT,
    message_pb2.FLUSH_SLAVE_TIMEOUT: broker_pb2.SEND_FLUSH_SLAVE_TIMEOUT,
    message_pb2.SLAVE_NOT_AVAILABLE: broker_pb2.SEND_SLAVE_NOT_AVAILABLE,
}


@pytest.mark.parametrize("put_status", list(message_pb2.PutMessageStatus.values()))
def test_every_put_status_maps_to_a_send_status(put_status: int) -> None:
    put = store_pb2.PutResult(msg_id="ID", commitlog_offset=10, queue_offset=3)
    put.status = put_status  # type: ignore[assignment]
    result = to_send_result(put, "orders", 2, "broker-a")
    assert result.status == STORED.get(put_status, broker_pb2.SEND_FAILED)
    assert result.put_status == put_status
    assert (result.topic, result.queue_id, result.broker_name) == ("orders", 2, "broker-a")
    assert (result.msg_id, result.commitlog_offset, result.queue_offset) == ("ID", 10, 3)
    if result.status == broker_pb2.SEND_FAILED:
        name = message_pb2.PutMessageStatus.Name(put_status)  # type: ignore[arg-type]
        assert name in result.error
    else:
        assert result.error == ""


def test_the_store_s_own_reason_is_kept() -> None:
    put = store_pb2.PutResult(status=message_pb2.MESSAGE_ILLEGAL, error="body too large")
    assert to_send_result(put, "t", 0, "b").error == "body too large"
