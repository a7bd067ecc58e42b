"""SendRequest.sections across real processes: several topics' raw batches in one send.

One registry, store and broker for the module. A request of sections is sent
over a unary SendMessage and over a SendStream; each section is answered as a
raw request of its own would be (stored where its answer says, or refused with
its own code while the others are stored), and requests malformed as a whole
are refused INVALID_ARGUMENT with nothing stored. The ACL side is
tests/integration/test_acl_send_sections.py.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.pull_consumer import decode_records
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2
from boltmq.wire.record import PROPERTY_DELAY, SYS_FLAG_OFFSET, SYS_FLAG_TRANSACTION_MASK
from boltmq.wire.record_batch import RECORDS_MAX, encode_send_record
from services.broker.metadata.topic_config import SCHEDULE_TOPIC
from tests.integration.broker_fixtures import RPC_TIMEOUT_S, pull, upsert
from tests.integration.conftest import Cluster
from tests.integration.send_stream_client import RawStream
from tests.waiting import wait_until

OK = grpc.StatusCode.OK.value[0]


@pytest.fixture(scope="module")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the broker writes every span it finishes (one JSON line each)."""
    return Path(tmp_path_factory.mktemp("sections-spans")) / "broker-spans.jsonl"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, spans_file: Path) -> Iterator[Cluster]:
    started = Cluster(
        Path(tmp_path_factory.mktemp("sections")), broker_settings=(f"trace_file={spans_file}",)
    )
    yield started
    started.stop()


@pytest.fixture(scope="module")
def stub(cluster: Cluster) -> Iterator[broker_pb2_grpc.BrokerServiceStub]:
    channel = sync_channel(cluster.broker.address)
    made = broker_pb2_grpc.BrokerServiceStub(channel)
    upsert(made, "SecA", queues=2)
    upsert(made, "SecB", queues=4)
    yield made
    channel.close()


def section(topic: str, *bodies: bytes, queue_id: int = -1) -> broker_pb2.SendSection:
    """A section of one record per body, encoded as the SDK's raw sends are."""
    return broker_pb2.SendSection(
        topic=topic,
        queue_id=queue_id,
        records=b"".join(encode_send_record(topic, body) for body in bodies),
        record_count=len(bodies),
    )


def sections_request(*sections: broker_pb2.SendSection) -> broker_pb2.SendRequest:
    return broker_pb2.SendRequest(producer_group="sections-pg", sections=sections)


def stored_at(
    stub: broker_pb2_grpc.BrokerServiceStub, topic: str, queue_id: int, offset: int, count: int
) -> list[bytes]:
    """The bodies of ``count`` records of a queue from ``offset``."""
    pulled = pull(stub, topic, queue_id=queue_id, offset=offset, raw_records=True)
    return [bytes(m.body) for m in decode_records(pulled.records)][:count]


def queue_end(stub: broker_pb2_grpc.BrokerServiceStub, topic: str) -> int:
    """Messages stored in ``topic`` (its queues' max offsets summed); 0 for no topic."""
    try:
        status = stub.TopicStatus(broker_pb2.TopicStatusRequest(topic=topic), timeout=RPC_TIMEOUT_S)
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc.details()
        return 0
    return sum(q.max_offset for q in status.queues)


def topic_names(stub: broker_pb2_grpc.BrokerServiceStub) -> set[str]:
    listed = stub.ListTopics(broker_pb2.ListTopicsRequest(), timeout=RPC_TIMEOUT_S)
    return {t.name for t in listed.topics}


def on_stream(cluster: Cluster, request: broker_pb2.SendRequest) -> broker_pb2.SendStreamResponse:
    """``request`` sent as the one message of a fresh SendStream; its answer."""
    stream = RawStream(cluster.broker.address)
    try:
        stream.send(1, request.SerializeToString())
        return stream.read()
    finally:
        stream.close()


def check_stored(
    stub: broker_pb2_grpc.BrokerServiceStub,
    answers: list[broker_pb2.SectionAnswer],
    expected: list[tuple[str, list[bytes]]],
) -> None:
    """Every answer SEND_OK for its section's records, each record stored where it says."""
    assert len(answers) == len(expected)
    for answer, (topic, bodies) in zip(answers, expected, strict=True):
        assert answer.code == OK, answer.error
        response = answer.response
        assert response.topic == topic and not response.sections
        assert list(response.statuses) == [broker_pb2.SEND_OK] * len(bodies)
        first = response.queue_offsets[0]
        assert list(response.queue_offsets) == list(range(first, first + len(bodies)))
        assert stored_at(stub, topic, response.queue_id, first, len(bodies)) == bodies


