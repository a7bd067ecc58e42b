"""The RocketMQ 5 protocol on the broker, call by call, with bad inputs.

Raw calls through BoltMQ's own stubs of apache.rocketmq.v2 (no official client: it would
refuse most of these before sending). Every refusal is a Status with the protocol's
code, nothing refused is stored, and nothing hangs. The protos are compared with the
pinned official client's, field for field.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, duration_pb2, timestamp_pb2

from boltmq.kernel.channels import sync_channel
from boltmq.rocketmq.v2 import admin_pb2, definition_pb2, service_pb2, service_pb2_grpc
from boltmq.rocketmq.v2 import definition_pb2 as v2
from tests.integration.conftest import Cluster
from tests.integration.rocketmq.official_client import RMQ_PYTHON, SCRIPTS, needs_official_client
from tests.integration.sdk_fixtures import pull_everything

CLIENT = (("x-mq-client-id", "raw-test-client"),)
TIMEOUT_S = 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The module's cluster; its broker writes its spans to ``<tmp>/broker-spans.jsonl``."""
    tmp = Path(tmp_path_factory.mktemp("rmq-protocol"))
    started = Cluster(tmp, (f"trace_file={tmp / 'broker-spans.jsonl'}",))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def stub(cluster: Cluster) -> service_pb2_grpc.MessagingServiceStub:
    """A stub on the broker, once RawTopic exists (its route auto-creates it); nothing is
    ever stored in RawTopic."""
    stub = service_pb2_grpc.MessagingServiceStub(sync_channel(cluster.broker.address))
    route = stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=v2.Resource(name="RawTopic")), timeout=TIMEOUT_S
    )
    assert code(route.status) == "OK"
    return stub


def message(topic: str = "RawTopic", body: bytes = b"x", **system: Any) -> v2.Message:
    system.setdefault("message_id", f"raw-{time.monotonic_ns()}")
    system.setdefault("message_type", v2.NORMAL)
    properties = system.pop("user_properties", {})
    return v2.Message(
        topic=v2.Resource(name=topic),
        body=body,
        user_properties=properties,
        system_properties=v2.SystemProperties(**system),
    )


def send(stub: service_pb2_grpc.MessagingServiceStub, *messages: v2.Message) -> Any:
    return stub.SendMessage(
        service_pb2.SendMessageRequest(messages=messages), metadata=CLIENT, timeout=TIMEOUT_S
    )


def code(status: v2.Status) -> str:
    return v2.Code.Name(status.code)


