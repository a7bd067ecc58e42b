"""One trace from producer to consumer, across real registry, store and broker processes.

The services export their spans to files (``trace_file``: one JSON line per
span, :mod:`boltmq.kernel.telemetry`); this process traces its producer and
consumers into memory. The trace must run producer ``send`` -> SendMessage
(client, broker server; on the default streamed path the broker's span of the
message, with no client span per call) -> Append (broker client, store server) -> consumer
``process``, parent by parent, with the messaging attributes on the way.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from boltmq import (
    AsyncProducer,
    Message,
    Producer,
    ProducerOptions,
    PullConsumer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
)
from boltmq.kernel.telemetry import TRACEPARENT_PROPERTY
from tests.integration.conftest import CLUSTER_BROKER_SETTINGS, CLUSTER_STORE_SETTINGS
from tests.integration.procs import ServiceProcess

DEADLINE_S = 30.0
"""Generous bound for a consumer to receive what was sent."""


class TracedCluster:
    """Registry, store and broker processes; the store and broker write spans to files."""

    def __init__(self, tmp_path: Path, spawn: Callable[..., ServiceProcess]) -> None:
        self.store_spans = tmp_path / "store-spans.jsonl"
        self.broker_spans = tmp_path / "broker-spans.jsonl"
        self.registry = spawn("registry")
        store = spawn(
            "store",
            f"root_dir={tmp_path / 'store'}",
            f"trace_file={self.store_spans}",
            *CLUSTER_STORE_SETTINGS,
        )
        spawn(
            "broker",
            f"store_address={store.address}",
            f"registry_addresses={self.registry.address}",
            f"trace_file={self.broker_spans}",
            *CLUSTER_BROKER_SETTINGS,
        )

    def service_spans(self) -> list[dict[str, Any]]:
        """Every span the store and the broker finished so far (written at once)."""
        lines = (
            self.store_spans.read_text().splitlines() + self.broker_spans.read_text().splitlines()
        )
        return [json.loads(line) for line in lines]


@pytest.fixture
def traced(tmp_path: Path, spawn: Callable[..., ServiceProcess]) -> TracedCluster:
    return TracedCluster(tmp_path, spawn)


@pytest.fixture
def producer(traced: TracedCluster) -> Iterator[Producer]:
    with Producer(traced.registry.address) as started:
        yield started


def hex_id(value: int, digits: int) -> str:
    """A span or trace id as the JSON export writes it."""
    return f"0x{value:0{digits}x}"


def one(spans: Sequence[Any], what: str, condition: Callable[[Any], bool]) -> Any:
    found = [span for span in spans if condition(span)]
    assert len(found) == 1, f"expected one {what}, found {len(found)}"
    return found[0]


def received_by_push(
    registry: str, topic: str, group: str
) -> tuple[list[ReceivedMessage], list[int]]:
    """The first message a push consumer gets, and the span id current in its listener."""
    got: list[ReceivedMessage] = []
    span_ids: list[int] = []
    arrived = threading.Event()

    def listener(messages: list[ReceivedMessage]) -> None:
        span_ids.append(trace.get_current_span().get_span_context().span_id)
        got.extend(messages)
        arrived.set()

    consumer = PushConsumer(
        registry,
        group,
        {topic: "*"},
        listener,
        options=PushConsumerOptions(
            consume_batch_max_size=1, rebalance_interval_ms=300, long_poll_ms=2_000
        ),
    )
    consumer.start()
    try:
        assert arrived.wait(DEADLINE_S), "the push consumer received nothing"
    finally:
        consumer.shutdown()
    return got, span_ids


@pytest.mark.parametrize("send_path", ["stream", "unary"])
def test_one_trace_runs_from_producer_through_broker_and_store_to_consumer(
    traced: TracedCluster, span_exporter: InMemorySpanExporter, send_path: str
) -> None:
    options = ProducerOptions(send_path=send_path)
    with Producer(traced.registry.address, options=options) as producer:
        result = producer.send(Message("TracedTopic", b"traced body"))
    got, listener_span_ids = received_by_push(traced.registry.address, "TracedTopic", "tg")

    local = span_exporter.get_finished_spans()
    send = one(local, "send span", lambda s: s.name == "send TracedTopic")
    trace_id = send.context.trace_id
    assert send.kind is SpanKind.PRODUCER and send.parent is None
    assert dict(send.attributes) == {
        "messaging.system": "boltmq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "TracedTopic",
        "messaging.message.body.size": len(b"traced body"),
        "messaging.destination.partition.id": str(result.queue.queue_id),
        "messaging.message.id": result.msg_id,
    }
    # Unary: a client span of the call, whose child is the broker's span. Stream: no span
    # per call; each message carries the send span's context to the broker's span.
    parent_of_broker = send.context.span_id
    if send_path == "unary":
        client_send = one(
            local,
            "SendMessage client span",
            lambda s: s.name == "/boltmq.v1.BrokerService/SendMessage",
        )
        assert (
            client_send.kind is SpanKind.CLIENT and client_send.parent.span_id == parent_of_broker
        )
        parent_of_broker = client_send.context.span_id
    broker_method = (
        f"/boltmq.v1.BrokerService/{'SendMessage' if send_path == 'unary' else 'SendStream'}"
    )

    # The message carries the send span's context, and the services joined it.
    assert (
        got[0].properties[TRACEPARENT_PROPERTY]
        == f"00-{trace_id:032x}-{send.context.span_id:016x}-{send.context.trace_flags:02x}"
    )
    in_trace = [
        s for s in traced.service_spans() if s["context"]["trace_id"] == hex_id(trace_id, 32)
    ]
    broker_send = one(in_trace, "broker's send span", lambda s: s["name"] == broker_method)
    assert broker_send["kind"] == "SpanKind.SERVER"
    assert broker_send["parent_id"] == hex_id(parent_of_broker, 16)
    assert broker_send["attributes"]["messaging.destination.name"] == "TracedTopic"
    assert broker_send["attributes"]["messaging.destination.partition.id"] == str(
        result.queue.queue_id
    )
    assert broker_send["attributes"]["messaging.batch.message_count"] == 1
    append_client = one(
        in_trace,
        "broker's Append client span",
        lambda s: s["name"] == "/boltmq.v1.StoreService/Append" and s["kind"] == "SpanKind.CLIENT",
    )
    assert append_client["parent_id"] == broker_send["context"]["span_id"]
    append_server = one(
        in_trace,
        "store's Append span",
        lambda s: s["name"] == "/boltmq.v1.StoreService/Append" and s["kind"] == "SpanKind.SERVER",
    )
    assert append_server["parent_id"] == append_client["context"]["span_id"]
    assert append_server["attributes"]["messaging.destination.name"] == "TracedTopic"

    process = one(local, "process span", lambda s: s.name == "process TracedTopic")
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == trace_id and process.parent.span_id == send.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.attributes["messaging.message.id"] == result.msg_id
    assert process.attributes["messaging.message.body.size"] == len(b"traced body")
    assert process.attributes["messaging.consumer.group.name"] == "tg"
    assert process.attributes["messaging.destination.partition.id"] == str(result.queue.queue_id)
    assert listener_span_ids == [process.context.span_id]  # the listener ran inside it


def test_async_sends_carry_a_create_span_and_the_pull_helper_continues_it(
    traced: TracedCluster, producer: Producer, span_exporter: InMemorySpanExporter
) -> None:
    result = producer.send_async(Message("AsyncTraced", b"later")).result(DEADLINE_S)
    with PullConsumer(traced.registry.address, "pg") as consumer:
        pulled = consumer.pull(result.queue, result.queue_offset, 1)
        with consumer.processing(pulled.messages) as span:
            assert span is not None and span.is_recording()

    local = span_exporter.get_finished_spans()
    create = one(local, "create span", lambda s: s.name == "create AsyncTraced")
    assert create.kind is SpanKind.PRODUCER
    assert create.attributes["messaging.message.body.size"] == len(b"later")
    process = one(local, "process span", lambda s: s.name == "process AsyncTraced")
    assert process.parent.span_id == create.context.span_id
    assert process.context.trace_id == create.context.trace_id
    assert process.attributes["messaging.consumer.group.name"] == "pg"


def test_async_producer_sends_are_children_of_the_awaiting_tasks_span(
    traced: TracedCluster, span_exporter: InMemorySpanExporter
) -> None:
    async def handler() -> Any:
        async with AsyncProducer(traced.registry.address, concurrency=4) as producer:
            with trace.get_tracer("test").start_as_current_span("handler") as outer:
                await asyncio.gather(
                    *(producer.send(Message("AsyncTask", b"%d" % n)) for n in range(6))
                )
            return outer

    outer = asyncio.run(handler())
    local = span_exporter.get_finished_spans()
    sends = [s for s in local if s.name == "send AsyncTask"]
    assert len(sends) == 6
    assert all(s.parent.span_id == outer.context.span_id for s in sends)
    # each request on the stream carried its sender's context to the broker's span
    trace_id = hex_id(outer.context.trace_id, 32)
    send_ids = {hex_id(s.context.span_id, 16) for s in sends}
    broker = [
        s
        for s in traced.service_spans()
        if s["name"] == "/boltmq.v1.BrokerService/SendStream"
        and s["context"]["trace_id"] == trace_id
    ]
    assert broker and all(s["parent_id"] in send_ids for s in broker)


def test_a_message_sent_without_tracing_starts_its_own_consumer_trace(
    traced: TracedCluster, span_exporter: InMemorySpanExporter
) -> None:
    # The CLI is another process, one without a tracer provider.
    sent = subprocess.run(
        [
            sys.executable,
            "-m",
            "boltmq.cli",
            "produce",
            "--registry",
            traced.registry.address,
            "--topic",
            "Plain",
            "--body",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sent.returncode == 0, sent.stderr
    got, _ = received_by_push(traced.registry.address, "Plain", "plain-group")
    assert TRACEPARENT_PROPERTY not in got[0].properties
    process = one(
        span_exporter.get_finished_spans(), "process span", lambda s: s.name == "process Plain"
    )
    assert process.parent is None and not process.links
