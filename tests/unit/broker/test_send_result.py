"""How the store's PutMessageStatus reaches the producer as a SendStatus."""

from __future__ import annotations

import pytest

from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from services.broker.wire import to_send_response

STORED: dict[int, int] = {
    message_pb2.PUT_OK: broker_pb2.SEND_OK,
    message_pb2.FLUSH_DISK_TIMEOUT: broker_pb2.SEND_FLUSH_DISK_TIMEOUT,
    message_pb2.FLUSH_SLAVE_TIMEOUT: broker_pb2.SEND_FLUSH_SLAVE_TIMEOUT,
    message_pb2.SLAVE_NOT_AVAILABLE: broker_pb2.SEND_SLAVE_NOT_AVAILABLE,
}


@pytest.mark.parametrize("put_status", list(message_pb2.PutMessageStatus.values()))
def test_every_put_status_maps_to_a_send_status(
    put_status: message_pb2.PutMessageStatus.ValueType,
) -> None:
    appended = store_pb2.AppendResponse(
        statuses=[put_status], commitlog_offsets=[10], queue_offsets=[3], msg_id_prefix="AB"
    )
    result = to_send_response(appended, "orders", 2, "broker-a")
    assert list(result.statuses) == [STORED.get(put_status, broker_pb2.SEND_FAILED)]
    assert list(result.put_statuses) == [put_status]
    assert (result.topic, result.queue_id, result.broker_name) == ("orders", 2, "broker-a")
    assert result.msg_id_prefix == "AB"
    assert (list(result.commitlog_offsets), list(result.queue_offsets)) == ([10], [3])
    if result.statuses[0] == broker_pb2.SEND_FAILED:
        name = message_pb2.PutMessageStatus.Name(put_status)
        assert name in result.errors[0]
    else:
        assert 0 not in result.errors


def test_the_store_s_own_reason_is_kept_per_message() -> None:
    appended = store_pb2.AppendResponse(
        statuses=[message_pb2.PUT_OK, message_pb2.MESSAGE_ILLEGAL],
        commitlog_offsets=[0, -1],
        queue_offsets=[0, -1],
        errors={1: "body too large"},
    )
    result = to_send_response(appended, "t", 0, "b")
    assert list(result.statuses) == [broker_pb2.SEND_OK, broker_pb2.SEND_FAILED]
    assert dict(result.errors) == {1: "body too large"}


@pytest.mark.parametrize(
    "last",
    [message_pb2.PUT_OK, message_pb2.FLUSH_DISK_TIMEOUT, message_pb2.OS_PAGE_CACHE_BUSY],
)
def test_a_batch_maps_every_status_whether_or_not_all_are_ok(
    last: message_pb2.PutMessageStatus.ValueType,
) -> None:
    """An all-PUT_OK answer takes a shorter way than a mixed one; both map each status."""
    count = 300
    put = [message_pb2.PUT_OK] * (count - 1) + [last]
    appended = store_pb2.AppendResponse(
        statuses=put,
        commitlog_offsets=list(range(count)),
        queue_offsets=list(range(count)),
    )
    result = to_send_response(appended, "t", 0, "b")
    assert list(result.statuses) == [STORED.get(s, broker_pb2.SEND_FAILED) for s in put]
    assert list(result.put_statuses) == put
    failed = STORED.get(last) is None
    assert dict(result.errors).keys() == ({count - 1} if failed else set())


def test_an_all_stored_answer_keeps_a_note_the_store_gave() -> None:
    appended = store_pb2.AppendResponse(
        statuses=[message_pb2.PUT_OK] * 2,
        commitlog_offsets=[1, 2],
        queue_offsets=[5, 6],
        errors={1: "stored after a retry"},
    )
    result = to_send_response(appended, "t", 0, "b")
    assert list(result.statuses) == [broker_pb2.SEND_OK] * 2
    assert dict(result.errors) == {1: "stored after a retry"}
    plain = store_pb2.AppendResponse(statuses=[message_pb2.PUT_OK], commitlog_offsets=[3])
    assert dict(to_send_response(plain, "t", 0, "b").errors) == {}
