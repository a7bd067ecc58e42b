"""Fuzz the streaming gRPC methods of the store, the broker and the HA service.

The requests of each stream are built by Hypothesis from the method's proto
descriptor, as for the unary handlers (:mod:`tests.fuzz.test_grpc_handlers`):
hostile names, integers at their edges, random and oversized bytes, and the
serialized bytes of such requests mutated. Each method is one conversation:

- streams that end when the client does (the store's AppendStream,
  AppendRawStream and ReportReplicas, ReadCommitLog without ``follow``, the broker's
  SendStream, the HA service's Replicate fed hostile replica reports): the client sends its
  requests and closes its side; the call must end, with every request answered
  when it ends OK, before its deadline;
- streams that stay open by design (WatchArrivals, WatchQueues, a following
  ReadCommitLog, the broker's TransactionChecks): the call must either end
  with a proper status or show it is serving before its deadline: the store's
  watches send their ``boltmq-watching`` metadata and then answer a probe
  (a message appended to a queue the stream waits on), a following read
  delivers the probe's record, TransactionChecks sends its registration
  metadata. The client then cancels.

Invariant: no call ends UNKNOWN or INTERNAL (an unhandled exception in a
handler), none hangs until its deadline (DEADLINE_EXCEEDED is a failure here),
no answer inside a stream carries such a code, and after each batch of examples
every process is alive, answers its health check and logged no traceback.
Conversations per method: ``BOLTMQ_FUZZ_EXAMPLES``.
"""

from __future__ import annotations

import collections
import queue
from collections.abc import Callable, Iterator
from typing import TypeVar

import grpc
import pytest
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from hypothesis import given
from hypothesis import strategies as st

from boltmq.cli.dev.launcher import ServiceProcess
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, ha_pb2, message_pb2, store_pb2
from tests.fuzz.test_grpc_handlers import (
    CALL_TIMEOUT_S,
    HANGS,
    SERVER_FAULTS,
    SETTINGS,
    Targets,
    check_healthy,
    message_of,
    mutated_bytes,
    start_targets,
)

M = TypeVar("M", bound=ProtoMessage)
PROBE_TOPIC = "FuzzProbe"
STORE = "/boltmq.v1.StoreService/"
WATCHING = ("boltmq-watching", "1")
CHECKS_OPEN = ("boltmq-checks-open", "1")
SERVED: collections.Counter[str] = collections.Counter()
"""Conversations of an open-by-design stream that showed it was serving, by method."""
HA_SETTINGS = ("heartbeat_interval_ms=200", "housekeeping_interval_ms=2000")


class StreamTargets(Targets):
    """The fuzzed processes, with an HA service beside the master store."""

    def __init__(self, targets: Targets, ha: ServiceProcess) -> None:
        super().__init__(targets.cluster, targets.replica)
        self.ha = ha

    def processes(self) -> list[ServiceProcess]:
        return [*super().processes(), self.ha]


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StreamTargets]:
    for started in start_targets(tmp_path_factory.mktemp("streams")):
        cluster = started.cluster
        ha = ServiceProcess(
            "ha", cluster.log_dir, f"store_address={cluster.store.address}", *HA_SETTINGS
        ).start()
        try:
            yield StreamTargets(started, ha)
        finally:
            ha.stop()


# ------------------------------------------------------------------ conversations
class Requests:
    """A request stream the test feeds while the call runs; :meth:`close` half-closes it."""

    def __init__(self, payloads: list[bytes]) -> None:
        self._queue: queue.Queue[bytes | None] = queue.Queue()
        for payload in payloads:
            self._queue.put(payload)

    def send(self, payload: bytes) -> None:
        self._queue.put(payload)

    def close(self) -> None:
        self._queue.put(None)

    def __iter__(self) -> Iterator[bytes]:
        while (payload := self._queue.get()) is not None:
            yield payload


def ended(call: Iterator[bytes]) -> tuple[grpc.StatusCode, list[bytes]]:
    """Read a response stream to its end: its status and the answers read."""
    answers: list[bytes] = []
    try:
        answers.extend(call)
    except grpc.RpcError as exc:
        return exc.code(), answers  # type: ignore[no-any-return]
    return grpc.StatusCode.OK, answers


