"""Server start-up shared by every BoltMQ service (store, broker, registry, HA).

One place decides how a gRPC server is built: the aio server with explicit
message-size limits, the standard health service (NOT_SERVING until the
service says it has recovered), reflection, the port binding (port 0 picks a
free port and the real one is returned) and graceful shutdown on SIGTERM or
SIGINT. Services provide a ``Service`` with ``add_to(server)``, ``start()`` and
``stop()``; :func:`serve` runs it until a signal arrives.

``health_port`` (``BOLTMQ_HEALTH_PORT``, 0: none) adds a second, plaintext
listener that serves only the health service, with the same statuses: the
kubelet's native gRPC probes speak neither TLS (before an alpha feature gate)
nor mutual TLS, so a service port under TLS cannot be probed. It says nothing
but SERVING / NOT_SERVING, and is meant for the pod network only. It binds
``health_host`` when set, so a service bound to loopback (the Kubernetes store)
can still be probed at the pod's address.

A process started by a test or by ``boltmq dev`` prints one line on stdout,
``READY <service> <host:port>``, once it is SERVING, so the parent can read the
port back without polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from boltmq.kernel import allocator, in_process, telemetry
from boltmq.kernel.channels import MAX_MESSAGE_BYTES
from boltmq.kernel.config import ServerSettings
from boltmq.kernel.health_watches import EndingHealthServicer
from boltmq.kernel.malformed_requests import MalformedRequests
from boltmq.kernel.tls import ServerTLS, server_tls

log = logging.getLogger(__name__)

SERVER_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
)
READY_PREFIX = "READY"
LIVENESS_SERVICE = "liveness"
"""Health name that is SERVING while the process runs (a liveness probe), from before
recovery until shutdown begins; "" and the services' names mean ready for traffic."""


class PortInUse(OSError):
    """The requested port could not be bound."""


class Service(Protocol):
    """What a service hands to :func:`serve`."""

    name: str
    """Short name ("store", "broker", ...), used in logs and the READY line."""
    service_names: tuple[str, ...]
    """Full gRPC service names, for health and reflection."""

    def add_to(self, server: grpc.aio.Server) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    # Optional hooks:
    # ``def bound(self, port)``: the port the server really listens on (port 0).
    # ``async def wait_ready(self)``: returns once the started service may take
    # traffic (a broker: registered); health says SERVING only after it.
    # ``async def before_stop(self)``: called once no new call is accepted and
    # before in-flight calls are drained (end endless streams, answer long polls).


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel background tasks, all at once, and wait until each has finished (None:
    skipped).

    Only the caller's own cancellation escapes, never the tasks' ending: a stop or a
    ``finally`` that raised a task's last error would hide the error it is handling
    (a task that failed is logged here). ``await task`` could not tell the task's
    cancellation from the caller's: a caller told to stop while it waited there
    swallowed its own cancellation and ran on for good.
    """
    pending = [task for task in tasks if task is not None]
    for task in pending:
        task.cancel()
    if not pending:
        return
    await asyncio.wait(pending)
    for task in pending:
        if not task.cancelled() and task.exception() is not None:
            log.debug("%r ended with %r before it was cancelled", task, task.exception())


def cancelled_from_below() -> bool:
    """Whether the CancelledError being handled came from below, not from a cancel of the
    running task.

    grpc.aio raises CancelledError out of a call that was cancelled locally (its
    request iterator raised, or something else cancelled it), while nothing
    cancelled the task awaiting it. A loop that must outlive one bad pass (a
    watcher, a reconnecting stream) treats that as the pass failing and goes on;
    its own cancellation (``Task.cancelling()``) it passes on.
    """
    task = asyncio.current_task()
    return task is not None and not task.cancelling()


@contextlib.contextmanager
def one_round(what: str, logger: logging.Logger = log) -> Iterator[None]:
    """One round of a background loop that must outlive it (``with one_round(...):``
    around the round's awaits).

    An unexpected error, or a CancelledError from below (:func:`cancelled_from_below`),
    is logged with ``what`` and swallowed: the loop goes on to its next round. The
    task's own cancellation passes, so the loop still stops. Errors a round expects
    (a store restarting) are handled inside it, with a message of their own.
    """
    try:
        yield
    except asyncio.CancelledError:
        if not cancelled_from_below():
            raise
        logger.exception("%s: a call was cancelled under it", what)
    except Exception:
        logger.exception("%s failed", what)


def answer_encoded(
    server: grpc.aio.Server,
    service_name: str,
    method: str,
    behavior: Callable[..., Awaitable[bytes]],
    parse_request: Callable[[bytes], Any],
) -> None:
    """Register ``method`` again so the bytes its ``behavior`` returns go out as they are.

    For a unary method whose handler writes its answer's protobuf encoding itself
    (a pull's records are not copied into a message and out again:
    :mod:`boltmq.wire.pull_answer`). Call it after the generated
    ``add_*Servicer_to_server``: the handler registered last for a method is the
    one grpc runs (the integration tests pull through both overridden methods).
    """
    handler = grpc.unary_unary_rpc_method_handler(
        behavior, request_deserializer=parse_request
    )  # no response serializer: bytes pass
    server.add_registered_method_handlers(service_name, {method: handler})


WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


def advertised_address(configured: str, listen_host: str, port: int) -> str:
    """``host:port`` a service names itself with: ``configured``, else its host and port.

    A wildcard listen host is not an address a client can dial; the host's
    name resolves to one that usually is (Kubernetes sets the configured one).
    """
    if configured:
        return configured
    host = listen_host
    if host in WILDCARD_HOSTS:
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = "127.0.0.1"
    return f"{host}:{port}"


TEXT_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
JSON_LOG_FIELDS = {"levelname": "level", "name": "logger"}
"""JSON lines: ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, then
``trace_id`` / ``span_id`` inside a span, any ``extra`` fields and ``exc_info``."""


def configure_logging(level: str = "INFO", log_format: str = "text") -> None:
    """Logs to stderr as text lines or JSON lines (``log_format``), replacing earlier set-up."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s", rename_fields=JSON_LOG_FIELDS, timestamp=True
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_LOG_FORMAT))
    handler.addFilter(telemetry.TraceIds())
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), handlers=[handler], force=True
    )
    grpc_core = logging.getLogger(GRPC_CORE_LOGGER)
    if _ENDED_CALLS not in grpc_core.filters:
        grpc_core.addFilter(_ENDED_CALLS)