@pytest.mark.parametrize("path", ["unary", "stream"])
def test_sections_of_three_topics_are_each_stored_where_their_answer_says(
    cluster: Cluster, stub: broker_pb2_grpc.BrokerServiceStub, path: str
) -> None:
    fresh = f"SecNew-{path}"  # auto-created by its section
    assert fresh not in topic_names(stub)
    expected = [
        ("SecA", [f"{path}-a1".encode()]),
        (fresh, [f"{path}-n1".encode(), f"{path}-n2".encode()]),
        ("SecB", [f"{path}-b{n}".encode() for n in range(3)]),
    ]
    request = sections_request(
        section("SecA", *expected[0][1], queue_id=1),
        section(fresh, *expected[1][1]),  # queue_id -1: the broker picks
        section("SecB", *expected[2][1], queue_id=-1),
    )
    if path == "unary":
        response = stub.SendMessage(request, timeout=RPC_TIMEOUT_S)
    else:
        answer = on_stream(cluster, request)
        assert answer.code == OK, answer.error
        response = answer.response
    assert (response.topic, list(response.statuses), response.broker_name) == ("", [], "")
    answers = list(response.sections)
    check_stored(stub, answers, expected)
    assert answers[0].response.queue_id == 1
    assert 0 <= answers[2].response.queue_id < 4
    assert fresh in topic_names(stub)


def test_a_refused_section_is_answered_alone_and_the_others_are_stored(
    cluster: Cluster, stub: broker_pb2_grpc.BrokerServiceStub
) -> None:
    malformed = section("SecB", b"only one", queue_id=0)
    malformed.record_count = 2  # two records announced, one record's bytes
    ends = {t: queue_end(stub, t) for t in ("SecA", "SecB", SCHEDULE_TOPIC, "%RETRY%sec-g")}
    request = sections_request(
        section("SecA", b"first good"),
        section(SCHEDULE_TOPIC, b"a system topic"),
        malformed,
        section("SecA", b"last good", b"and another"),
        section("%RETRY%sec-g", b"a retry topic"),
    )
    answers = list(stub.SendMessage(request, timeout=RPC_TIMEOUT_S).sections)
    check_stored(
        stub,
        [answers[0], answers[3]],
        [("SecA", [b"first good"]), ("SecA", [b"last good", b"and another"])],
    )
    assert answers[1].code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert f"topic: {SCHEDULE_TOPIC} is a system topic" in answers[1].error
    assert not answers[1].HasField("response")
    assert answers[4].code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert "is a retry or dead-letter topic" in answers[4].error
    alone = broker_pb2.SendRequest(
        producer_group="sections-pg",
        topic="SecB",
        queue_id=0,
        records=malformed.records,
        record_count=2,
    )
    raw = stub.SendMessage(alone, timeout=RPC_TIMEOUT_S)  # the same section as a raw send
    assert answers[2].code == OK
    assert answers[2].response == raw
    assert list(raw.statuses) == [broker_pb2.SEND_FAILED] * 2 and raw.errors
    assert queue_end(stub, "SecA") == ends["SecA"] + 3
    assert queue_end(stub, "SecB") == ends["SecB"]
    assert queue_end(stub, SCHEDULE_TOPIC) == ends[SCHEDULE_TOPIC]
    assert queue_end(stub, "%RETRY%sec-g") == ends["%RETRY%sec-g"] == 0
    assert "Traceback" not in cluster.broker.log()


