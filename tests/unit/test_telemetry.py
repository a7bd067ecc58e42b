"""boltmq.kernel.telemetry: set-up from the OTEL_* environment, filters, trace context, logs."""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from boltmq.kernel import channels, runtime, telemetry
from boltmq.kernel.config import ConfigError, ServerSettings, load_config
from boltmq.kernel.telemetry import TelemetryError
from boltmq.message import Message, MessageError
from boltmq.wire.record import decode_records

NO_OTEL: dict[str, str] = {}


@pytest.fixture
def built() -> Iterator[list[telemetry.Telemetry]]:
    """Telemetries a test builds, shut down at its end."""
    made: list[telemetry.Telemetry] = []
    yield made
    for item in made:
        item.shutdown()


def build(
    made: list[telemetry.Telemetry], env: dict[str, str], **settings: object
) -> telemetry.Telemetry:
    result = telemetry.build(
        "store",
        ServerSettings(**settings),  # type: ignore[arg-type]
        "127.0.0.1",
        env,
    )
    made.append(result)
    return result


# ------------------------------------------------------------------ exporters from the env
@pytest.mark.parametrize(
    ("env", "traces", "metrics"),
    [
        ({}, (), ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}, ("otlp",), ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317"}, ("otlp",), ()),
        ({"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4317"}, (), ("otlp",)),
        (
            {"OTEL_TRACES_EXPORTER": "console, OTLP", "OTEL_METRICS_EXPORTER": "none"},
            ("console", "otlp"),
            (),
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"},
            (),
            ("otlp",),
        ),
    ],
)
def test_exporters_follow_the_standard_variables_and_default_to_none(
    env: dict[str, str], traces: tuple[str, ...], metrics: tuple[str, ...]
) -> None:
    assert telemetry.exporters(env, "traces") == traces
    assert telemetry.exporters(env, "metrics") == metrics


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("jaeger", "OTEL_TRACES_EXPORTER: unknown exporter 'jaeger'"),
        ("otlp,zipkin", "unknown exporter 'zipkin'"),
    ],
)
def test_unknown_trace_exporters_are_refused_by_name(value: str, message: str) -> None:
    with pytest.raises(TelemetryError, match=message):
        telemetry.exporters({"OTEL_TRACES_EXPORTER": value}, "traces")


def test_prometheus_as_an_otel_exporter_points_at_metrics_port() -> None:
    with pytest.raises(TelemetryError, match="metrics_port"):
        telemetry.exporters({"OTEL_METRICS_EXPORTER": "prometheus"}, "metrics")


# ------------------------------------------------------------------ build
def test_nothing_is_built_without_exporters_or_endpoints(built: list[telemetry.Telemetry]) -> None:
    result = build(built, NO_OTEL)
    assert result.tracer_provider is None and result.meter_provider is None
    assert result.metrics_address == ""


def test_sdk_disabled_wins_over_every_setting(
    built: list[telemetry.Telemetry], tmp_path: Path
) -> None:
    result = build(
        built,
        {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"},
        metrics_port=1,
        trace_file=str(tmp_path / "spans"),
    )
    assert result.tracer_provider is None and result.meter_provider is None
    assert not (tmp_path / "spans").exists()


def test_trace_file_gets_one_json_line_per_span(
    built: list[telemetry.Telemetry], tmp_path: Path
) -> None:
    path = tmp_path / "spans.jsonl"
    result = build(built, NO_OTEL, trace_file=str(path))
    assert result.tracer_provider is not None
    tracer = result.tracer_provider.get_tracer("test")
    with tracer.start_as_current_span("outer"), tracer.start_as_current_span("inner"):
        pass
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["name"] for line in lines] == ["inner", "outer"]
    assert lines[0]["parent_id"] == lines[1]["context"]["span_id"]
    assert lines[1]["resource"]["attributes"]["service.name"] == "boltmq-store"


def test_a_trace_file_that_cannot_be_opened_is_a_clear_error(
    built: list[telemetry.Telemetry], tmp_path: Path
) -> None:
    with pytest.raises(TelemetryError, match="trace_file .*missing/spans"):
        build(built, NO_OTEL, trace_file=str(tmp_path / "missing" / "spans"))


def test_the_service_name_comes_from_the_environment_when_set(
    built: list[telemetry.Telemetry], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "store-eu-1")
    result = build(built, NO_OTEL, trace_file=str(tmp_path / "spans"))
    assert result.tracer_provider is not None
    assert result.tracer_provider.resource.attributes["service.name"] == "store-eu-1"