GRPC_CORE_LOGGER = "grpc._cython.cygrpc"


class EndedCallAnswers(logging.Filter):
    """grpc's aio server logs an ``ExecuteBatchError`` with its traceback, as an error,
    when a handler's answer cannot be sent because the call already ended (the client
    cancelled it, its deadline passed, or the connection went). Nothing of ours failed:
    that record becomes one INFO line naming the method, without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if type(exc).__name__ == "ExecuteBatchError" and record.levelno >= logging.ERROR:
            method = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg, record.args = "answer of %s not sent: its call had ended", (method,)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


_ENDED_CALLS = EndedCallAnswers()


def check_port_free(host: str, port: int) -> None:
    """PortInUse when ``host:port`` cannot be bound (port 0 always can).

    gRPC's own failed bind also writes a C-core error line to stderr, so a taken
    port would be two lines; binding once ourselves first keeps it to one
    (setting GRPC_VERBOSITY was rejected: it would hide every later core error
    too). The probe sets SO_REUSEADDR as gRPC does, so a port left in TIME_WAIT
    by a restarted service still counts as free while one with a listener does
    not. Only "in use" and "not permitted" are reported here; any other bind
    failure (an address family the host lacks) is left to gRPC, which may still
    bind the host's other addresses.
    """
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(
            host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    raise PortInUse(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def _bind(
    server: grpc.aio.Server, host: str, port: int, tls: ServerTLS | None, what: str = ""
) -> int:
    """Listen on ``host:port`` (TLS when ``tls`` is given); the bound port, or PortInUse."""
    check_port_free(host, port)
    try:
        bound: int = (
            server.add_secure_port(f"{host}:{port}", tls.credentials())
            if tls
            else server.add_insecure_port(f"{host}:{port}")
        )
    except RuntimeError as exc:
        raise PortInUse(f"cannot listen on {host}:{port}{what}: {exc}") from None
    if bound == 0:
        raise PortInUse(f"cannot listen on {host}:{port}{what} (in use or not permitted)")
    return bound


async def create_server(
    services: Iterable[Service],
    host: str,
    port: int,
    tls: ServerTLS | None = None,
    reflection_on: bool = True,
    table: in_process.HandlerTable | None = None,
) -> tuple[grpc.aio.Server, int, EndingHealthServicer]:
    """Build the server with every service, health and reflection (unless ``reflection_on``
    is false); bind; return the port. ``table`` also gets the services' and health's
    handlers (for in-process calls: :mod:`boltmq.kernel.in_process`).

    ``tls`` makes the port a TLS one (mutual TLS when it names a client CA).
    A service may declare ``interceptors`` (run after the shared ones, e.g.
    access control and rate limits) and ``maximum_concurrent_rpcs`` (calls
    beyond it get RESOURCE_EXHAUSTED from gRPC itself).
    """
    services = list(services)
    own_interceptors = [i for s in services for i in getattr(s, "interceptors", ())]
    concurrency = [
        c for s in services if (c := getattr(s, "maximum_concurrent_rpcs", None)) is not None
    ]
    # Bytes that are not the request message: INVALID_ARGUMENT, never UNKNOWN.
    server = grpc.aio.server(
        options=SERVER_OPTIONS,
        interceptors=[MalformedRequests(), *telemetry.server_interceptors(), *own_interceptors],
        maximum_concurrent_rpcs=min(concurrency) if concurrency else None,
    )
    health_servicer = EndingHealthServicer()
    registering = server if table is None else in_process.recording(server, table)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, registering)
    names: list[str] = [health.SERVICE_NAME, reflection.SERVICE_NAME]
    for service in services:
        service.add_to(registering)
        names.extend(service.service_names)
        for service_name in service.service_names:
            await health_servicer.set(service_name, health_pb2.HealthCheckResponse.NOT_SERVING)
    await health_servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    await health_servicer.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    if reflection_on:
        reflection.enable_server_reflection(names, server)
    bound = _bind(server, host, port, tls)
    for service in services:
        on_bound = getattr(service, "bound", None)
        if on_bound is not None:
            on_bound(bound)  # e.g. a broker announces its real port (port 0) to registries
    return server, bound, health_servicer


async def start_health_listener(
    health_servicer: health.aio.HealthServicer, host: str, port: int
) -> grpc.aio.Server:
    """A started plaintext server on ``host:port`` with only ``health_servicer`` on it."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    bound = _bind(server, host, port, None, " (health_port)")
    await server.start()
    log.info("health checks (plaintext) on %s:%d", host, bound)
    return server


