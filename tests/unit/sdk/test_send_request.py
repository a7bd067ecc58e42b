"""The request of a natural batch, one topic or sections, and each send's share of the answer."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import pytest

from boltmq.message import SendStatus
from boltmq.send_batcher import SendBatcher
from boltmq.send_request import (
    SECTIONS_MAX,
    SectionsRefused,
    SendPart,
    batch_request,
    outcome_results,
    part_outcomes,
    send_batched,
    send_parts,
)
from boltmq.send_stream import StreamSendError
from boltmq.v1 import broker_pb2, message_pb2


def part(topic: str, records: bytes, queue_id: int = -1) -> SendPart:
    """A part of one-byte records (the bytes stand for records here)."""
    return SendPart(topic, queue_id, records, len(records))


def stored(topic: str, count: int, first_offset: int = 0) -> broker_pb2.SendResponse:
    """The answer storing ``count`` messages of ``topic`` in queue 1 from ``first_offset``."""
    return broker_pb2.SendResponse(
        statuses=[broker_pb2.SEND_OK] * count,
        put_statuses=[message_pb2.PUT_OK] * count,
        queue_offsets=list(range(first_offset, first_offset + count)),
        commitlog_offsets=[100 + n for n in range(count)],
        topic=topic,
        broker_name="broker-a",
        queue_id=1,
        msg_id_prefix="7F000001",
    )


def offsets(outcome: object) -> list[tuple[str, int]]:
    assert not isinstance(outcome, BaseException), outcome
    assert isinstance(outcome, Sequence)
    return [(r.queue.topic, r.queue_offset) for r in outcome]


def test_parts_of_one_topic_are_one_raw_request_to_the_first_parts_queue() -> None:
    parts = [part("A", b"ab", 2), part("A", b"c", 0)]
    request, layout = batch_request("pg", 8, parts)
    assert (request.topic, request.queue_id, request.records, request.record_count) == (
        "A",
        2,
        b"abc",
        3,
    )
    assert request.producer_group == "pg" and request.default_topic_queue_nums == 8
    assert not request.sections and layout == [[0, 1]]
    outcomes = part_outcomes(stored("A", 3), parts, layout)
    assert [offsets(o) for o in outcomes] == [[("A", 0), ("A", 1)], [("A", 2)]]


def test_parts_of_several_topics_are_sections_grouped_by_topic_in_first_order() -> None:
    parts = [part("A", b"a", 3), part("B", b"bb", 0), part("A", b"c", 1)]
    request, layout = batch_request("pg", 0, parts)
    assert not request.records and not request.topic and request.record_count == 0
    assert [(s.topic, s.queue_id, s.records, s.record_count) for s in request.sections] == [
        ("A", 3, b"ac", 2),
        ("B", 0, b"bb", 2),
    ]
    assert layout == [[0, 2], [1]]
    response = broker_pb2.SendResponse(
        sections=[
            broker_pb2.SectionAnswer(response=stored("A", 2, 10)),
            broker_pb2.SectionAnswer(response=stored("B", 2, 20)),
        ]
    )
    outcomes = part_outcomes(response, parts, layout)
    assert [offsets(o) for o in outcomes] == [
        [("A", 10)],
        [("B", 20), ("B", 21)],
        [("A", 11)],
    ]


def test_a_section_answered_with_a_code_fails_its_sends_alone() -> None:
    parts = [part("A", b"a"), part("Denied", b"b"), part("Denied", b"c")]
    request, layout = batch_request("pg", 0, parts)
    response = broker_pb2.SendResponse(
        sections=[
            broker_pb2.SectionAnswer(response=stored("A", 1)),
            broker_pb2.SectionAnswer(
                code=grpc.StatusCode.PERMISSION_DENIED.value[0], error="topic Denied: no"
            ),
        ]
    )
    outcomes = part_outcomes(response, parts, layout)
    assert offsets(outcomes[0]) == [("A", 0)]
    for failed in outcomes[1:]:
        assert isinstance(failed, StreamSendError)
        assert failed.code() is grpc.StatusCode.PERMISSION_DENIED
        assert failed.details() == "topic Denied: no"
        with pytest.raises(StreamSendError):
            outcome_results(failed)


def test_an_answer_of_another_shape_fails_every_send_as_internal() -> None:
    parts = [part("A", b"a"), part("B", b"b")]
    _, layout = batch_request("pg", 0, parts)
    response = broker_pb2.SendResponse(sections=[broker_pb2.SectionAnswer(response=stored("A", 1))])
    outcomes = part_outcomes(response, parts, layout)
    assert all(isinstance(o, StreamSendError) for o in outcomes)
    assert all(o.code() is grpc.StatusCode.INTERNAL for o in outcomes)  # type: ignore[union-attr]
    assert "1 sections for 2" in outcomes[0].details()  # type: ignore[union-attr]


def test_more_topics_than_a_request_takes_are_refused_before_sending() -> None:
    parts = [part(f"T{n}", b"x") for n in range(SECTIONS_MAX + 1)]
    with pytest.raises(ValueError, match="at most 1024"):
        batch_request("pg", 0, parts)


class Refusing:
    """A call failing with ``code``, then answering every request of one topic."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code
        self.requests: list[broker_pb2.SendRequest] = []

    def __call__(self, data: bytes, timeout_s: float) -> broker_pb2.SendResponse:
        request = broker_pb2.SendRequest.FromString(data)
        self.requests.append(request)
        if len(self.requests) == 1:
            raise StreamSendError(self.code, "refused")
        return stored(request.topic, request.record_count)