@needs_official_client
def test_the_protos_match_the_official_clients_field_for_field() -> None:
    done = subprocess.run(
        [str(RMQ_PYTHON), str(SCRIPTS / "rmq_descriptors.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    theirs = json.loads(done.stdout)
    for name, ours in (
        ("definition_pb2", definition_pb2),
        ("service_pb2", service_pb2),
        ("admin_pb2", admin_pb2),
    ):
        mine = descriptor_pb2.FileDescriptorProto()
        ours.DESCRIPTOR.CopyToProto(mine)
        other = descriptor_pb2.FileDescriptorProto.FromString(bytes.fromhex(theirs[name]))
        assert mine.package == other.package == "apache.rocketmq.v2"
        assert _shape(mine) == _shape(other), name


def _shape(proto: descriptor_pb2.FileDescriptorProto) -> dict[str, Any]:
    """What the wire depends on: messages (fields: number, name, type, label, type name,
    oneof, optional), enums (values), services (methods, streaming, types)."""

    def message_shape(m: descriptor_pb2.DescriptorProto) -> Any:
        return (
            sorted(
                (
                    f.number,
                    f.name,
                    f.type,
                    f.label,
                    f.type_name,
                    f.HasField("oneof_index") and m.oneof_decl[f.oneof_index].name,
                    f.proto3_optional,
                )
                for f in m.field
            ),
            {n.name: message_shape(n) for n in m.nested_type},
            {e.name: sorted((v.name, v.number) for v in e.value) for e in m.enum_type},
        )

    return {
        "messages": {m.name: message_shape(m) for m in proto.message_type},
        "enums": {e.name: sorted((v.name, v.number) for v in e.value) for e in proto.enum_type},
        "services": {
            s.name: sorted(
                (r.name, r.input_type, r.output_type, r.client_streaming, r.server_streaming)
                for r in s.method
            )
            for s in proto.service
        },
    }


def test_query_route_lists_every_queue_with_the_brokers_endpoints(
    cluster: Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    answer = stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=v2.Resource(name="RawRoute")), timeout=TIMEOUT_S
    )
    assert code(answer.status) == "OK"
    host, port = cluster.broker.address.rsplit(":", 1)
    assert sorted(q.id for q in answer.message_queues) == [0, 1, 2, 3]
    for queue in answer.message_queues:
        assert queue.permission == v2.READ_WRITE
        assert queue.broker.name == "broker-a" and queue.broker.id == 0
        assert [(a.host, a.port) for a in queue.broker.endpoints.addresses] == [(host, int(port))]
        assert set(queue.accept_message_types) == {v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION}
    refused = stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=v2.Resource(name="bad/topic")), timeout=TIMEOUT_S
    )
    assert code(refused.status) == "ILLEGAL_TOPIC" and "bad/topic" in refused.status.message
    spaced = stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=v2.Resource(name="T", resource_namespace="ns")),
        timeout=TIMEOUT_S,
    )
    assert code(spaced.status) == "BAD_REQUEST" and "namespace" in spaced.status.message


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (message(body=b""), "MESSAGE_BODY_EMPTY"),
        (message(body=b"x" * (4 * 1024 * 1024 + 1)), "MESSAGE_BODY_TOO_LARGE"),
        (message(message_id="not an id!"), "ILLEGAL_MESSAGE_ID"),
        (message(user_properties={"UNIQ_KEY": "forged"}), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
        (message(user_properties={"DELAY": "3"}), "ILLEGAL_MESSAGE_PROPERTY_KEY"),
        (message(message_type=v2.FIFO), "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"),
        (message(message_group="g"), "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"),
        (message(message_type=v2.DELAY), "MESSAGE_PROPERTY_CONFLICT_WITH_TYPE"),
        (message(message_type=v2.LITE, lite_topic="l"), "UNSUPPORTED"),
        (message(message_type=v2.PRIORITY, priority=1), "UNSUPPORTED"),
        (
            message(
                message_type=v2.DELAY,
                delivery_timestamp=timestamp_pb2.Timestamp(seconds=int(time.time()) + 10**7),
            ),
            "ILLEGAL_DELIVERY_TIME",
        ),
        (message(topic="bad/topic"), "ILLEGAL_TOPIC"),
        (message(topic="RMQ_SYS_TRANS_HALF_TOPIC"), "FORBIDDEN"),
        (message(topic="%DLQ%some-group"), "FORBIDDEN"),
        (message(body=b"not gzip", body_encoding=v2.GZIP), "MESSAGE_CORRUPTED"),
    ],
)
def test_bad_messages_are_refused_with_the_protocols_code_and_nothing_is_stored(
    cluster: Cluster, stub: service_pb2_grpc.MessagingServiceStub, bad: v2.Message, expected: str
) -> None:
    answer = send(stub, bad)
    assert code(answer.status) == expected, answer.status.message
    assert [code(e.status) for e in answer.entries] == [expected]
    assert answer.status.message  # says why
    assert pull_everything(cluster, "RawTopic") == []


