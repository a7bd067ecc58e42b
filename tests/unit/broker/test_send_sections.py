"""The sections of a send: whole-request checks, the per-call creation cap, answers in
section order with per-section failures, and the rights a request of sections needs."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from boltmq.v1 import broker_pb2, message_pb2
from services.broker.access.acl_file import Perm
from services.broker.access.creation_limits import CreationLimits
from services.broker.access.resources import Kind, Need, needs_of
from services.broker.config import BrokerConfig
from services.broker.errors import InvalidArgument, NotFound, PermissionDenied
from services.broker.metadata.topic_config import SCHEDULE_TOPIC, TopicConfigManager
from services.broker.send.send_sections import (
    MAX_SECTIONS,
    check_creations,
    check_sections,
    section_request,
    send_sections,
)
from tests.unit.broker.conftest import ManualClock


def section(topic: str, records: bytes = b"r", count: int = 1, queue_id: int = -1) -> object:
    return broker_pb2.SendSection(
        topic=topic, queue_id=queue_id, records=records, record_count=count
    )


def request(*topics: str, **fields: object) -> broker_pb2.SendRequest:
    return broker_pb2.SendRequest(
        producer_group="pg",
        sections=[section(t) for t in topics],
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"messages": [message_pb2.Message(topic="A", body=b"x")]}, "messages:"),
        ({"records": b"raw"}, "records:"),
        ({"record_count": 1}, "record_count:"),
        ({"topic": "A"}, "topic:"),
        ({"queue_id": -1}, "queue_id:"),
        ({"queue_id": 3}, "queue_id:"),
        ({"producer_group": "bad group!"}, "producer_group"),
        ({"default_topic_queue_nums": -1}, "default_topic_queue_nums:"),
    ],
)
def test_a_request_of_sections_with_batch_fields_beside_them_is_refused_naming_the_field(
    fields: dict[str, object], named: str
) -> None:
    bad = request("A", "B")
    for name, value in fields.items():
        if name == "messages":
            bad.messages.extend(value)  # type: ignore[arg-type]
        else:
            setattr(bad, name, value)
    with pytest.raises(InvalidArgument) as info:
        check_sections(bad)
    assert str(info.value).startswith(named)


def test_at_most_max_sections_sections() -> None:
    check_sections(request(*(f"T{n}" for n in range(MAX_SECTIONS))))
    with pytest.raises(InvalidArgument, match=f"sections: {MAX_SECTIONS + 1} sections"):
        check_sections(request(*(f"T{n}" for n in range(MAX_SECTIONS + 1))))


def test_queue_id_zero_and_empty_producer_fields_are_unset() -> None:
    check_sections(broker_pb2.SendRequest(sections=[section("A")], queue_id=0))


def test_a_section_becomes_a_raw_request_with_the_requests_producer_fields() -> None:
    outer = broker_pb2.SendRequest(producer_group="pg", default_topic_queue_nums=2)
    one = section_request(
        outer, broker_pb2.SendSection(topic="A", queue_id=3, records=b"xy", record_count=2)
    )
    assert one == broker_pb2.SendRequest(
        producer_group="pg",
        default_topic_queue_nums=2,
        topic="A",
        queue_id=3,
        records=b"xy",
        record_count=2,
    )


def test_sections_naming_more_unknown_topics_than_one_call_may_create_are_refused() -> None:
    topics = TopicConfigManager("ClusterX", "broker-x", True, ManualClock())
    limits = CreationLimits(per_call=2, per_client=0, rate_per_s=0, burst=0)
    config = BrokerConfig()
    known = [SCHEDULE_TOPIC, "%RETRY%g", "%DLQ%g", "ClusterX"]  # none of them is created
    check_creations(request("New1", "New2", "New1", *known), config, topics, limits)
    with pytest.raises(InvalidArgument, match="would create 3 topics"):
        check_creations(request("New1", "New2", "New3"), config, topics, limits)
    off = BrokerConfig(auto_create_topic_enable=False)  # nothing is created: no cap
    check_creations(request("New1", "New2", "New3"), off, topics, limits)


def test_answers_come_in_section_order_with_each_failure_in_its_own_answer() -> None:
    async def send_raw(one: broker_pb2.SendRequest, peer: str) -> broker_pb2.SendResponse:
        if one.topic == "slow":
            await asyncio.sleep(0.01)  # finishes last, answered first
        if one.topic == SCHEDULE_TOPIC:
            raise PermissionDenied(f"topic: {SCHEDULE_TOPIC} is a system topic")
        if one.topic == "gone":
            raise NotFound("topic: 'gone' does not exist")
        if one.topic == "bug":
            raise KeyError("oops")
        return broker_pb2.SendResponse(topic=one.topic, queue_id=one.queue_id, msg_id_prefix=peer)

    sent = request("slow", SCHEDULE_TOPIC, "gone", "bug", "fast")
    response = asyncio.run(send_sections(sent, "10.0.0.1:5", send_raw))
    assert (response.topic, list(response.statuses)) == ("", [])
    answers = list(response.sections)
    assert [a.response.topic for a in answers] == ["slow", "", "", "", "fast"]
    assert answers[0].code == 0 and answers[0].response.msg_id_prefix == "10.0.0.1:5"
    assert answers[1].code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert answers[1].error == f"topic: {SCHEDULE_TOPIC} is a system topic"
    assert answers[2].code == grpc.StatusCode.NOT_FOUND.value[0]
    assert answers[3].code == grpc.StatusCode.INTERNAL.value[0]
    assert answers[3].error == "KeyError: 'oops'"
    assert answers[4].code == 0 and answers[4].response.queue_id == -1


def test_a_request_of_sections_needs_pub_on_every_sections_topic() -> None:
    sent = request("A", "B", "A", "%RETRY%g1", "")
    assert needs_of("SendMessage", sent) == [
        Need(Kind.GROUP, "g1", Perm.SUB),  # a retry topic is its group's (as for any send)
        Need(Kind.TOPIC, "A", Perm.PUB),
        Need(Kind.TOPIC, "B", Perm.PUB),
    ]