def test_records_refused_inside_a_section_keep_their_places_and_the_rest_are_stored(
    cluster: Cluster, stub: broker_pb2_grpc.BrokerServiceStub
) -> None:
    flagged = bytearray(encode_send_record("SecA", b"flagged"))
    flagged[SYS_FLAG_OFFSET + 3] |= SYS_FLAG_TRANSACTION_MASK  # a client's transaction bits
    mixed = broker_pb2.SendSection(
        topic="SecA",
        queue_id=1,
        records=b"".join(
            (
                encode_send_record("SecA", b"kept 1"),
                bytes(flagged),
                encode_send_record("SecB", b"another topic's"),
                encode_send_record("SecA", b"kept 2"),
            )
        ),
        record_count=4,
    )
    request = sections_request(section("SecB", b"beside"), mixed)
    answers = list(stub.SendMessage(request, timeout=RPC_TIMEOUT_S).sections)
    check_stored(stub, answers[:1], [("SecB", [b"beside"])])
    response = answers[1].response
    assert answers[1].code == OK and response.queue_id == 1
    assert list(response.statuses) == [
        broker_pb2.SEND_OK,
        broker_pb2.SEND_FAILED,
        broker_pb2.SEND_FAILED,
        broker_pb2.SEND_OK,
    ]
    assert list(response.put_statuses)[1:3] == [message_pb2.MESSAGE_ILLEGAL] * 2
    assert "transaction bits" in response.errors[1] and "topic" in response.errors[2]
    assert set(response.errors) == {1, 2}
    first, _, _, last = response.queue_offsets
    assert last == first + 1 and list(response.queue_offsets)[1:3] == [-1, -1]
    assert list(response.commitlog_offsets)[1:3] == [-1, -1]
    assert stored_at(stub, "SecA", 1, first, 2) == [b"kept 1", b"kept 2"]


def test_sections_of_more_records_than_one_store_append_takes_are_all_stored_in_order(
    cluster: Cluster, stub: broker_pb2_grpc.BrokerServiceStub
) -> None:
    per_section = 3_500
    count = RECORDS_MAX // per_section + 1  # more records than one Append may carry
    sent = [[b"%d-%d" % (n, i) for i in range(per_section)] for n in range(count)]
    topics = [("SecA", 1), ("SecB", 2)]
    request = sections_request(
        *(section(topics[n % 2][0], *b, queue_id=topics[n % 2][1]) for n, b in enumerate(sent))
    )
    answers = list(stub.SendMessage(request, timeout=RPC_TIMEOUT_S).sections)
    assert count * per_section > RECORDS_MAX and len(answers) == count
    firsts: dict[str, list[int]] = {"SecA": [], "SecB": []}
    for n, (answer, bodies) in enumerate(zip(answers, sent, strict=True)):
        response = answer.response
        assert answer.code == OK and response.topic == topics[n % 2][0]
        assert list(response.statuses) == [broker_pb2.SEND_OK] * per_section
        first = response.queue_offsets[0]
        assert list(response.queue_offsets) == list(range(first, first + per_section))
        firsts[response.topic].append(first)
        queue_id = response.queue_id
        assert stored_at(stub, response.topic, queue_id, first, 3) == bodies[:3]
        assert stored_at(stub, response.topic, queue_id, first + per_section - 2, 2) == bodies[-2:]
    for offsets in firsts.values():  # a topic's sections one after another, in order
        assert all(b - a == per_section for a, b in itertools.pairwise(offsets))


