"""OpenTelemetry for every BoltMQ process: providers, gRPC interceptors, trace context in messages.

Set-up
------
``boltmq serve`` calls :func:`configure` once, before the service is built. It
reads the standard OpenTelemetry environment and two BoltMQ settings
(:class:`boltmq.kernel.config.ServerSettings`):

==========================================  ==============================================
``OTEL_SDK_DISABLED=true``                  nothing is installed (no provider, no
                                            interceptor, no scrape endpoint)
``OTEL_TRACES_EXPORTER``                    comma list of ``otlp``, ``console``, ``none``;
                                            unset: ``otlp`` when an OTLP endpoint is set,
                                            else none
``OTEL_METRICS_EXPORTER``                   the same for metrics
``OTEL_EXPORTER_OTLP_ENDPOINT``,            where OTLP goes (the gRPC exporter reads
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,     these and every other
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``     ``OTEL_EXPORTER_OTLP_*`` itself)
``OTEL_SERVICE_NAME``,                      the resource; ``service.name`` defaults to
``OTEL_RESOURCE_ATTRIBUTES``                ``boltmq-<service>``
``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_*``,    read by the SDK as usual
``OTEL_METRIC_EXPORT_INTERVAL``
``metrics_port`` (``BOLTMQ_METRICS_PORT``)  Prometheus scrape endpoint ``/metrics`` on the
                                            service's listen host (0: none)
``trace_file`` (``BOLTMQ_TRACE_FILE``)      every finished span appended to this file as one
                                            JSON line (tests, debugging; written at once)
==========================================  ==============================================

``console`` exporters write to stderr: stdout carries the ``READY`` line and
nobody reads it after that, so a full pipe would block the service.

Speed: when no span exporter is configured no tracer provider is installed
and no interceptor is added to any server or channel, so an RPC costs exactly
what it costs without telemetry; without a metric reader the instruments stay
the API's no-op proxies (an ``add`` is one attribute test). Hot paths count per
batch, never per message.

Traced calls
------------
The interceptors come from ``opentelemetry-instrumentation-grpc`` (aio server,
aio and blocking clients). They skip the health and reflection services and
every streaming method (:func:`traced_method`): a stream's span would last as
long as the stream (hours, for WatchArrivals or a replica's follow read) and
the library's stream wrappers replace the call object, which breaks the
``read()``/``write()`` style the HA service uses. The one exception is a stream
of sends (``SendStream``): each message carries its sender's ``traceparent`` and
the broker traces it as a span of its own (:func:`current_traceparent`,
:func:`stream_message_span`). Clients trace a call only
inside a trace (:func:`traced_client_call`); a server traces every call, so
calls from background loops (a broker's schedule-service pulls) are traces
of one span: thin them with ``OTEL_TRACES_SAMPLER``.

Trace context in messages
-------------------------
A producer with tracing on starts a PRODUCER span per send (``send <topic>``,
or ``create <topic>`` per message of an asynchronous send) and writes its W3C
context into each message's properties (``traceparent``, and ``tracestate``
when there is one) before the record is encoded. The broker's and the store's
spans join through the gRPC metadata. A consumer's ``process <topic>`` span is
a child of the first message's producer context and links to every message's.
Attribute names follow the OpenTelemetry messaging conventions
(``messaging.destination.name`` = topic, ``messaging.destination.partition.id``
= queue id, ``messaging.message.id``, ``messaging.message.body.size``).

An application using the SDK installs its own tracer provider before it
creates producers and consumers; their channels are built traced then.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TextIO

import grpc
from opentelemetry import metrics, trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from boltmq.kernel.config import ServerSettings
    from boltmq.wire.record import RecordView

log = logging.getLogger(__name__)

TRACEPARENT_PROPERTY = "traceparent"
"""Message property holding the producer span's W3C ``traceparent``."""
TRACESTATE_PROPERTY = "tracestate"
"""Message property holding the W3C ``tracestate`` (only when it is not empty)."""
MESSAGING_SYSTEM = "boltmq"
"""``messaging.system`` of every messaging span."""
BATCH_BYTES_ATTRIBUTE = "boltmq.batch.bytes"
"""Bytes of a whole batch on a broker or store span (the conventions name only per-message
sizes)."""
EXPORTERS = ("otlp", "console", "none")
"""Values ``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER`` may list."""
UNTRACED_SERVICES = (
    "grpc.health.v1.Health",
    "grpc.reflection.v1alpha.ServerReflection",
    "grpc.reflection.v1.ServerReflection",
)
"""gRPC services whose calls never get a span (probes would drown the real traffic)."""