def finite_bidi(
    address: str, method: str, payloads: list[bytes]
) -> tuple[grpc.StatusCode, list[bytes]]:
    """Send every payload, half-close, read every answer until the call ends."""
    with sync_channel(address) as channel:
        return ended(channel.stream_stream(method)(iter(payloads), timeout=CALL_TIMEOUT_S))


def client_stream(address: str, method: str, payloads: list[bytes]) -> grpc.StatusCode:
    with sync_channel(address) as channel:
        try:
            channel.stream_unary(method)(iter(payloads), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def until(
    call: Iterator[bytes], seen: Callable[[bytes], bool]
) -> tuple[grpc.StatusCode | None, list[bytes]]:
    """Read answers until ``seen`` holds for one (None: the stream is serving; cancelled)
    or the call ends (its status)."""
    answers: list[bytes] = []
    try:
        for answer in call:
            answers.append(answer)
            if seen(answer):
                call.cancel()  # type: ignore[attr-defined]
                return None, answers
    except grpc.RpcError as exc:
        return exc.code(), answers  # type: ignore[no-any-return]
    return grpc.StatusCode.OK, answers


def metadata_of(call: object) -> tuple[tuple[str, str], ...]:
    """The call's initial metadata (blocks until it came or the call ended)."""
    return tuple((m.key, m.value) for m in call.initial_metadata() or ())  # type: ignore[attr-defined]


def append_probe(store_address: str) -> int:
    """Append one message to PROBE_TOPIC queue 0 at the store; its CommitLog offset."""
    request = store_pb2.AppendRequest(
        messages=[message_pb2.Message(topic=PROBE_TOPIC, queue_id=0, body=b"probe")]
    )
    with sync_channel(store_address) as channel:
        response = channel.unary_unary(
            f"{STORE}Append",
            request_serializer=store_pb2.AppendRequest.SerializeToString,
            response_deserializer=store_pb2.AppendResponse.FromString,
        )(request, timeout=CALL_TIMEOUT_S)
    assert list(response.statuses) == [message_pb2.PUT_OK], response
    return int(response.commitlog_offsets[0])


def parsed(cls: type[M], payload: bytes) -> M | None:
    """``payload`` parsed as ``cls``; None when it does not parse (the server refuses it)."""
    try:
        return cls.FromString(payload)
    except DecodeError:
        return None


def probed(answer: bytes) -> bool:
    """An arrival on the probe's topic."""
    return store_pb2.Arrival.FromString(answer).topic == PROBE_TOPIC


def past(offset: int) -> Callable[[bytes], bool]:
    """A chunk that ends past ``offset``."""
    return lambda answer: store_pb2.CommitLogChunk.FromString(answer).end_offset > offset


# ------------------------------------------------------------------ per method
def appends_in(payload: bytes) -> int:
    """The appends one AppendStream message asks to be answered (itself and its ``more``)."""
    try:
        return 1 + len(store_pb2.AppendStreamRequest.FromString(payload).more)
    except DecodeError:
        return 1  # the call fails before anything is answered; the count is not checked


def append_stream(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    faults = []
    for address in targets.addresses("store"):
        code, answers = finite_bidi(address, f"{STORE}AppendStream", payloads)
        parsed = [store_pb2.AppendStreamResponse.FromString(a) for a in answers]
        each = [r for response in parsed for r in (response, *response.more)]
        bad = {r.error_code for r in each} & {c.value[0] for c in SERVER_FAULTS}
        asked = sum(appends_in(p) for p in payloads)  # a message's `more` is answered too
        if code in HANGS or bad or (code is grpc.StatusCode.OK and len(each) != asked):
            faults.append(
                f"at {address}: {code.name}, {len(each)}/{asked} answered, {bad}"
                f" for {[p[:60] for p in payloads]!r}"
            )
    return faults


def append_raw_stream(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    faults = []
    for address in targets.addresses("store"):
        code, answers = finite_bidi(address, f"{STORE}AppendRawStream", payloads)
        if code in HANGS or (code is grpc.StatusCode.OK and len(answers) != len(payloads)):
            faults.append(f"at {address}: {code.name}, {len(answers)}/{len(payloads)} answered")
    return faults


def report_replicas(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    codes = [
        client_stream(a, f"{STORE}ReportReplicas", payloads) for a in targets.addresses("store")
    ]
    return [f"{code.name}" for code in codes if code in HANGS]


def read_commitlog(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    """Without follow: ends by itself. With follow: delivers a record appended meanwhile."""
    faults = []
    master = targets.cluster.store.address
    for payload in payloads:
        request = parsed(store_pb2.ReadCommitLogRequest, payload)
        with sync_channel(master) as channel:
            call = channel.unary_stream(f"{STORE}ReadCommitLog")(payload, timeout=CALL_TIMEOUT_S)
            if request is None or not request.follow:
                code, _ = ended(call)
            else:
                code, _ = until(call, past(append_probe(master)))
                SERVED["ReadCommitLog"] += code is None
        if code in HANGS:
            faults.append(f"{code.name} for {payload[:120]!r}")
    return faults


def watch_arrivals(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    """Watching metadata, then an arrival on the probe's queue (or a proper status)."""
    faults = []
    master = targets.cluster.store.address
    for payload in payloads:
        with sync_channel(master) as channel:
            call = channel.unary_stream(f"{STORE}WatchArrivals")(payload, timeout=CALL_TIMEOUT_S)
            code: grpc.StatusCode | None = None
            if WATCHING in metadata_of(call):
                append_probe(master)
                code, _ = until(call, probed)
                SERVED["WatchArrivals"] += code is None
            else:
                code, _ = ended(call)
        if code in HANGS:
            faults.append(f"{code.name} for {payload[:120]!r}")
    return faults


def watch_queues(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    """The fuzzed interests, then one on the probe's queue: answered, or a proper status."""
    master = targets.cluster.store.address
    probe = store_pb2.QueueInterest(topic=PROBE_TOPIC, queue_id=0, after_offset=0)
    requests = Requests(payloads)
    requests.send(probe.SerializeToString())
    with sync_channel(master) as channel:
        call = channel.stream_stream(f"{STORE}WatchQueues")(iter(requests), timeout=CALL_TIMEOUT_S)
        code, _ = until(call, probed)
        SERVED["WatchQueues"] += code is None
        requests.close()
    return [f"{code.name} for {payloads[:3]!r}"] if code in HANGS else []


def transaction_checks(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    """Registration metadata (the stream is open), or a proper status."""
    faults = []
    for payload in payloads:
        with sync_channel(targets.cluster.broker.address) as channel:
            call = channel.unary_stream("/boltmq.v1.BrokerService/TransactionChecks")(
                payload, timeout=CALL_TIMEOUT_S
            )
            if CHECKS_OPEN in metadata_of(call):
                call.cancel()
                SERVED["TransactionChecks"] += 1
                continue
            code, _ = ended(call)
        if code in HANGS:
            faults.append(f"{code.name} for {payload[:120]!r}")
    return faults


def send_stream(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    """Hostile sends on the broker's send stream, then the client hangs up: the stream
    must end (each send answered inside it, or the stream refused with a proper status),
    and no answer inside it may carry a server fault."""
    address = targets.cluster.broker.address
    code, answers = finite_bidi(address, "/boltmq.v1.BrokerService/SendStream", payloads)
    bad = [
        a.code
        for a in (parsed(broker_pb2.SendStreamResponse, raw) for raw in answers)
        if a is not None and a.code in {c.value[0] for c in SERVER_FAULTS}
    ]
    if code in HANGS or bad:
        return [f"{code.name}, faults inside {bad} for {payloads[:3]!r}"]
    return []


def replicate(targets: StreamTargets, payloads: list[bytes]) -> list[str]:
    """Hostile replica reports, then the replica hangs up: the stream must end."""
    code, _ = finite_bidi(targets.ha.address, "/boltmq.v1.HAService/Replicate", payloads)
    return [f"{code.name} for {payloads[:3]!r}"] if code in HANGS else []


Conversation = Callable[[StreamTargets, list[bytes]], list[str]]
STREAMS: dict[str, tuple[type[ProtoMessage], Conversation]] = {
    "AppendStream": (store_pb2.AppendStreamRequest, append_stream),
    "AppendRawStream": (store_pb2.CommitLogChunk, append_raw_stream),
    "ReportReplicas": (store_pb2.ReplicaProgress, report_replicas),
    "ReadCommitLog": (store_pb2.ReadCommitLogRequest, read_commitlog),
    "WatchArrivals": (store_pb2.WatchArrivalsRequest, watch_arrivals),
    "WatchQueues": (store_pb2.QueueInterest, watch_queues),
    "TransactionChecks": (broker_pb2.TransactionChecksRequest, transaction_checks),
    "SendStream": (broker_pb2.SendStreamRequest, send_stream),
    "Replicate": (ha_pb2.ReplicaReport, replicate),
}


def test_every_streaming_method_is_fuzzed() -> None:
    streaming = {
        method.name
        for module in (store_pb2, broker_pb2, ha_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
        if method.client_streaming or method.server_streaming
    }
    assert streaming == set(STREAMS)


LEGITIMATE: dict[str, ProtoMessage] = {
    "ReadCommitLog": store_pb2.ReadCommitLogRequest(offset=0, follow=True),
    "WatchArrivals": store_pb2.WatchArrivalsRequest(),
    "WatchQueues": store_pb2.QueueInterest(topic="FuzzSeed", queue_id=0, after_offset=0),
    "TransactionChecks": broker_pb2.TransactionChecksRequest(
        producer_group="fuzz-tx", client_id="fuzz-client"
    ),
}
"""A request each open-by-design stream serves: the fuzz's probes must see it serving."""


@pytest.mark.parametrize("name", list(LEGITIMATE))
def test_the_probes_see_a_legitimate_stream_serving(targets: StreamTargets, name: str) -> None:
    served = SERVED[name]
    assert STREAMS[name][1](targets, [LEGITIMATE[name].SerializeToString()]) == []
    assert SERVED[name] == served + 1


def fuzz_stream(targets: StreamTargets, name: str, mutate: bool) -> None:
    request_type, conversation = STREAMS[name]
    descriptor = request_type.DESCRIPTOR
    one = (
        mutated_bytes(descriptor)
        if mutate
        else message_of(descriptor).map(lambda m: m.SerializeToString())
    )
    faults: list[str] = []

    @SETTINGS
    @given(st.lists(one, min_size=1, max_size=4))
    def one_conversation(payloads: list[bytes]) -> None:
        faults.extend(f"{name} {fault}" for fault in conversation(targets, payloads))

    one_conversation()
    assert faults == [], faults[:5]
    check_healthy(targets)


@pytest.mark.parametrize("name", list(STREAMS))
def test_generated_streams_end_or_serve_with_proper_statuses_and_services_stay_up(
    targets: StreamTargets, name: str
) -> None:
    fuzz_stream(targets, name, mutate=False)


@pytest.mark.parametrize("name", list(STREAMS))
def test_mutated_stream_messages_end_or_serve_with_proper_statuses_and_services_stay_up(
    targets: StreamTargets, name: str
) -> None:
    fuzz_stream(targets, name, mutate=True)


# ------------------------------------------------------------------ named cases
GARBLED = b"\x82:\x18_"
"""Bytes that parse as no message (a length-delimited field running past the end)."""


@pytest.mark.parametrize(
    ("method", "first"),
    [
        (f"{STORE}AppendStream", store_pb2.AppendStreamRequest(id=1)),
        (f"{STORE}AppendRawStream", store_pb2.CommitLogChunk(offset=0, data=b"x", end_offset=1)),
        (f"{STORE}WatchQueues", store_pb2.QueueInterest(topic="FuzzSeed", queue_id=0)),
        ("/boltmq.v1.HAService/Replicate", ha_pb2.ReplicaReport(max_offset=0)),
    ],
)
def test_a_garbled_message_mid_stream_ends_the_call_invalid_argument_at_once(
    targets: StreamTargets, method: str, first: ProtoMessage
) -> None:
    """After a valid first message (an AppendStream append then waits for its fsync on
    the SYNC_FLUSH master, and its answer is being written as the garbled one arrives)."""
    address = targets.ha.address if "HAService" in method else targets.cluster.store.address
    requests = Requests([first.SerializeToString(), GARBLED])
    with sync_channel(address) as channel:
        code, _ = ended(channel.stream_stream(method)(iter(requests), timeout=CALL_TIMEOUT_S))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    check_healthy(targets)


def test_a_garbled_replica_progress_ends_report_replicas_invalid_argument(
    targets: StreamTargets,
) -> None:
    payloads = [store_pb2.ReplicaProgress(replica_address="r:1").SerializeToString(), GARBLED]
    assert client_stream(targets.cluster.store.address, f"{STORE}ReportReplicas", payloads) is (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    check_healthy(targets)