async def create_in_process(
    service: Service, host: str, port: int, tls: ServerTLS | None = None
) -> tuple[grpc.aio.Server, int]:
    """A bound server with ``service`` started and SERVING, for in-process use (tests).

    The caller starts the server; its ``server.stop(grace)`` also runs the
    service's ``before_stop`` first and ``stop`` after, as :func:`serve` does.
    Rejected: a background task waiting for termination, which ``asyncio.run``
    cancels half-way through the service's own shutdown at its end.
    """
    server, bound, health_servicer = await create_server([service], host, port, tls)
    try:
        await service.start()
    except BaseException:
        await server.stop(0)
        raise
    stop = server.stop

    async def stop_with_service(grace: float | None) -> None:
        before_stop = getattr(service, "before_stop", None)
        if before_stop is not None:
            await before_stop()
        try:
            await stop(grace)
        finally:
            await service.stop()

    setattr(server, "stop", stop_with_service)  # noqa: B010
    wait_ready = getattr(service, "wait_ready", None)
    if wait_ready is not None:
        await wait_ready()
    for name in (*service.service_names, ""):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, bound


async def _ready_unless_stopped(service: Service, stop: asyncio.Event) -> bool:
    """Wait for the service's ``wait_ready`` (if any); False when ``stop`` came first."""
    wait_ready = getattr(service, "wait_ready", None)
    if wait_ready is None:
        return True
    ready: asyncio.Task[None] = asyncio.create_task(wait_ready())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait((ready, stopped), return_when=asyncio.FIRST_COMPLETED)
    await cancel_and_wait(ready)
    stopped.cancel()
    return not stop.is_set()


async def serve(
    service: Service,
    host: str,
    port: int,
    grace_s: float = 10.0,
    tls: ServerTLS | None = None,
    health_port: int = 0,
    health_host: str = "",
    reflection_on: bool = True,
) -> None:
    """Start ``service`` on ``host:port``, announce READY, run until SIGTERM/SIGINT.

    ``health_port`` > 0 also serves the health statuses in plaintext there, on
    ``health_host`` ("": ``host``). ``reflection_on`` false serves no gRPC reflection.
    """
    part = Part(lambda _: service, host, port, grace_s, tls, health_port, health_host)
    await serve_together([part], reflection_on)