_tracer_cache: tuple[object, trace.Tracer] | None = None
_NO_GLOBAL = object()
_MESSAGE_PROPAGATOR = TraceContextTextMapPropagator()
"""Messages always carry W3C trace context, whatever ``OTEL_PROPAGATORS`` says for RPCs:
a stored message outlives the process configuration that wrote it."""


class TelemetryError(ValueError):
    """The telemetry environment or settings are wrong (an unknown exporter, a busy port)."""


# =================================================================== set-up
@dataclass
class Telemetry:
    """What :func:`build` made for one process; :meth:`shutdown` flushes and stops it all."""

    tracer_provider: TracerProvider | None = None
    """None: no span exporter is configured and nothing is traced."""
    meter_provider: MeterProvider | None = None
    """None: no metric reader is configured and the instruments are no-ops."""
    metrics_address: str = ""
    """``host:port`` of the Prometheus endpoint ("" when there is none)."""
    _metrics_server: WSGIServer | None = field(default=None, repr=False)
    _files: list[TextIO] = field(default_factory=list, repr=False)

    def shutdown(self) -> None:
        """Export what is buffered, stop the scrape endpoint, close trace files."""
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        for stream in self._files:
            stream.close()


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "true"


def exporters(env: Mapping[str, str], signal: str) -> tuple[str, ...]:
    """The exporters named for ``signal`` ("traces" or "metrics"), checked.

    Unset means OTLP when an OTLP endpoint (general or per signal) is set, and
    nothing otherwise: a service must not try to reach a collector nobody
    configured (the SDK's own default, ``otlp`` to localhost, would).
    """
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    text = env.get(variable, "").strip()
    if not text:
        endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
        )
        return ("otlp",) if endpoint else ()
    names = tuple(name.strip().lower() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        hint = (
            " (the Prometheus endpoint is the metrics_port setting)"
            if "prometheus" in unknown
            else ""
        )
        raise TelemetryError(
            f"{variable}: unknown exporter {unknown[0]!r}; expected a comma "
            f"list of {', '.join(EXPORTERS)}{hint}"
        )
    return tuple(name for name in names if name != "none")


def _resource(service: str) -> Resource:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: f"boltmq-{service}"}))
    return resource


def _span_line(span: Any) -> str:
    return str(span.to_json(indent=None)) + "\n"


def _tracer_provider(
    names: tuple[str, ...], trace_file: str, resource: Resource, telemetry: Telemetry
) -> TracerProvider | None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    if not names and not trace_file:
        return None
    provider = TracerProvider(resource=resource)
    if "otlp" in names:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if "console" in names:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    if trace_file:
        try:
            stream = open(trace_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        except OSError as exc:
            raise TelemetryError(f"trace_file {trace_file}: {exc.strerror}") from None
        telemetry._files.append(stream)
        # Simple (synchronous) on purpose: a test reads the file right after the
        # call, and a debugging session wants every span even after a crash.
        provider.add_span_processor(
            SimpleSpanProcessor(ConsoleSpanExporter(out=stream, formatter=_span_line))
        )
    return provider


def _metric_readers(
    names: tuple[str, ...], metrics_port: int, host: str, telemetry: Telemetry
) -> list[MetricReader]:
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    readers: list[MetricReader] = []
    if "otlp" in names:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    if "console" in names:
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr)))
    if metrics_port:
        readers.append(_prometheus_reader(metrics_port, host, telemetry))
    return readers