def test_otlp_endpoints_get_otlp_exporters(built: list[telemetry.Telemetry]) -> None:
    result = build(built, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    assert result.tracer_provider is not None and result.meter_provider is not None


def test_metrics_port_serves_prometheus_text_until_shutdown(
    built: list[telemetry.Telemetry],
) -> None:
    result = build(built, NO_OTEL, metrics_port=_free_port())
    assert result.meter_provider is not None and result.tracer_provider is None
    counter = telemetry.meter("test", result.meter_provider).create_counter("boltmq.test.things")
    counter.add(3, {"topic": "T"})
    url = f"http://{result.metrics_address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    assert 'boltmq_test_things_total{otel_scope_name="test"' in text
    assert 'topic="T"} 3.0' in text
    result.shutdown()
    built.remove(result)
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=10)


def test_a_busy_metrics_port_is_a_clear_error(built: list[telemetry.Telemetry]) -> None:
    first = build(built, NO_OTEL, metrics_port=_free_port())
    port = int(first.metrics_address.rsplit(":", 1)[1])
    with pytest.raises(TelemetryError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
        build(built, NO_OTEL, metrics_port=port)


def test_trace_file_is_a_setting_of_every_service() -> None:
    config = load_config(ServerSettings, env={"BOLTMQ_TRACE_FILE": "/tmp/x.jsonl"})
    assert config.trace_file == "/tmp/x.jsonl"
    with pytest.raises(ConfigError, match="log_format"):
        ServerSettings(log_format="xml")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ------------------------------------------------------------------ interceptors
@pytest.mark.parametrize(
    ("method", "traced"),
    [
        ("/boltmq.v1.BrokerService/SendMessage", True),
        (b"/boltmq.v1.StoreService/Append", True),
        ("/grpc.health.v1.Health/Check", False),
        ("/grpc.health.v1.Health/Watch", False),
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", False),
        ("/boltmq.v1.StoreService/WatchArrivals", False),
        ("/boltmq.v1.StoreService/ReportReplicas", False),
        ("/boltmq.v1.HAService/Replicate", False),
        ("/boltmq.v1.BrokerService/TransactionChecks", False),
    ],
)
def test_health_reflection_and_streams_are_not_traced(method: str | bytes, traced: bool) -> None:
    assert telemetry.traced_method(SimpleNamespace(method=method)) is traced
    assert telemetry.traced_method(SimpleNamespace(full_method=method)) is traced


def test_without_tracing_no_interceptor_is_installed() -> None:
    assert not telemetry.tracing_on()
    assert telemetry.server_interceptors() == []
    assert telemetry.aio_client_interceptors() == []
    channel = channels.sync_channel("127.0.0.1:1")
    assert type(channel).__module__.startswith("grpc")  # the plain channel, not a wrapper
    channel.close()


def test_with_tracing_every_kind_of_channel_is_intercepted(
    span_exporter: InMemorySpanExporter,
) -> None:
    assert telemetry.tracing_on()
    assert len(telemetry.server_interceptors()) == 1
    assert len(telemetry.aio_client_interceptors()) == 4
    channel = channels.sync_channel("127.0.0.1:1")
    assert "grpcext" in type(channel).__module__
    channel.close()


def test_clients_trace_only_inside_a_trace(span_exporter: InMemorySpanExporter) -> None:
    details = SimpleNamespace(method="/boltmq.v1.StoreService/Append")
    assert not telemetry.traced_client_call(details)
    with trace.get_tracer("test").start_as_current_span("work"):
        assert telemetry.traced_client_call(details)


# ------------------------------------------------------------------ messages
def test_without_tracing_messages_get_no_context_and_spans_are_none() -> None:
    with telemetry.producer_span("T", 1, b"12345") as span:
        assert span is None
        assert telemetry.message_context(span) == {}
    assert telemetry.create_context("T", b"12345") == {}
    with telemetry.process_span([], "g") as consumed:
        assert consumed is None


def test_a_send_span_travels_in_the_record_and_parents_the_process_span(
    span_exporter: InMemorySpanExporter,
) -> None:
    message = Message("T", b"body", properties={"user": "yes"})
    with telemetry.producer_span("T", 1, b"body") as span:
        context = telemetry.message_context(span)
        record = message.to_record(0, context)
    assert message.properties == {"user": "yes"}  # the caller's message is left alone
    received = decode_records(record)
    assert received[0].properties == {"user": "yes", "traceparent": context["traceparent"]}
    assert span is not None
    carried = telemetry.message_span_context(received[0].properties)
    assert carried.trace_id == span.get_span_context().trace_id
    assert carried.span_id == span.get_span_context().span_id and carried.is_remote

    with telemetry.process_span(received, "group-a") as process:
        assert process is not None
    finished = {s.name: s for s in span_exporter.get_finished_spans()}
    consumer = finished["process T"]
    assert consumer.kind is SpanKind.CONSUMER
    assert consumer.parent is not None and consumer.parent.span_id == carried.span_id
    assert [link.context.span_id for link in consumer.links] == [carried.span_id]
    assert (consumer.attributes or {})["messaging.consumer.group.name"] == "group-a"
    assert (consumer.attributes or {})["messaging.message.body.size"] == 4


def test_tracestate_travels_when_there_is_one(span_exporter: InMemorySpanExporter) -> None:
    parent = trace.SpanContext(
        0x1234,
        0x5678,
        is_remote=True,
        trace_flags=trace.TraceFlags(1),
        trace_state=trace.TraceState([("vendor", "v1")]),
    )
    with (
        trace.use_span(trace.NonRecordingSpan(parent)),
        telemetry.producer_span("T", 2, b"") as span,
    ):
        context = telemetry.message_context(span)
    assert context["tracestate"] == "vendor=v1"
    assert context["traceparent"].startswith(f"00-{0x1234:032x}-")


@pytest.mark.parametrize(
    "properties",
    [
        {},
        {"traceparent": "garbage"},
        {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
        {"traceparent": "00-zz-yy-01", "tracestate": "=;="},
    ],
)
def test_missing_or_broken_trace_context_starts_a_new_trace(
    properties: dict[str, str], span_exporter: InMemorySpanExporter
) -> None:
    assert not telemetry.message_span_context(properties).is_valid
    records = decode_records(Message("T", b"x", properties=properties).to_record())
    with telemetry.process_span(records, "g"):
        pass
    (consumer,) = span_exporter.get_finished_spans()
    assert consumer.parent is None and not consumer.links


def test_a_batch_process_span_links_every_message(span_exporter: InMemorySpanExporter) -> None:
    contexts = []
    for _ in range(3):
        with telemetry.producer_span("T", 1, b"x") as span:
            contexts.append(telemetry.message_context(span))
    records = decode_records(b"".join(Message("T", b"x").to_record(0, c) for c in contexts))
    with telemetry.process_span(records, "g"):
        pass
    consumer = span_exporter.get_finished_spans()[-1]
    assert len(consumer.links) == 3
    assert (consumer.attributes or {})["messaging.batch.message_count"] == 3
    assert consumer.parent is not None
    assert consumer.parent.span_id == consumer.links[0].context.span_id


# ------------------------------------------------------------------ logs
@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure_logging replaces the root handlers: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_logs_carry_level_logger_message_time_and_trace_ids(
    root_logging: None, capsys: pytest.CaptureFixture[str], span_exporter: InMemorySpanExporter
) -> None:
    runtime.configure_logging("INFO", "json")
    log = logging.getLogger("boltmq.test")
    log.info("outside %s", "a span")
    with trace.get_tracer("test").start_as_current_span("work") as span:
        log.warning("inside", extra={"topic": "T"})
    log.debug("below the level")
    outside, inside = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert outside["message"] == "outside a span" and outside["level"] == "INFO"
    assert outside["logger"] == "boltmq.test" and "trace_id" not in outside
    assert outside["timestamp"].endswith("+00:00")
    context = span.get_span_context()
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
    assert inside["level"] == "WARNING" and inside["topic"] == "T"


def test_json_logs_keep_exceptions_on_one_line(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime.configure_logging("INFO", "json")
    try:
        raise ValueError("bad thing")
    except ValueError:
        logging.getLogger("boltmq.test").exception("failed")
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert record["message"] == "failed" and "ValueError: bad thing" in record["exc_info"]


def test_text_logs_stay_one_plain_line(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime.configure_logging("DEBUG", "text")
    logging.getLogger("boltmq.test").debug("plain")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" DEBUG boltmq.test: plain")


def test_grpc_s_error_for_an_answer_to_an_ended_call_is_one_info_line(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from grpc._cython import cygrpc  # the error grpc's aio server raises and logs

    runtime.configure_logging("INFO", "text")
    runtime.configure_logging("INFO", "text")  # configured twice: one filter
    core = logging.getLogger(runtime.GRPC_CORE_LOGGER)
    for error in (cygrpc.ExecuteBatchError('Failed "execute_batch"'), ValueError("a bug")):
        try:
            raise error
        except Exception:
            core.exception("ExecuteBatchError raised in core by servicer method [%s]", "/S/M")
    ended, bug, *rest = capsys.readouterr().err.split("\n", 2)
    assert ended.endswith(" INFO grpc._cython.cygrpc: answer of /S/M not sent: its call had ended")
    assert " ERROR grpc._cython.cygrpc: " in bug and rest[0].startswith("Traceback")
    assert "ValueError: a bug" in rest[0]  # anything else keeps its traceback


def test_a_body_of_the_wrong_type_is_still_the_messages_own_error(
    span_exporter: InMemorySpanExporter,
) -> None:
    context = telemetry.create_context("T", None)
    with pytest.raises(MessageError, match="body must be bytes"):
        Message("T", None, properties={}).to_record(0, context)  # type: ignore[arg-type]
    (create,) = span_exporter.get_finished_spans()
    assert (create.attributes or {})["messaging.message.body.size"] == 0