def test_a_delayed_section_goes_through_the_schedule_topic_as_a_raw_send_would(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    upsert(stub, "SecDelayed", queues=1)
    scheduled = queue_end(stub, SCHEDULE_TOPIC)
    delayed = broker_pb2.SendSection(
        topic="SecDelayed",
        queue_id=0,
        records=encode_send_record("SecDelayed", b"later", properties={PROPERTY_DELAY: "1"}),
        record_count=1,
    )
    answers = stub.SendMessage(
        sections_request(delayed, section("SecA", b"now")), timeout=RPC_TIMEOUT_S
    ).sections
    assert [a.code for a in answers] == [OK, OK]
    assert list(answers[0].response.statuses) == [broker_pb2.SEND_OK]
    assert queue_end(stub, SCHEDULE_TOPIC) == scheduled + 1  # held for level 1 (1 s)
    wait_until(lambda: queue_end(stub, "SecDelayed") == 1, "the delayed section's delivery")
    assert stored_at(stub, "SecDelayed", 0, 0, 1) == [b"later"]


def _with_messages(request: broker_pb2.SendRequest) -> broker_pb2.SendRequest:
    request.messages.append(message_pb2.Message(topic="SecA", queue_id=0, body=b"beside"))
    return request


def _bad_requests() -> list[tuple[str, broker_pb2.SendRequest, str]]:
    good = [section("SecA", b"never stored"), section("SecB", b"never stored")]
    raw = encode_send_record("SecA", b"beside")
    return [
        ("records", broker_pb2.SendRequest(sections=good, records=raw), "records:"),
        ("record_count", broker_pb2.SendRequest(sections=good, record_count=1), "record_count:"),
        ("topic", broker_pb2.SendRequest(sections=good, topic="SecA"), "topic:"),
        ("queue_id", broker_pb2.SendRequest(sections=good, queue_id=-1), "queue_id:"),
        ("messages", _with_messages(broker_pb2.SendRequest(sections=good)), "messages:"),
        (
            "1025 sections",
            broker_pb2.SendRequest(sections=[good[0]] * 1025),
            "sections: 1025 sections in one request, at most 1024",
        ),
        (
            "producer_group",
            broker_pb2.SendRequest(sections=good, producer_group="bad group!"),
            "producer_group:",
        ),
    ]


@pytest.mark.parametrize("path", ["unary", "stream"])
def test_requests_malformed_as_a_whole_are_refused_naming_the_field_and_store_nothing(
    cluster: Cluster, stub: broker_pb2_grpc.BrokerServiceStub, path: str
) -> None:
    ends = {t: queue_end(stub, t) for t in ("SecA", "SecB")}
    for what, request, named in _bad_requests():
        if path == "unary":
            with pytest.raises(grpc.RpcError) as caught:
                stub.SendMessage(request, timeout=RPC_TIMEOUT_S)
            code, details = caught.value.code(), caught.value.details()  # type: ignore[attr-defined]
        else:
            answer = on_stream(cluster, request)
            code = next(c for c in grpc.StatusCode if c.value[0] == answer.code)
            details = answer.error
        assert code == grpc.StatusCode.INVALID_ARGUMENT, what
        assert details.startswith(named), (what, details)
    assert {t: queue_end(stub, t) for t in ("SecA", "SecB")} == ends


def test_sections_naming_more_new_topics_than_one_call_may_create_create_none(
    stub: broker_pb2_grpc.BrokerServiceStub,
) -> None:
    fresh = [f"SecMany{n}" for n in range(33)]  # auto_create_max_per_call is 32
    request = sections_request(*(section(t, b"x") for t in fresh))
    with pytest.raises(grpc.RpcError) as caught:
        stub.SendMessage(request, timeout=RPC_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "sections: the call would create 33 topics" in caught.value.details()  # type: ignore[attr-defined]
    assert not topic_names(stub) & set(fresh)


def test_each_section_is_described_on_a_span_of_its_own_under_the_calls(
    stub: broker_pb2_grpc.BrokerServiceStub, spans_file: Path
) -> None:
    topics = ["SecTracedA", "SecTracedB"]
    request = sections_request(section(topics[0], b"a"), section(topics[1], b"b1", b"b2"))
    answers = stub.SendMessage(request, timeout=RPC_TIMEOUT_S).sections
    assert [a.code for a in answers] == [OK, OK]

    def spans() -> list[dict[str, Any]]:
        return [json.loads(line) for line in spans_file.read_text().splitlines()]

    def sections_spans() -> list[dict[str, Any]]:
        return [
            s
            for s in spans()
            if s["name"] == "send section"
            and s["attributes"].get("messaging.destination.name") in topics
        ]

    def parents() -> set[str]:
        return {s["parent_id"] for s in sections_spans()}

    wait_until(lambda: len(sections_spans()) == 2, "the sections' spans")
    by_topic = {s["attributes"]["messaging.destination.name"]: s for s in sections_spans()}
    assert by_topic[topics[0]]["attributes"]["messaging.batch.message_count"] == 1
    assert by_topic[topics[1]]["attributes"]["messaging.batch.message_count"] == 2
    assert len(parents()) == 1 and None not in parents()
    wait_until(  # the call's span ends after its sections'
        lambda: any(s["context"]["span_id"] in parents() for s in spans()), "the call's span"
    )
    call = next(s for s in spans() if s["context"]["span_id"] in parents())
    assert call["name"] == "/boltmq.v1.BrokerService/SendMessage"
    assert "messaging.destination.name" not in call["attributes"]


def test_send_stream_says_it_takes_sections_beside_more(cluster: Cluster) -> None:
    stream = RawStream(cluster.broker.address)
    try:
        metadata = stream.initial_metadata()
    finally:
        stream.close()
    assert ("boltmq-send-sections", "1") in metadata
    assert ("boltmq-send-more", "1") in metadata