def test_a_batch_answers_each_message_and_a_gzip_body_is_stored_unpacked(
    cluster: Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    good = message("RawBatch", gzip.compress(b"packed"), body_encoding=v2.GZIP)
    answer = send(stub, good, message("RawBatch", b""), message("RawBatch", b"plain"))
    assert code(answer.status) == "MULTIPLE_RESULTS"
    assert [code(e.status) for e in answer.entries] == ["OK", "MESSAGE_BODY_EMPTY", "OK"]
    assert sorted(bytes(m.body) for m in pull_everything(cluster, "RawBatch")) == [
        b"packed",
        b"plain",
    ]
    assert code(send(stub).status) == "BAD_REQUEST"


def test_end_transaction_refuses_unknown_and_malformed_transactions(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    def end(transaction_id: str, resolution: int = v2.COMMIT) -> str:
        answer = stub.EndTransaction(
            service_pb2.EndTransactionRequest(
                topic=v2.Resource(name="RawTx"),
                message_id="m",
                transaction_id=transaction_id,
                resolution=resolution,
            ),
            metadata=CLIENT,
            timeout=TIMEOUT_S,
        )
        return code(answer.status)

    assert end("not-a-number") == "INVALID_TRANSACTION_ID"
    assert end("123456789") == "INVALID_TRANSACTION_ID"  # no half message there
    assert end("1", v2.TRANSACTION_RESOLUTION_UNSPECIFIED) == "BAD_REQUEST"
    half = send(stub, message("RawTx", b"half", message_type=v2.TRANSACTION))
    (entry,) = half.entries
    assert code(entry.status) == "OK" and entry.transaction_id.isdigit()
    assert end(entry.transaction_id, v2.ROLLBACK) == "OK"
    assert end(entry.transaction_id, v2.ROLLBACK) == "OK"  # a repeat answers the decision
    assert end(entry.transaction_id, v2.COMMIT) == "PRECONDITION_FAILED"


def test_calls_without_a_client_id_or_with_an_unknown_client_type_are_refused(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    beat = stub.Heartbeat(service_pb2.HeartbeatRequest(client_type=v2.PRODUCER), timeout=TIMEOUT_S)
    assert code(beat.status) == "CLIENT_ID_REQUIRED"
    unknown = stub.Heartbeat(
        service_pb2.HeartbeatRequest(client_type=99), metadata=CLIENT, timeout=TIMEOUT_S
    )
    assert code(unknown.status) == "UNRECOGNIZED_CLIENT_TYPE"
    good = stub.Heartbeat(
        service_pb2.HeartbeatRequest(client_type=v2.PRODUCER), metadata=CLIENT, timeout=TIMEOUT_S
    )
    assert code(good.status) == "OK"


def receive(stub: service_pb2_grpc.MessagingServiceStub, **fields: Any) -> list[Any]:
    fields.setdefault("group", v2.Resource(name="raw-group"))
    fields.setdefault("message_queue", v2.MessageQueue(topic=v2.Resource(name="RawTopic")))
    fields.setdefault("batch_size", 4)
    fields.setdefault("long_polling_timeout", duration_pb2.Duration(seconds=1))
    request = service_pb2.ReceiveMessageRequest(**fields)
    return list(stub.ReceiveMessage(request, metadata=CLIENT, timeout=TIMEOUT_S))


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"group": v2.Resource(name="bad group")}, "ILLEGAL_CONSUMER_GROUP"),
        ({"invisible_duration": duration_pb2.Duration(nanos=1000)}, "ILLEGAL_INVISIBLE_TIME"),
        ({"long_polling_timeout": duration_pb2.Duration(seconds=10**6)}, "ILLEGAL_POLLING_TIME"),
        ({"batch_size": 0}, "BAD_REQUEST"),
        ({"batch_size": 33}, "BAD_REQUEST"),
        (
            {"filter_expression": v2.FilterExpression(type=v2.SQL, expression="a > 1")},
            "ILLEGAL_FILTER_EXPRESSION",
        ),
        (
            {"message_queue": v2.MessageQueue(topic=v2.Resource(name="NoSuchTopicHere"))},
            "TOPIC_NOT_FOUND",
        ),
    ],
)
def test_bad_receives_end_with_one_status_and_no_message(
    stub: service_pb2_grpc.MessagingServiceStub, fields: dict[str, Any], expected: str
) -> None:
    (answer,) = receive(stub, **fields)
    assert code(answer.status) == expected, answer.status.message