@dataclass(frozen=True)
class Part:
    """One service of a process (:func:`serve_together`): how to build it, where it listens.

    ``build`` gets the addresses of the parts started before it (a broker, its store's).
    """

    build: Callable[[Sequence[str]], Service]
    host: str
    port: int
    grace_s: float = 10.0
    tls: ServerTLS | None = None
    health_port: int = 0
    health_host: str = ""


@dataclass
class _Running:
    service: Service
    server: grpc.aio.Server
    health_servicer: EndingHealthServicer
    health_server: grpc.aio.Server | None
    part: Part
    address: str = ""


async def serve_together(parts: Sequence[Part], reflection_on: bool = True) -> None:
    """Start each part in turn (each SERVING and announced READY before the next is built),
    run until SIGTERM/SIGINT, then stop them in reverse order.

    With more than one part, each part's handlers answer the later parts' calls to its
    address in process (:mod:`boltmq.kernel.in_process`): a broker served with its store
    calls the store without a hop.
    """
    allocator.keep_freed_memory()  # batch calls stop page-faulting their buffers in
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        # Before the port opens: "liveness" says SERVING from then on, and a signal
        # during start-up (recovery) must end in a clean stop once it is done.
        loop.add_signal_handler(sig, stop.set)
    running: list[_Running] = []
    try:
        for part in parts:
            if not await _start_part(part, running, stop, reflection_on, len(parts) > 1):
                break
        else:
            await stop.wait()
    finally:
        for started in reversed(running):
            await _stop_part(started)


async def _start_part(
    part: Part, running: list[_Running], stop: asyncio.Event, reflection_on: bool, shared: bool
) -> bool:
    """Build, bind, start and announce one part; False when a signal came first."""
    service = part.build([started.address for started in running])
    table = in_process.HandlerTable() if shared else None
    server, bound, health_servicer = await create_server(
        [service], part.host, part.port, part.tls, reflection_on, table
    )
    health_server = (
        await start_health_listener(
            health_servicer, part.health_host or part.host, part.health_port
        )
        if part.health_port
        else None
    )
    try:
        await server.start()
        await service.start()
    except BaseException:
        await server.stop(0)
        if health_server is not None:
            await health_server.stop(0)
        raise
    address = f"{'127.0.0.1' if part.host in WILDCARD_HOSTS else part.host}:{bound}"
    running.append(_Running(service, server, health_servicer, health_server, part, address))
    if table is not None:
        in_process.serve_here(address, table)
    allocator.settle_garbage_collector()  # recovered state out of the collector's walks
    if stop.is_set() or not await _ready_unless_stopped(service, stop):
        return False
    for service_name in (*service.service_names, ""):
        await health_servicer.set(service_name, health_pb2.HealthCheckResponse.SERVING)
    print(f"{READY_PREFIX} {service.name} {part.host}:{bound}", flush=True)
    log.info("%s serving on %s:%d", service.name, part.host, bound)
    return True


async def _stop_part(started: _Running) -> None:
    """Drain and stop one part: health says NOT_SERVING, endless streams end, the server
    drains its calls within the grace period, then the service stops."""
    service = started.service
    log.info("%s stopping", service.name)
    await started.health_servicer.enter_graceful_shutdown()
    await (
        started.health_servicer.end_watches()
    )  # they said NOT_SERVING: they must not hold the grace
    before_stop = getattr(service, "before_stop", None)
    if before_stop is not None:
        await before_stop()  # end endless streams, or they hold the whole grace period
    try:
        await started.server.stop(started.part.grace_s)
    finally:
        in_process.withdraw(started.address)
        await service.stop()
        if started.health_server is not None:
            await started.health_server.stop(0)
    log.info("%s stopped", service.name)


async def create_configured(
    service: Service, host: str, port: int, settings: ServerSettings
) -> tuple[grpc.aio.Server, int]:
    """:func:`create_in_process` for ``service`` with its config's TLS (each service's
    ``create_server``)."""
    return await create_in_process(service, host, port, server_tls(settings))


async def serve_configured(
    build: Callable[[], Service], host: str, port: int, settings: ServerSettings
) -> None:
    """:func:`serve` the service ``build`` makes, with its config's TLS, shutdown grace
    and health port (each service's ``serve``, what ``boltmq serve <service>`` runs).

    The TLS files are read before the service is built: a bad file fails before
    anything starts.
    """
    tls = server_tls(settings)
    await serve(
        build(),
        host,
        port,
        grace_s=settings.shutdown_grace_ms / 1000,
        tls=tls,
        health_port=settings.health_port,
        health_host=settings.health_host,
        reflection_on=settings.reflection,
    )