def _prometheus_reader(port: int, host: str, telemetry: Telemetry) -> MetricReader:
    """A Prometheus reader on its own registry, served on ``host:port``."""
    import prometheus_client
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    # An own registry: a second set-up in one process (tests) must not collide
    # with the first in the library's global one.
    registry = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=registry)
    reader = PrometheusMetricReader(registry=registry)
    listen = "0.0.0.0" if host in ("", "::", "[::]") else host
    try:
        server, _ = prometheus_client.start_http_server(port, addr=listen, registry=registry)
    except OSError as exc:
        raise TelemetryError(f"cannot serve metrics on {listen}:{port}: {exc.strerror}") from None
    telemetry._metrics_server = server
    telemetry.metrics_address = f"{listen}:{server.server_port}"
    return reader


def build(
    service: str, settings: ServerSettings, host: str, env: Mapping[str, str] | None = None
) -> Telemetry:
    """Providers and endpoints for ``service`` from ``env`` (default: the process's).

    Nothing is installed globally here (:func:`configure` does that), so tests
    can build and inspect as many as they like.
    """
    source = os.environ if env is None else env
    telemetry = Telemetry()
    if _flag(source, "OTEL_SDK_DISABLED"):
        return telemetry
    trace_names = exporters(source, "traces")
    metric_names = exporters(source, "metrics")
    if not (trace_names or settings.trace_file or metric_names or settings.metrics_port):
        return telemetry
    resource = _resource(service)
    try:
        telemetry.tracer_provider = _tracer_provider(
            trace_names, settings.trace_file, resource, telemetry
        )
        readers = _metric_readers(metric_names, settings.metrics_port, host, telemetry)
    except BaseException:
        telemetry.shutdown()
        raise
    if readers:
        from opentelemetry.sdk.metrics import MeterProvider

        telemetry.meter_provider = MeterProvider(metric_readers=readers, resource=resource)
    return telemetry


def configure(
    service: str, settings: ServerSettings, host: str, env: Mapping[str, str] | None = None
) -> Telemetry:
    """:func:`build`, then install the providers globally (once per process)."""
    telemetry = build(service, settings, host, env)
    if telemetry.tracer_provider is not None:
        trace.set_tracer_provider(telemetry.tracer_provider)
    if telemetry.meter_provider is not None:
        metrics.set_meter_provider(telemetry.meter_provider)
    if telemetry.metrics_address:
        log.info("metrics on http://%s/metrics", telemetry.metrics_address)
    return telemetry


def meter(name: str, provider: metrics.MeterProvider | None = None) -> metrics.Meter:
    """The meter a service's metrics module registers its instruments on.

    From ``provider`` when given (tests pass an SDK provider with an in-memory
    reader), else from the global one :func:`configure` installs; with none
    installed the instruments are no-ops.
    """
    return (provider if provider is not None else metrics.get_meter_provider()).get_meter(name)


def tracing_on() -> bool:
    """Whether a real tracer provider is installed (by :func:`configure` or the application).
    Asked per send, so it reads the API's global (~0.1 us; the public call reads the
    environment each time while no provider is set, ~1-3 us), if the API has it."""
    provider = getattr(trace, "_TRACER_PROVIDER", _NO_GLOBAL)
    if provider is _NO_GLOBAL:
        provider = trace.get_tracer_provider()
    return provider is not None and not isinstance(
        provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider
    )


def tracer() -> trace.Tracer:
    """BoltMQ's tracer from the installed provider (the API's proxy tracer was rejected:
    it keeps the first provider's tracer even after the provider is replaced)."""
    global _tracer_cache
    provider = trace.get_tracer_provider()
    if _tracer_cache is None or _tracer_cache[0] is not provider:
        _tracer_cache = (provider, provider.get_tracer("boltmq"))
    return _tracer_cache[1]


# =================================================================== interceptors
_streaming: frozenset[str] | None = None