def test_sections_refused_whole_for_good_are_sent_again_alone() -> None:
    two = [part("A", b"a"), part("B", b"b")]
    denied = Refusing(grpc.StatusCode.PERMISSION_DENIED)
    with pytest.raises(SectionsRefused):
        send_parts(denied, "pg", 0, two, 1.0)
    busy = Refusing(grpc.StatusCode.UNAVAILABLE)  # a retry may cure it: the sends retry
    with pytest.raises(StreamSendError):
        send_parts(busy, "pg", 0, two, 1.0)
    alone = Refusing(grpc.StatusCode.PERMISSION_DENIED)  # one topic: its own refusal
    with pytest.raises(StreamSendError):
        send_parts(alone, "pg", 0, two[:1], 1.0)


def test_a_send_whose_sections_were_refused_goes_again_alone_through_the_batcher() -> None:
    batcher: SendBatcher[SendPart, object] = SendBatcher(256, 1 << 20)
    calls: list[list[str]] = []

    def call(parts: Sequence[SendPart], timeout_s: float) -> list[object]:
        calls.append([p.topic for p in parts])
        if len(calls) == 1:
            raise SectionsRefused("PERMISSION_DENIED: topic B")
        return [["ok"] * p.record_count for p in parts]

    mine = part("A", b"ab")
    results = send_batched(batcher, ("broker-a",), mine, 1e12, call)  # type: ignore[arg-type]
    assert results == ["ok", "ok"]
    assert calls == [["A"], ["A"]]


def test_a_stored_results_status_comes_through() -> None:
    parts = [part("A", b"a")]
    request, layout = batch_request("pg", 0, parts)
    (outcome,) = part_outcomes(stored("A", 1), parts, layout)
    assert [r.status for r in outcome_results(outcome)] == [SendStatus.SEND_OK]
    assert request.record_count == 1


def test_each_result_carries_its_parts_unique_id() -> None:
    def with_ids(topic: str, ids: str, queue_id: int = -1) -> SendPart:
        return SendPart(topic, queue_id, ids.encode(), len(ids), tuple(ids))

    alone = [with_ids("A", "xyz")]
    (outcome,) = part_outcomes(stored("A", 3), alone, batch_request("pg", 0, alone)[1])
    assert [r.unique_id for r in outcome_results(outcome)] == ["x", "y", "z"]
    assert [r.msg_id for r in outcome_results(outcome)] == [
        f"7F000001{100 + n:016X}" for n in range(3)
    ]
    one_topic = [with_ids("A", "ab"), with_ids("A", "c")]
    outcomes = part_outcomes(stored("A", 3), one_topic, batch_request("pg", 0, one_topic)[1])
    assert [[r.unique_id for r in outcome_results(o)] for o in outcomes] == [["a", "b"], ["c"]]
    sections = [with_ids("A", "a"), with_ids("B", "bc"), with_ids("A", "d")]
    response = broker_pb2.SendResponse(
        sections=[
            broker_pb2.SectionAnswer(response=stored("A", 2)),
            broker_pb2.SectionAnswer(response=stored("B", 2)),
        ]
    )
    outcomes = part_outcomes(response, sections, batch_request("pg", 0, sections)[1])
    assert [[r.unique_id for r in outcome_results(o)] for o in outcomes] == [
        ["a"],
        ["b", "c"],
        ["d"],
    ]


def test_an_answer_of_another_count_of_results_fails_the_parts() -> None:
    for answered in (1, 3):
        parts = [SendPart("A", -1, b"a", 1, ("a",)), SendPart("A", -1, b"b", 1, ("b",))]
        outcomes = part_outcomes(stored("A", answered), parts, [[0, 1]])
        for outcome in outcomes:
            assert isinstance(outcome, StreamSendError)
            assert outcome.code() is grpc.StatusCode.INTERNAL
            assert outcome.details() == f"the broker answered {answered} results for 2 messages"
