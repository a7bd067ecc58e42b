"""A SendResponse read into one SendResult per message: the usual all-stored answer
(its columns zipped at once), the answer to a send of one message (read field by field)
and an answer with failures give the same fields."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq import message
from boltmq.message import MessageQueue, SendResult, SendStatus, send_results
from boltmq.v1 import broker_pb2, message_pb2

PREFIX = "7F0000010000ABCD"
QUEUE = MessageQueue("T", "broker-a", 3)


def answer(offsets: list[int], *, failed: dict[int, str] | None = None) -> broker_pb2.SendResponse:
    failed = failed or {}
    return broker_pb2.SendResponse(
        statuses=[
            broker_pb2.SEND_FAILED if n in failed else broker_pb2.SEND_OK
            for n in range(len(offsets))
        ],
        put_statuses=[
            message_pb2.MESSAGE_ILLEGAL if n in failed else message_pb2.PUT_OK
            for n in range(len(offsets))
        ],
        queue_offsets=[-1 if n in failed else 10 + n for n in range(len(offsets))],
        commitlog_offsets=[-1 if n in failed else o for n, o in enumerate(offsets)],
        errors=failed,
        topic="T",
        broker_name="broker-a",
        queue_id=3,
        msg_id_prefix=PREFIX,
    )


def expected(offset: int, queue_offset: int, unique_id: str) -> SendResult:
    return SendResult(
        SendStatus.SEND_OK,
        f"{PREFIX}{offset:016X}",
        QUEUE,
        queue_offset,
        offset,
        "",
        "PUT_OK",
        unique_id,
    )


def test_every_field_of_an_all_stored_answer() -> None:
    results = send_results(answer([0, 255, 2**40 + 7]), ["id0", "id1", "id2"])
    assert results == [
        expected(0, 10, "id0"),
        expected(255, 11, "id1"),
        expected(2**40 + 7, 12, "id2"),
    ]
    assert results[1].msg_id == f"{PREFIX}00000000000000FF"
    assert all(type(r) is SendResult and r.status is SendStatus.SEND_OK for r in results)
    assert [r.unique_id for r in send_results(answer([5, 6]))] == ["", ""]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=300))
def test_any_offsets_give_their_msg_ids(offsets: list[int]) -> None:
    ids = [f"U{n}" for n in range(len(offsets))]
    assert send_results(answer(offsets), ids) == [
        expected(o, 10 + n, ids[n]) for n, o in enumerate(offsets)
    ]


def test_a_failed_message_keeps_its_error_and_the_others_their_fields() -> None:
    results = send_results(answer([100, 0, 300], failed={1: "body is empty"}), ["a", "b", "c"])
    assert results[0] == expected(100, 10, "a") and results[2] == expected(300, 12, "c")
    failed = results[1]
    assert (failed.status, failed.msg_id, failed.error, failed.put_status, failed.unique_id) == (
        SendStatus.SEND_FAILED,
        "",
        "body is empty",
        "MESSAGE_ILLEGAL",
        "b",
    )


def test_an_empty_answer_has_no_results() -> None:
    assert send_results(answer([])) == []


def test_the_answer_to_one_message_gives_the_same_fields() -> None:
    assert send_results(answer([2**40 + 7]), ["only"]) == [expected(2**40 + 7, 10, "only")]
    assert send_results(answer([9])) == [expected(9, 10, "")]
    failed = send_results(answer([9], failed={0: "too big"}), ["f"])[0]
    assert (failed.status, failed.msg_id, failed.error, failed.unique_id) == (
        SendStatus.SEND_FAILED,
        "",
        "too big",
        "f",
    )
    stored_but_flagged = answer([9])
    stored_but_flagged.statuses[0] = broker_pb2.SEND_FLUSH_DISK_TIMEOUT
    flagged = send_results(stored_but_flagged)[0]
    assert (flagged.status, flagged.msg_id) == (SendStatus.FLUSH_DISK_TIMEOUT, f"{PREFIX}{9:016X}")


def test_results_name_their_queue_through_a_bounded_cache() -> None:
    first = send_results(answer([1]))[0].queue
    assert first == QUEUE and send_results(answer([2, 3]))[0].queue is first  # kept
    for queue_id in range(message._QUEUES_MAX + 1):  # a full cache starts again
        response = answer([1])
        response.queue_id = queue_id
        assert send_results(response)[0].queue == MessageQueue("T", "broker-a", queue_id)
    assert len(message._QUEUES) <= message._QUEUES_MAX
