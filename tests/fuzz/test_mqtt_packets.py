"""Fuzz the MQTT gateway with packets Hypothesis builds and mutates, on a live gateway.

Each example opens a connection, sends a valid CONNECT and then bytes drawn from:
valid packets of every kind the ``mqtt5`` library encodes (odd topics, filters,
properties, QoS 2, huge packet ids) mutated by flipping, cutting and splicing, or plain
random bytes. Invariant: the gateway answers each connection within its deadline with
nothing, well-formed MQTT 5 packets only, or a DISCONNECT followed by the close (the
fuzzer then ends its side of the stream, and the gateway closes within the deadline); it
never hangs, never stops, logs no error, and a fresh device is still served (CONNECT, PINGREQ)
after every example. Connections per property: ``BOLTMQ_FUZZ_EXAMPLES``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mqtt5
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.conftest import Cluster
from tests.integration.procs import ServiceProcess
from tests.reliability.scale import FUZZ_EXAMPLES

ANSWER_S = 5.0
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    tmp: Path = tmp_path_factory.mktemp("mqtt-fuzz")
    cluster = Cluster(tmp)
    proc = ServiceProcess(
        "mqtt",
        tmp / "logs",
        f"registry={cluster.registry.address}",
        "ws_listen_port=-1",
        "max_packet_bytes=4096",
        "connect_timeout_ms=2000",
    ).start()
    yield proc
    log = proc.log()
    proc.stop()
    cluster.stop()
    # no packet reached an unhandled error (an ERROR record: the gateway's, or asyncio's
    # for a task that died); mqtt5's own panic message on stderr is not one (docs/mqtt.md)
    errors = [line for line in log.splitlines() if " ERROR " in line]
    assert not errors, errors[:5]


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(ANSWER_S)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


def _well_formed(data: bytes) -> list[mqtt5.Packet]:
    """Every packet the gateway sent, decoded (fails on anything but whole packets)."""
    packets = []
    view = memoryview(data)
    while view:
        packet, size = mqtt5.read(view)
        packets.append(packet)
        view = view[size:]
    return packets


def _still_serves(proc: ServiceProcess) -> None:
    assert proc.alive(), proc.last_error()
    with socket.create_connection(("127.0.0.1", proc.port), timeout=ANSWER_S) as sock:
        sock.sendall(mqtt5.ConnectPacket("fuzz-probe", clean_start=True).write())
        sock.sendall(mqtt5.PingReqPacket().write())
        sock.settimeout(ANSWER_S)
        data = b""
        while True:
            try:
                packets = _well_formed(data)
            except IndexError:
                packets = []
            if len(packets) >= 2:
                break
            chunk = sock.recv(4096)
            assert chunk, "the gateway closed a valid connection"
            data += chunk
        assert isinstance(packets[0], mqtt5.ConnAckPacket)
        assert int(packets[0].reason_code) == 0
        assert isinstance(packets[1], mqtt5.PingRespPacket)


def _encoded(build: Callable[[], Any]) -> bytes:
    """``build().write()``; b"" for what the library refuses to encode (it validates)."""
    try:
        return bytes(build().write())
    except (ValueError, OverflowError):
        return b""


names = st.text(min_size=0, max_size=40)
qos = st.sampled_from([mqtt5.QoS.AT_MOST_ONCE, mqtt5.QoS.AT_LEAST_ONCE, mqtt5.QoS.EXACTLY_ONCE])
ids = st.integers(1, 65535)
filters = st.lists(st.tuples(names, qos), min_size=1, max_size=5)
packets = st.one_of(
    st.builds(
        lambda t, p, q, i, r: _encoded(
            lambda: mqtt5.PublishPacket(t, p, qos=q, packet_id=i if int(q) else None, retain=r)
        ),
        names,
        st.binary(max_size=300),
        qos,
        ids,
        st.booleans(),
    ),
    st.builds(
        lambda i, fs: _encoded(
            lambda: mqtt5.SubscribePacket(i, [mqtt5.TopicFilter(f, max_qos=q) for f, q in fs])
        ),
        ids,
        filters,
    ),
    st.builds(
        lambda i, fs: _encoded(lambda: mqtt5.UnsubscribePacket(i, fs)),
        ids,
        st.lists(names, min_size=1, max_size=5),
    ),
    st.builds(lambda i: _encoded(lambda: mqtt5.PubAckPacket(i)), ids),
    st.builds(lambda i: _encoded(lambda: mqtt5.PubRelPacket(i)), ids),
    st.just(mqtt5.PingReqPacket().write()),
    st.just(mqtt5.ConnectPacket("again").write()),
    st.just(mqtt5.AuthPacket().write()),
    st.binary(min_size=1, max_size=200),
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(b"".join(draw(st.lists(packets, min_size=1, max_size=4))))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "cut", "splice", "keep"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at:]
        elif kind == "splice":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@FUZZ
@given(data=mutated())
def test_packets_after_connect(gateway: ServiceProcess, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=ANSWER_S) as sock:
        sock.sendall(mqtt5.ConnectPacket("fuzzer", clean_start=True).write())
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)  # the end of the stream: the gateway closes too
        except (BrokenPipeError, ConnectionResetError):
            pass  # already refused
        answer = _read_all(sock)
    try:
        sent = _well_formed(answer)
    except IndexError:  # cut short by the close: every whole packet before it is checked
        sent = []
    assert sent and isinstance(sent[0], mqtt5.ConnAckPacket), answer[:80]
    _still_serves(gateway)


@FUZZ
@given(data=st.binary(min_size=1, max_size=300))
def test_bytes_instead_of_connect(gateway: ServiceProcess, data: bytes) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=ANSWER_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = _read_all(sock)
    # nothing, a CONNACK (3.1.1 refusal or an MQTT 5 answer to what decoded as CONNECT)
    assert answer in (b"", b"\x20\x02\x00\x01") or isinstance(
        _well_formed(answer)[0], mqtt5.ConnAckPacket
    )
    _still_serves(gateway)
