"""Fuzz the unary gRPC handlers of the registry, the store (master and replica) and the broker.

Requests are built by Hypothesis from each method's proto descriptor
(:func:`requests_of`): every field filled or left out, strings drawn from
hostile names (path traversal, control characters, 100 KiB names, non-ASCII),
integers at their edges, bytes random, repeated and map fields long. A
second property sends the serialized bytes of such requests mutated (flipped,
cut, spliced) as the request, so the protobuf decoder is reached too.

Invariant: every call returns a response or a proper status before its
deadline; never UNKNOWN or INTERNAL (an unhandled exception in a handler) nor
DEADLINE_EXCEEDED (a hang: the broker's long polls are capped below the
deadline), every process stays up, and no log holds a traceback. Streaming
methods are fuzzed in :mod:`tests.fuzz.test_grpc_streams`.
Requests per method: ``BOLTMQ_FUZZ_EXAMPLES``.

The named cases follow: topic and group names that try to escape the data
directory, bodies at and past the store's limit, hundreds of thousands of
tiny properties, and sends to a replica store.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor as d
from google.protobuf import message_factory
from google.protobuf.message import Message as ProtoMessage
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boltmq import Message, Producer, ProducerOptions, SendError
from boltmq.cli.dev.launcher import ServiceProcess
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, message_pb2, registry_pb2, store_pb2
from tests.reliability.conftest import FaultCluster
from tests.reliability.scale import FUZZ_EXAMPLES

SERVER_FAULTS = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
HANGS = (*SERVER_FAULTS, grpc.StatusCode.DEADLINE_EXCEEDED)
"""A call ending with one of these failed the fuzz: a server fault, or a hang."""
CALL_TIMEOUT_S = 5.0
"""Every call ends before this deadline, or it hangs: long polls (a fuzzed suspend time)
are capped well below it (``LONG_POLL_MAX``)."""
LONG_POLL_MAX = "long_poll_max_ms=1000"
MAX_BODY_BYTES = 64 * 1024
HOSTILE_NAMES = [
    "../../../../etc/passwd",
    "..",
    ".",
    "/",
    "a/b",
    "a\\b",
    "%RETRY%",
    "\x00",
    "topic\x00nul",
    "\n\r\t",
    "\x01\x02",
    "\u202e\u0000\ufffd",
    "é" * 200,
    "x" * 128,
    "x" * 256,
    "x" * 65_536,
    "x" * 100_000,
    " ",
    "*",
    "||",
    "CON",
]
MUST_REFUSE = [
    "../../../../etc/passwd",
    "..",
    ".",
    "/",
    "a/b",
    "a\\b",
    "\x00",
    "topic\x00nul",
    "\n\r\t",
    "\x01\x02",
    "x" * 100_000,
]
"""Names that would escape the data directory, cannot be a file name, or are far too long."""
SERVICES = {"registry": registry_pb2, "store": store_pb2, "broker": broker_pb2}
SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck)
)


# ------------------------------------------------------------------ strategies from descriptors
def scalar(field: d.FieldDescriptor) -> st.SearchStrategy[object]:
    t = field.type
    if t == d.FieldDescriptor.TYPE_STRING:
        return st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=40))
    if t == d.FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=600), st.just(bytes(MAX_BODY_BYTES + 1)))
    if t == d.FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == d.FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values] + [999])
    if t in (d.FieldDescriptor.TYPE_DOUBLE, d.FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=False, width=32)
    bits = (
        64
        if t
        in (
            d.FieldDescriptor.TYPE_INT64,
            d.FieldDescriptor.TYPE_SINT64,
            d.FieldDescriptor.TYPE_SFIXED64,
        )
        else 32
    )
    if t in (
        d.FieldDescriptor.TYPE_UINT32,
        d.FieldDescriptor.TYPE_UINT64,
        d.FieldDescriptor.TYPE_FIXED32,
        d.FieldDescriptor.TYPE_FIXED64,
    ):
        return st.one_of(st.sampled_from([0, 1, (1 << bits) - 1]), st.integers(0, 1000))
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return st.one_of(
        st.sampled_from([0, 1, -1, low, high, 1023, 1024]), st.integers(-1000, 100_000)
    )


@st.composite
def message_of(draw: st.DrawFn, descriptor: d.Descriptor, depth: int = 0) -> ProtoMessage:
    """A message of ``descriptor`` with a random subset of its fields set."""
    msg = message_factory.GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_f, value_f = (
                field.message_type.fields_by_name["key"],
                field.message_type.fields_by_name["value"],
            )
            if value_f.message_type is not None:
                continue  # maps of messages: none in requests worth the depth
            entries = draw(st.dictionaries(scalar(key_f), scalar(value_f), max_size=6))
            getattr(msg, field.name).update(entries)
        elif field.message_type is not None:
            if depth >= 2:
                continue
            values = (
                draw(st.lists(message_of(field.message_type, depth + 1), max_size=3))
                if _repeated(field)
                else [draw(message_of(field.message_type, depth + 1))]
            )
            if _repeated(field):
                getattr(msg, field.name).extend(values)
            else:
                getattr(msg, field.name).CopyFrom(values[0])
        elif _repeated(field):
            getattr(msg, field.name).extend(draw(st.lists(scalar(field), max_size=5)))
        else:
            setattr(msg, field.name, draw(scalar(field)))
    return msg


def _repeated(field: d.FieldDescriptor) -> bool:
    return (
        bool(field.is_repeated)
        if hasattr(field, "is_repeated")
        else field.label == d.FieldDescriptor.LABEL_REPEATED
    )


@st.composite
def mutated_bytes(draw: st.DrawFn, descriptor: d.Descriptor) -> bytes:
    data = bytearray(draw(message_of(descriptor)).SerializeToString())
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(data))))
        choice = draw(st.integers(0, 2))
        if choice == 0 and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif choice == 1:
            del data[at : at + draw(st.integers(1, 16))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


# ------------------------------------------------------------------ the services
def unary_methods(module: object) -> Iterator[tuple[str, d.MethodDescriptor]]:
    for service in module.DESCRIPTOR.services_by_name.values():  # type: ignore[attr-defined]
        for method in service.methods:
            if not method.client_streaming and not method.server_streaming:
                yield service.full_name, method


class Targets:
    """The fuzzed processes: a cluster (registry, master store, broker) and a replica store."""

    def __init__(self, cluster: FaultCluster, replica: ServiceProcess) -> None:
        self.cluster = cluster
        self.replica = replica

    def addresses(self, kind: str) -> list[str]:
        if kind == "registry":
            return [self.cluster.registry.address]
        if kind == "store":
            return [self.cluster.store.address, self.replica.address]
        return [self.cluster.broker.address]

    def processes(self) -> list[ServiceProcess]:
        c = self.cluster
        return [c.registry, c.store, c.broker, self.replica]


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    """The processes the fuzz runs hit (which may change their roles and topics)."""
    yield from start_targets(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    """Processes for the named cases, untouched by the fuzz runs (the master stays master)."""
    yield from start_targets(tmp_path_factory.mktemp("named"))


def start_targets(tmp_path: Path) -> Iterator[Targets]:
    cluster = FaultCluster(
        tmp_path,
        store_settings=(f"max_message_size_bytes={MAX_BODY_BYTES}",),
        broker_settings=(LONG_POLL_MAX,),
    )
    replica = ServiceProcess(
        "store",
        cluster.log_dir,
        f"root_dir={tmp_path / 'replica'}",
        "broker_role=SLAVE",
        "mapped_file_size_commitlog=4194304",
    ).start()
    try:
        with Producer(cluster.registry.address, "fuzz-seed") as producer:
            producer.send(Message("FuzzSeed", b"seed", keys=["k"]))  # something to read
        yield Targets(cluster, replica)
    finally:
        replica.stop()
        cluster.stop()


def call(address: str, path: str, payload: bytes) -> grpc.StatusCode:
    """One raw unary call; its status code (OK when it answered)."""
    with sync_channel(address) as channel:
        stub = channel.unary_unary(path)
        try:
            stub(payload, timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def fuzz_service(targets: Targets, kind: str, mutate: bool) -> None:
    """Every unary method of ``kind``, FUZZ_EXAMPLES requests each, at every address."""
    faults: list[str] = []
    for service, method in unary_methods(SERVICES[kind]):
        build = (
            mutated_bytes(method.input_type)
            if mutate
            else message_of(method.input_type).map(lambda m: m.SerializeToString())
        )
        fuzz_method(targets.addresses(kind), f"/{service}/{method.name}", build, faults)
    assert faults == [], faults[:5]
    check_healthy(targets)


def fuzz_method(
    addresses: list[str], path: str, build: st.SearchStrategy[bytes], faults: list[str]
) -> None:
    """FUZZ_EXAMPLES requests from ``build`` to ``path`` at every address; faults noted."""

    @SETTINGS
    @given(build)
    def one_request(payload: bytes) -> None:
        for address in addresses:
            code = call(address, path, payload)
            if code in HANGS:
                faults.append(f"{path} at {address}: {code.name} for {payload[:120]!r}")

    one_request()


def check_healthy(targets: Targets) -> None:
    """Every process is alive, answers its health check, and logged no traceback."""
    for proc in targets.processes():
        assert proc.alive(), f"{proc.service} died: {proc.last_error()}"
        with sync_channel(proc.address) as channel:
            status = (
                health_pb2_grpc.HealthStub(channel)
                .Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
                .status
            )
        assert status == health_pb2.HealthCheckResponse.SERVING, proc.service
    assert targets.cluster.tracebacks() == []


@pytest.mark.parametrize("kind", list(SERVICES))
def test_generated_requests_get_a_response_or_a_proper_status_and_services_stay_up(
    targets: Targets, kind: str
) -> None:
    fuzz_service(targets, kind, mutate=False)


@pytest.mark.parametrize("kind", list(SERVICES))
def test_mutated_request_bytes_get_a_response_or_a_proper_status_and_services_stay_up(
    targets: Targets, kind: str
) -> None:
    fuzz_service(targets, kind, mutate=True)


# ------------------------------------------------------------------ named cases
def test_hostile_names_are_refused_and_create_nothing_outside_the_store(
    fresh: Targets, tmp_path: Path
) -> None:
    with Producer(
        fresh.cluster.registry.address, "fuzz-names", options=ProducerOptions(retry_times=0)
    ) as producer:
        for name in MUST_REFUSE:
            with pytest.raises((SendError, ValueError)):
                producer.send(Message(name, b"x"))
        for name in set(HOSTILE_NAMES) - set(MUST_REFUSE):  # refused or stored inside
            try:
                producer.send(Message(name, b"x"))
            except (SendError, ValueError):
                pass
    root = fresh.cluster.root_dir
    inside = {p.resolve() for p in (root / "consumequeue").rglob("*")}
    assert all(root.resolve() in p.parents for p in inside)
    assert not any(p.name in ("passwd", "etc") for p in inside)
    check_healthy(fresh)


def test_bodies_at_the_limit_are_stored_and_past_it_refused_clearly(fresh: Targets) -> None:
    with Producer(
        fresh.cluster.registry.address, "fuzz-bodies", options=ProducerOptions(retry_times=0)
    ) as producer:
        # Random bytes: the producer compresses large bodies, and the limit is the
        # stored body's, so zeros past it would shrink under it and be stored.
        stored = producer.send(Message("FuzzBodies", os.urandom(MAX_BODY_BYTES)))
        assert stored.queue_offset >= 0
        with pytest.raises(SendError, match="body"):
            producer.send(Message("FuzzBodies", os.urandom(MAX_BODY_BYTES + 1)))
    check_healthy(fresh)


@pytest.mark.parametrize("count", [40_000, 400_000])
def test_very_many_tiny_properties_are_refused_with_a_status(fresh: Targets, count: int) -> None:
    msg = message_pb2.Message(
        topic="FuzzProps", body=b"x", properties={f"k{n}": "" for n in range(count)}
    )
    payload = store_pb2.AppendRequest(messages=[msg]).SerializeToString()
    code = call(fresh.cluster.store.address, "/boltmq.v1.StoreService/Append", payload)
    assert code not in SERVER_FAULTS
    if code is grpc.StatusCode.OK:  # answered: then the message itself must be refused
        with sync_channel(fresh.cluster.store.address) as channel:
            response = channel.unary_unary(
                "/boltmq.v1.StoreService/Append",
                response_deserializer=store_pb2.AppendResponse.FromString,
            )(payload, timeout=CALL_TIMEOUT_S)
        assert list(response.statuses) == [message_pb2.PROPERTIES_SIZE_EXCEEDED], response
    check_healthy(fresh)


def test_sends_to_a_replica_store_are_refused_and_store_nothing(tmp_path: Path) -> None:
    # A replica of its own: the fuzzing above may well have promoted the shared one.
    root = tmp_path / "replica"
    replica = ServiceProcess(
        "store",
        tmp_path / "logs",
        f"root_dir={root}",
        "broker_role=SLAVE",
        "mapped_file_size_commitlog=4194304",
    ).start()
    try:
        msg = message_pb2.Message(topic="FuzzReplica", body=b"x")
        with sync_channel(replica.address) as channel:
            response = channel.unary_unary(
                "/boltmq.v1.StoreService/Append",
                request_serializer=store_pb2.AppendRequest.SerializeToString,
                response_deserializer=store_pb2.AppendResponse.FromString,
            )(store_pb2.AppendRequest(messages=[msg] * 3), timeout=CALL_TIMEOUT_S)
        assert set(response.statuses) == {message_pb2.SERVICE_NOT_AVAILABLE}
        assert all("replica" in response.errors[i] for i in range(3)), response
        assert not (root / "consumequeue" / "FuzzReplica").exists()
        assert replica.alive()
    finally:
        assert replica.stop() == 0