def test_an_empty_receive_ends_with_message_not_found_after_its_long_poll(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    send(stub, message("RawEmpty", b"only"))
    first = receive(stub, message_queue=v2.MessageQueue(topic=v2.Resource(name="RawEmpty")))
    assert [a.WhichOneof("content") for a in first] == ["delivery_timestamp", "message", "status"]
    started = time.monotonic()
    (empty,) = receive(stub, message_queue=v2.MessageQueue(topic=v2.Resource(name="RawEmpty")))
    assert code(empty.status) == "MESSAGE_NOT_FOUND"
    assert time.monotonic() - started >= 0.9  # it waited its long poll, then answered


def test_forged_receipt_handles_are_invalid(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    group, topic = v2.Resource(name="raw-group"), v2.Resource(name="RawTopic")
    ack = stub.AckMessage(
        service_pb2.AckMessageRequest(
            group=group,
            topic=topic,
            entries=[service_pb2.AckMessageEntry(message_id="m", receipt_handle="forged")],
        ),
        metadata=CLIENT,
        timeout=TIMEOUT_S,
    )
    assert code(ack.status) == "INVALID_RECEIPT_HANDLE"
    change = stub.ChangeInvisibleDuration(
        service_pb2.ChangeInvisibleDurationRequest(
            group=group,
            topic=topic,
            receipt_handle="forged",
            invisible_duration=duration_pb2.Duration(seconds=5),
        ),
        metadata=CLIENT,
        timeout=TIMEOUT_S,
    )
    assert code(change.status) == "INVALID_RECEIPT_HANDLE"
    forward = stub.ForwardMessageToDeadLetterQueue(
        service_pb2.ForwardMessageToDeadLetterQueueRequest(
            group=group, topic=topic, receipt_handle="forged"
        ),
        metadata=CLIENT,
        timeout=TIMEOUT_S,
    )
    assert code(forward.status) == "INVALID_RECEIPT_HANDLE"


def test_unsupported_calls_say_so_with_the_protocols_status(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    topic = v2.Resource(name="RawTopic")
    answers = [
        stub.RecallMessage(
            service_pb2.RecallMessageRequest(topic=topic, recall_handle="h"), timeout=TIMEOUT_S
        ).status,
        stub.UpdateOffset(service_pb2.UpdateOffsetRequest(), timeout=TIMEOUT_S).status,
        stub.GetOffset(service_pb2.GetOffsetRequest(), timeout=TIMEOUT_S).status,
        stub.QueryOffset(service_pb2.QueryOffsetRequest(), timeout=TIMEOUT_S).status,
        stub.SyncLiteSubscription(
            service_pb2.SyncLiteSubscriptionRequest(), timeout=TIMEOUT_S
        ).status,
        *[a.status for a in stub.PullMessage(service_pb2.PullMessageRequest(), timeout=TIMEOUT_S)],
    ]
    assert [code(s) for s in answers] == ["UNSUPPORTED"] * 6
    assert "delay service" in answers[0].message


def test_telemetry_answers_settings_and_refuses_other_commands_without_closing(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    settings = v2.Settings(
        client_type=v2.PRODUCER, publishing=v2.Publishing(topics=[v2.Resource(name="RawTopic")])
    )
    bad_topic = v2.Settings(
        client_type=v2.PRODUCER, publishing=v2.Publishing(topics=[v2.Resource(name="a/b")])
    )
    commands = [
        service_pb2.TelemetryCommand(settings=settings),
        service_pb2.TelemetryCommand(thread_stack_trace=service_pb2.ThreadStackTrace(nonce="n")),
        service_pb2.TelemetryCommand(settings=bad_topic),
        service_pb2.TelemetryCommand(),
        service_pb2.TelemetryCommand(settings=settings),
    ]
    answers = list(stub.Telemetry(iter(commands), metadata=CLIENT, timeout=TIMEOUT_S))
    assert [code(a.status) for a in answers] == [
        "OK",
        "UNSUPPORTED",
        "ILLEGAL_TOPIC",
        "UNSUPPORTED",
        "OK",
    ]
    assert answers[0].settings.publishing.max_body_size == 4 * 1024 * 1024
    assert answers[0].settings.backoff_policy.max_attempts >= 1
    refused = list(stub.Telemetry(iter(commands[:1]), timeout=TIMEOUT_S))  # no client id
    assert [code(a.status) for a in refused] == ["CLIENT_ID_REQUIRED"]


def test_a_request_that_does_not_parse_is_refused_not_hung(cluster: Cluster) -> None:
    channel = sync_channel(cluster.broker.address)
    call = channel.unary_unary(
        "/apache.rocketmq.v2.MessagingService/SendMessage",
        request_serializer=lambda raw: raw,
        response_deserializer=lambda raw: raw,
    )
    with pytest.raises(grpc.RpcError) as refused:
        call(b"\xff\xff\xff", timeout=TIMEOUT_S)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_a_messages_trace_context_travels_as_boltmqs_traceparent_and_back(
    cluster: Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    context = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    answer = send(stub, message("RawTrace", b"traced", trace_context=context))
    assert code(answer.status) == "OK"
    (stored,) = pull_everything(cluster, "RawTrace")
    assert stored.properties["traceparent"] == context  # what BoltMQ's consumers continue
    delivered = receive(stub, message_queue=v2.MessageQueue(topic=v2.Resource(name="RawTrace")))
    (received,) = [a.message for a in delivered if a.HasField("message")]
    assert received.system_properties.trace_context == context
    assert "traceparent" not in received.user_properties
    send(stub, message("RawTrace", b"odd", trace_context="not-a-w3c-context"))
    odd = [m for m in pull_everything(cluster, "RawTrace") if bytes(m.body) == b"odd"]
    assert [m.properties.get("traceparent") for m in odd] == [None]


def test_a_traceparent_header_joins_the_brokers_spans_to_the_callers_trace(
    cluster: Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    trace_id, parent_id = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
    header = ("traceparent", f"00-{trace_id}-{parent_id}-01")
    answer = stub.SendMessage(
        service_pb2.SendMessageRequest(messages=[message("RawTraced", b"x")]),
        metadata=(*CLIENT, header),
        timeout=TIMEOUT_S,
    )
    assert code(answer.status) == "OK"
    spans_file = cluster.root_dir.parent / "broker-spans.jsonl"

    def spans() -> list[dict[str, Any]]:
        lines = spans_file.read_text().splitlines() if spans_file.exists() else []
        return [json.loads(line) for line in lines]

    deadline = time.monotonic() + 10
    while not any(s["context"]["trace_id"] == f"0x{trace_id}" for s in spans()):
        assert time.monotonic() < deadline, "the broker wrote no span of the trace"
        time.sleep(0.05)
    mine = {s["name"]: s for s in spans() if s["context"]["trace_id"] == f"0x{trace_id}"}
    send_span = mine["/apache.rocketmq.v2.MessagingService/SendMessage"]
    assert send_span["parent_id"] == f"0x{parent_id}"
    append = mine["/boltmq.v1.StoreService/Append"]  # the broker's call to its store
    assert append["parent_id"] == send_span["context"]["span_id"]


def test_a_stopping_broker_ends_open_telemetry_streams_at_once(
    cluster: Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    """Last in the module: the broker restarts (on its port)."""
    opened = threading.Event()
    release = threading.Event()

    def commands() -> Iterator[service_pb2.TelemetryCommand]:
        yield service_pb2.TelemetryCommand(
            settings=v2.Settings(
                client_type=v2.PRODUCER,
                publishing=v2.Publishing(topics=[v2.Resource(name="RawTopic")]),
            )
        )
        release.wait(60)  # the client keeps its side open

    answers: list[Any] = []

    def hold() -> None:
        try:
            for answer in stub.Telemetry(commands(), metadata=CLIENT, timeout=60):
                answers.append(answer)
                opened.set()
        except grpc.RpcError as exc:
            answers.append(exc.code())

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert opened.wait(10)
        started = time.monotonic()
        cluster.restart_broker()  # asserts a clean exit
        stopping_s = time.monotonic() - started
        holder.join(10)
        assert not holder.is_alive(), "the stream outlived the broker"
        assert stopping_s < 10  # the grace period (10 s) was not waited out
    finally:
        release.set()
        holder.join(10)
    assert code(answers[0].status) == "OK"