def _streaming_methods() -> frozenset[str]:
    """``/package.Service/Method`` of every RPC a BoltMQ server serves that streams either
    way (the broker's RocketMQ 5 protocol too: Telemetry, ReceiveMessage)."""
    global _streaming
    if _streaming is None:
        from boltmq.rocketmq.v2 import service_pb2 as rocketmq_pb2
        from boltmq.v1 import broker_pb2, ha_pb2, registry_pb2, store_pb2

        _streaming = frozenset(
            f"/{service.full_name}/{method.name}"
            for module in (broker_pb2, ha_pb2, registry_pb2, store_pb2, rocketmq_pb2)
            for service in module.DESCRIPTOR.services_by_name.values()
            for method in service.methods
            if method.client_streaming or method.server_streaming
        )
    return _streaming


def traced_method(details: Any) -> bool:
    """The interceptors' filter: False for health, reflection and streaming methods.

    ``details`` is a server's HandlerCallDetails, an aio client's
    ClientCallDetails (whose method may be bytes) or a blocking client's info.
    """
    method = getattr(details, "method", None) or getattr(details, "full_method", None) or ""
    if isinstance(method, bytes):
        method = method.decode()
    service = method.lstrip("/").partition("/")[0]
    return service not in UNTRACED_SERVICES and method not in _streaming_methods()


def traced_client_call(details: Any) -> bool:
    """The clients' filter: :func:`traced_method`, and only inside a trace.

    A background loop's calls (offset persistence, schedule-service pulls,
    registrations) would each start a trace of one span; without a client span
    they carry no context and the callee's span stands alone.
    """
    return trace.get_current_span().get_span_context().is_valid and traced_method(details)


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """The aio server's tracing interceptor, or none when tracing is off."""
    if not tracing_on():
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor(filter_=traced_method)]


def aio_client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """The aio channel's tracing interceptors, or none when tracing is off."""
    if not tracing_on():
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors as interceptors

    return list(interceptors(filter_=traced_client_call))


def traced_channel(channel: grpc.Channel) -> grpc.Channel:
    """A blocking channel with the tracing interceptor (itself when tracing is off)."""
    if not tracing_on():
        return channel
    from opentelemetry.instrumentation.grpc import client_interceptor, grpcext

    return grpcext.intercept_channel(channel, client_interceptor(filter_=traced_client_call))


# =================================================================== messaging spans
def _messaging_attributes(operation: str, topic: str) -> dict[str, Any]:
    return {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": topic,
    }


def _body_size(body: object) -> int:
    """A body's size; 0 for what is not bytes (the message's own check refuses it later)."""
    return len(body) if isinstance(body, bytes | bytearray | memoryview) else 0


_NO_SPAN: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def producer_span(
    topic: str, count: int, first_body: object
) -> contextlib.AbstractContextManager[Span | None]:
    """A ``send <topic>`` PRODUCER span around one send of ``count`` messages, current
    inside (the RPC's client span is its child), failed by an exception. Tracing off:
    None, from one shared empty context (a generator's cost a send ~5 us)."""
    return _producer_span(topic, count, first_body) if tracing_on() else _NO_SPAN


@contextlib.contextmanager
def _producer_span(topic: str, count: int, first_body: object) -> Iterator[Span]:
    attributes = _messaging_attributes("send", topic)
    if count == 1:
        attributes["messaging.message.body.size"] = _body_size(first_body)
    else:
        attributes["messaging.batch.message_count"] = count
    span = tracer().start_span(f"send {topic}", kind=SpanKind.PRODUCER, attributes=attributes)
    with trace.use_span(span, end_on_exit=True):
        yield span


class _SentQueue(Protocol):
    @property
    def queue_id(self) -> int: ...


class _SendAnswer(Protocol):
    """What :func:`record_send` reads of a send's result (the SDK's ``SendResult``)."""

    @property
    def queue(self) -> _SentQueue: ...

    @property
    def msg_id(self) -> str: ...


