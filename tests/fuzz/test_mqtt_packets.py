"""Fuzz the MQTT gateway with packets Hypothesis builds and mutates, on a live gateway.

Each example opens a connection, sends a valid CONNECT and then bytes drawn from:
valid packets of every kind the ``mqtt5`` library encodes (odd topics, filters,
properties, QoS 2, huge packet ids) mutated by flipping, cutting and splicing, or plain
random bytes. Invariant: the gateway answers each connection within its deadline with
nothing, well-formed MQTT 5 packets only, or a DISCONNECT followed by the close (the
fuzzer then ends its side of the stream, and the gateway closes within the deadline); it
never hangs, never stops, logs no error, and a fresh device is still served (CONNECT, PINGREQ)
after every example. Connections per property: ``BOLTMQ_FUZZ_EXAMPLES``.

MQTT 3.1.1 the same way: 3.1.1 packets built here (and CONNECTs with every flag), mutated;
invariant: only whole 3.1.1 server packets come back (never a DISCONNECT), the first a
CONNACK with a 3.1.1 return code, and the gateway still serves.
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

from services.mqtt import mqtt311
from tests.integration.conftest import Cluster
from tests.integration.mqtt.raw_client import connect_311, frames_311
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
    return _mutate(draw, bytearray(b"".join(draw(st.lists(packets, min_size=1, max_size=4)))))


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
    # nothing, a 3.1.1 CONNACK (to what decoded as a 3.1 or 3.1.1 CONNECT) or an MQTT 5
    # answer to what decoded as a 5.0 CONNECT
    assert (
        answer == b""
        or _connack_311(frames_311(answer)[:1])
        or isinstance(_well_formed(answer)[0], mqtt5.ConnAckPacket)
    ), answer[:80]
    _still_serves(gateway)


# ---------------------------------------------------------------------- MQTT 3.1.1
SERVER_311 = {0x20, 0x30, 0x31, 0x32, 0x33, 0x40, 0x90, 0xB0, 0xD0}
"""First bytes of what a 3.1.1 device may get: CONNACK, PUBLISH, PUBACK, SUBACK, UNSUBACK,
PINGRESP (never a DISCONNECT: 3.1.1 has none from the server)."""


def _string(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def _subscribe_311(packet_id: int, pairs: list[tuple[str, int]]) -> bytes:
    body = packet_id.to_bytes(2, "big")
    body += b"".join(_string(f.encode()) + bytes([q]) for f, q in pairs)
    return mqtt311.frame(0x82, body)


def _unsubscribe_311(packet_id: int, names: list[str]) -> bytes:
    body = packet_id.to_bytes(2, "big") + b"".join(_string(n.encode()) for n in names)
    return mqtt311.frame(0xA2, body)


def _publish_311(topic: str, payload: bytes, q: mqtt5.QoS, packet_id: int, retain: bool) -> bytes:
    """A 3.1.1 PUBLISH (``mqtt311.write`` of the 5.0 one); b"" for what mqtt5 refuses."""
    try:
        packet = mqtt5.PublishPacket(
            topic, payload, qos=q, packet_id=packet_id if int(q) else None, retain=retain
        )
        return mqtt311.write(packet)
    except (ValueError, OverflowError):
        return b""


packets_311 = st.one_of(
    st.builds(_publish_311, names, st.binary(max_size=300), qos, ids, st.booleans()),
    st.builds(_subscribe_311, ids, st.lists(st.tuples(names, st.integers(0, 3)), max_size=5)),
    st.builds(_unsubscribe_311, ids, st.lists(names, max_size=5)),
    st.builds(lambda i: b"\x40\x02" + i.to_bytes(2, "big"), ids),  # PUBACK
    st.builds(lambda i: b"\x62\x02" + i.to_bytes(2, "big"), ids),  # PUBREL
    st.just(b"\xc0\x00"),  # PINGREQ
    st.just(connect_311("again")),
    st.binary(min_size=1, max_size=200),
)
connects_311 = st.builds(
    lambda client_id, clean, will, user, password, keep_alive: connect_311(
        client_id, user=user, password=password, clean=clean, keep_alive=keep_alive, will=will
    ),
    names,
    st.booleans(),
    st.none() | st.tuples(names, st.binary(max_size=40), st.integers(0, 3)),
    st.none() | names,
    st.none() | names,
    st.integers(0, 65535),
)


def _mutate(draw: st.DrawFn, data: bytearray) -> bytes:
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


@st.composite
def mutated_311(draw: st.DrawFn) -> bytes:
    return _mutate(draw, bytearray(b"".join(draw(st.lists(packets_311, min_size=1, max_size=4)))))


@st.composite
def mutated_connect_311(draw: st.DrawFn) -> bytes:
    return _mutate(draw, bytearray(draw(connects_311)))


def _connack_311(frames: list[tuple[int, bytes]]) -> bool:
    """``frames`` is one 3.1.1 CONNACK: 2 bytes, a 3.1.1 return code (0 to 5)."""
    return (
        len(frames) == 1
        and frames[0][0] == 0x20
        and len(frames[0][1]) == 2
        and frames[0][1][1] <= 5
    )


def _answer_311(port: int, data: bytes) -> list[tuple[int, bytes]]:
    """Send ``data``, end the stream, and the 3.1.1 packets the gateway sent back."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = _read_all(sock)
    frames = frames_311(answer)
    assert all(first in SERVER_311 for first, _ in frames), answer[:80]
    return frames


@FUZZ
@given(data=mutated_311())
def test_311_packets_after_connect(gateway: ServiceProcess, data: bytes) -> None:
    frames = _answer_311(gateway.port, connect_311("fuzzer-311", user=None, password=None) + data)
    assert frames and frames[0] == (0x20, b"\x00\x00"), frames[:2]  # accepted, then anything
    assert all(first != 0x20 for first, _ in frames[1:])  # one CONNACK only
    _still_serves(gateway)


@FUZZ
@given(data=mutated_connect_311())
def test_311_connects(gateway: ServiceProcess, data: bytes) -> None:
    frames = _answer_311(gateway.port, data)
    assert not frames or _connack_311(frames[:1]), frames[:1]
    _still_serves(gateway)
