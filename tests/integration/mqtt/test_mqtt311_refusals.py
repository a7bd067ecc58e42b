"""What the gateway answers an MQTT 3.1.1 device, byte for byte (a bare socket client).

CONNACK return codes 0x02 and 0x04 for refused CONNECTs, and for everything MQTT 5
answers with a DISCONNECT reason (QoS 2, a refused QoS 1 PUBLISH, a malformed packet,
a silent device) a close with no packet at all, as 3.1.1 has no server DISCONNECT;
wills (a QoS 2 will published at QoS 1) on such closes, none after a DISCONNECT.
"""

from __future__ import annotations

import time

import pytest
from paho.mqtt.enums import MQTTProtocolVersion

from services.mqtt import mqtt311
from tests.integration.mqtt.conftest import Device, MqttCluster
from tests.integration.mqtt.raw_client import Raw311, connect_311

CONNACK_OK = (0x20, b"\x00\x00")


def _closed_silently(raw: Raw311) -> bool:
    return raw.packet() is None and raw.buffer == b""


@pytest.mark.parametrize(
    ("user", "password", "client_id", "clean", "answer"),
    [
        ("device-one", "not-the-secret", "v311-bad", True, b"\x00\x04"),
        ("nobody-here", "whatever-secret", "v311-bad", True, b"\x00\x04"),
        (None, None, "v311-bad", True, b"\x00\x04"),
        ("device-one", "device-secret-1", "", False, b"\x00\x02"),  # MQTT-3.1.3-8
    ],
)
def test_a_refused_connect_gets_its_311_return_code(
    mqtt_cluster: MqttCluster,
    user: str | None,
    password: str | None,
    client_id: str,
    clean: bool,
    answer: bytes,
) -> None:
    raw = Raw311(mqtt_cluster, connect_311(client_id, user=user, password=password, clean=clean))
    try:
        assert raw.packet() == (0x20, answer)
        assert _closed_silently(raw)
    finally:
        raw.close()


def test_an_empty_client_id_with_a_clean_session_is_accepted(mqtt_cluster: MqttCluster) -> None:
    raw = Raw311(mqtt_cluster, connect_311(""))
    try:
        assert raw.packet() == CONNACK_OK
        raw.sock.sendall(b"\xc0\x00")  # PINGREQ
        assert raw.packet() == (0xD0, b"")
    finally:
        raw.close()


@pytest.mark.parametrize(
    ("name", "packet"),
    [
        ("QoS 2 PUBLISH", mqtt311.frame(0x34, b"\x00\x0asensors/q2\x00\x07x")),
        ("QoS 1 PUBLISH to a bad topic", mqtt311.frame(0x32, b"\x00\x05bad!/\x00\x07x")),
        ("reserved subscription bits", mqtt311.frame(0x82, b"\x00\x01\x00\x03a/b\x05")),
        ("AUTH (MQTT 5 only)", b"\xf0\x00"),
        ("a second CONNECT", connect_311("again")),
        ("a PUBACK of the wrong length", b"\x40\x03\x00\x01\x00"),
    ],
)
def test_a_refused_packet_closes_without_an_answer(
    mqtt_cluster: MqttCluster, name: str, packet: bytes
) -> None:
    raw = Raw311(mqtt_cluster, connect_311(f"v311-{name.split()[0].lower()}"))
    try:
        assert raw.packet() == CONNACK_OK
        raw.sock.sendall(packet)
        assert _closed_silently(raw), name
    finally:
        raw.close()


def test_a_silent_device_is_closed_after_one_and_a_half_keep_alives(
    mqtt_cluster: MqttCluster,
) -> None:
    raw = Raw311(mqtt_cluster, connect_311("v311-silent", keep_alive=1))
    try:
        assert raw.packet() == CONNACK_OK
        started = time.monotonic()
        assert _closed_silently(raw)
        assert time.monotonic() - started >= 1.0  # not at once: after the keep-alive
    finally:
        raw.close()


def test_a_will_is_published_when_a_device_vanishes_not_when_it_disconnects(
    mqtt_cluster: MqttCluster,
) -> None:
    watcher = Device(mqtt_cluster, "v311-watcher", version=MQTTProtocolVersion.MQTTv311)
    try:
        assert [int(c.value) for c in watcher.subscribe(("wills/v311/#", 1))] == [1]
        polite = Raw311(mqtt_cluster, connect_311("v311-polite", will=("wills/v311/p", b"p", 1)))
        assert polite.packet() == CONNACK_OK
        polite.sock.sendall(b"\xe0\x00")  # DISCONNECT: the will is discarded
        assert _closed_silently(polite)
        polite.close()
        gone = Raw311(mqtt_cluster, connect_311("v311-gone", will=("wills/v311/g", b"bye", 2)))
        assert gone.packet() == CONNACK_OK  # a QoS 2 will is accepted ...
        gone.close()  # no DISCONNECT
        (will,) = watcher.received(1)
        assert (will.topic, will.payload, will.qos) == ("wills/v311/g", b"bye", 1)  # ... at 1
        assert watcher.nothing_more()
    finally:
        watcher.close()