def record_send(span: Span | None, results: Sequence[_SendAnswer]) -> None:
    """What the broker answered: the queue, and the message id of a single send."""
    if span is None or not span.is_recording() or not results:
        return
    span.set_attribute("messaging.destination.partition.id", str(results[0].queue.queue_id))
    if len(results) == 1:
        span.set_attribute("messaging.message.id", results[0].msg_id)


def message_context(span: Span | None) -> dict[str, str]:
    """The properties that carry ``span``'s context in a message ({} for None)."""
    if span is None or not span.get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    _MESSAGE_PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def create_context(topic: str, body: object) -> dict[str, str]:
    """For one asynchronously sent message: a ``create <topic>`` span's context properties.

    The span ends at once (it marks the message's creation); {} when tracing is off.
    """
    if not tracing_on():
        return {}
    attributes = _messaging_attributes("create", topic)
    attributes["messaging.message.body.size"] = _body_size(body)
    span = tracer().start_span(f"create {topic}", kind=SpanKind.PRODUCER, attributes=attributes)
    try:
        return message_context(span)
    finally:
        span.end()


def current_traceparent() -> str:
    """The current span's W3C ``traceparent`` ("" outside a trace): a streamed send's."""
    if not tracing_on():
        return ""
    return message_context(trace.get_current_span()).get(TRACEPARENT_PROPERTY, "")


@contextlib.contextmanager
def stream_message_span(method: str, traceparent: str) -> Iterator[Span | None]:
    """A SERVER span named ``method`` around one message of a stream, the child of the
    message's ``traceparent`` (a stream has no span per call: module docstring), so the
    calls it makes join the sender's trace. None when tracing is off."""
    if not tracing_on():
        yield None
        return
    parent = _MESSAGE_PROPAGATOR.extract({TRACEPARENT_PROPERTY: traceparent})
    span = tracer().start_span(method, context=parent, kind=SpanKind.SERVER)
    with trace.use_span(span, end_on_exit=True):
        yield span


def message_span_context(properties: Mapping[str, str]) -> SpanContext:
    """The producer span context a message carries (invalid when it carries none)."""
    if TRACEPARENT_PROPERTY not in properties:
        return trace.INVALID_SPAN_CONTEXT
    context = _MESSAGE_PROPAGATOR.extract(properties)
    return trace.get_current_span(context).get_span_context()


@contextlib.contextmanager
def process_span(messages: Sequence[RecordView], group: str) -> Iterator[Span | None]:
    """A ``process <topic>`` CONSUMER span around a listener's work on ``messages``.

    Parent: the first message's producer context (so one trace runs from the
    producer to here); links: every message's. None when tracing is off.
    """
    if not tracing_on() or not messages:
        yield None
        return
    contexts = [message_span_context(m.properties) for m in messages]
    first = messages[0]
    attributes = _messaging_attributes("process", first.topic)
    attributes["messaging.consumer.group.name"] = group
    attributes["messaging.destination.partition.id"] = str(first.queue_id)
    if len(messages) == 1:
        attributes["messaging.message.id"] = first.msg_id
        attributes["messaging.message.body.size"] = len(first.body)
    else:
        attributes["messaging.batch.message_count"] = len(messages)
    parent = (
        trace.set_span_in_context(NonRecordingSpan(contexts[0])) if contexts[0].is_valid else None
    )
    span = tracer().start_span(
        f"process {first.topic}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=[Link(c) for c in contexts if c.is_valid],
    )
    with trace.use_span(span, end_on_exit=True):
        yield span


def annotate(topic: str, queue_id: int, count: int, batch_bytes: int | None) -> None:
    """Add messaging attributes to the current (server) span, when one is recording."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attributes(
        {
            "messaging.system": MESSAGING_SYSTEM,
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(queue_id),
            "messaging.batch.message_count": count,
        }
    )
    if batch_bytes is not None:
        span.set_attribute(BATCH_BYTES_ATTRIBUTE, batch_bytes)


# =================================================================== logs
class TraceIds(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` (hex) to records logged inside a recording span."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True
