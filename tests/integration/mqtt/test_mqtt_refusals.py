"""What the gateway refuses, each answered per MQTT 5.0, without troubling other devices.

Wrong accounts and missing rights (the brokers' ACL decides), bad topics, floods of
subscriptions, oversized and malformed packets, QoS 2, MQTT 3.1, silent devices
(keep-alive) and a device that stops reading.
"""

from __future__ import annotations

import socket
import time

import mqtt5
import pytest

from boltmq.kernel.signing import Credentials
from tests.integration.mqtt.conftest import READER, WAIT_S, Device, MqttCluster
from tests.integration.mqtt.raw_client import RawClient

R = mqtt5.DisconnectReasonCode


def _disconnect_reason(raw: RawClient) -> R | None:
    packet = raw.packet()
    while isinstance(packet, mqtt5.PublishPacket | mqtt5.PubAckPacket):
        packet = raw.packet()
    assert isinstance(packet, mqtt5.DisconnectPacket), packet
    assert raw.packet() is None  # and the connection is closed
    return packet.reason_code


@pytest.mark.parametrize(
    ("credentials", "code"),
    [
        (Credentials("device-one", "not-the-secret"), 0x86),
        (Credentials("nobody-here", "whatever-secret"), 0x86),
        (None, 0x86),
    ],
)
def test_a_wrong_account_is_refused(
    mqtt_cluster: MqttCluster, credentials: Credentials | None, code: int
) -> None:
    intruder = Device(mqtt_cluster, "intruder", credentials)
    try:
        assert intruder.reason.value == code
        assert intruder.disconnects.get(timeout=WAIT_S) is not None  # and closed
    finally:
        intruder.client.loop_stop()
    # no client of the refused account is kept: the gateway's log shows no call made
    # with it after the refusal (a producer would heartbeat with it every second)
    time.sleep(1.5)
    if credentials is not None:
        assert "heartbeat" not in mqtt_cluster.gateway.log()


def test_rights_are_the_accounts_pub_and_sub(mqtt_cluster: MqttCluster) -> None:
    reader = Device(mqtt_cluster, "read-only", READER)
    try:
        assert reader.publish("sensors/ro", b"no").value == 0x87  # SUB only on sensors
        codes = [int(c.value) for c in reader.subscribe(("sensors/#", 1), ("devices/#", 1))]
        assert codes == [1, 0x87]  # no right on devices
        assert reader.publish("alerts/x", b"no").value == 0x87
    finally:
        reader.close()


def test_a_flood_of_subscriptions_meets_the_quota(mqtt_cluster: MqttCluster) -> None:
    device = Device(mqtt_cluster, "greedy")
    other = Device(mqtt_cluster, "bystander")
    try:
        filters = [(f"sensors/flood/{n}", 0) for n in range(25)]
        codes = [int(c.value) for c in device.subscribe(*filters)]
        assert codes == [0] * 20 + [0x97] * 5  # max_subscriptions=20
        other.subscribe(("sensors/bystander", 1))
        device.publish("sensors/bystander", b"still served")
        (message,) = other.received(1)
        assert message.payload == b"still served"
    finally:
        device.close()
        other.close()


def test_an_oversized_packet_ends_only_its_connection(mqtt_cluster: MqttCluster) -> None:
    other = Device(mqtt_cluster, "neighbour")
    raw = RawClient(mqtt_cluster)
    try:
        assert raw.connect("big-sender").max_packet_size == 65536
        big = mqtt5.PublishPacket("sensors/big", b"x" * 70_000).write()
        raw.send(big[:40_000])
        raw.send(big[40_000:])
        assert _disconnect_reason(raw) == R.PACKET_TOO_LARGE
        other.subscribe(("sensors/neighbour", 1))
        other.publish("sensors/neighbour", b"fine")
        assert other.received(1)[0].payload == b"fine"
    finally:
        raw.close()
        other.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff\xff\xff\xff\xff",  # a remaining length of more than 4 bytes
        b"\x30\x02\x00\x05",  # a topic longer than its packet
        b"\x82\x03\x00\x01\x00",  # SUBSCRIBE with no filter
        b"\x62\x02\x00\x01",  # PUBREL of a QoS 2 flow the gateway never has
    ],
)
def test_a_malformed_packet_after_connect_is_disconnected(
    mqtt_cluster: MqttCluster, garbage: bytes
) -> None:
    raw = RawClient(mqtt_cluster)
    try:
        raw.connect("garbler")
        raw.send(garbage)
        assert _disconnect_reason(raw) in (R.MALFORMED_PACKET, R.PROTOCOL_ERROR)
    finally:
        raw.close()


def test_garbage_instead_of_connect_is_closed_silently(mqtt_cluster: MqttCluster) -> None:
    raw = RawClient(mqtt_cluster)
    try:
        raw.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 100)
        assert raw.raw() == b""  # no CONNACK for what is no CONNECT
    finally:
        raw.close()


def test_qos2_is_refused_and_granted_as_qos1(mqtt_cluster: MqttCluster) -> None:
    raw = RawClient(mqtt_cluster)
    try:
        connack = raw.connect("qos-two")
        assert int(connack.max_qos) == 1
        raw.send(
            mqtt5.SubscribePacket(
                1, [mqtt5.TopicFilter("sensors/q2", max_qos=mqtt5.QoS.EXACTLY_ONCE)]
            ).write()
        )
        suback = raw.packet()
        assert isinstance(suback, mqtt5.SubAckPacket)
        assert [int(c) for c in suback.reason_codes] == [1]
        raw.send(
            mqtt5.PublishPacket(
                "sensors/q2", b"exactly once?", qos=mqtt5.QoS.EXACTLY_ONCE, packet_id=7
            ).write()
        )
        assert _disconnect_reason(raw) == R.QOS_NOT_SUPPORTED
    finally:
        raw.close()


def test_mqtt_31_is_told_its_version_is_not_served(mqtt_cluster: MqttCluster) -> None:
    raw = RawClient(mqtt_cluster)
    try:  # MQTT 3.1 CONNECT ("MQIsdp", level 3), client id "old", clean session
        raw.send(b"\x10\x11\x00\x06MQIsdp\x03\x02\x00\x3c\x00\x03old")
        assert raw.raw() == b"\x20\x02\x00\x01"  # 3.1.1 CONNACK: unacceptable version
    finally:
        raw.close()


def test_a_silent_device_is_disconnected_after_one_and_a_half_keep_alives(
    mqtt_cluster: MqttCluster,
) -> None:
    raw = RawClient(mqtt_cluster)
    try:
        raw.connect("silent", keep_alive=1)
        started = time.monotonic()
        assert _disconnect_reason(raw) == R.KEEP_ALIVE_TIMEOUT
        assert time.monotonic() - started >= 1.0  # not at once: after the keep-alive
    finally:
        raw.close()


def test_a_device_that_stops_reading_does_not_hold_up_the_others(
    mqtt_cluster: MqttCluster,
) -> None:
    stalled = RawClient(mqtt_cluster)
    reader = Device(mqtt_cluster, "keeps-reading")
    publisher = Device(mqtt_cluster, "firehose")
    try:
        stalled.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect("stalled")
        hose = mqtt5.TopicFilter("sensors/hose", max_qos=mqtt5.QoS.AT_MOST_ONCE)
        stalled.send(mqtt5.SubscribePacket(1, [hose]).write())
        assert isinstance(stalled.packet(), mqtt5.SubAckPacket)
        reader.subscribe(("sensors/hose", 0))
        payload = b"y" * 16_000
        for _ in range(150):  # 2.4 MB: far past what the stalled socket takes
            publisher.publish("sensors/hose", payload, qos=0)
        publisher.publish("sensors/hose", b"last", qos=1)
        deadline = time.monotonic() + 20
        seen_last = False
        while not seen_last and time.monotonic() < deadline:
            seen_last = reader.inbox.get(timeout=20).payload == b"last"
        assert seen_last
    finally:
        stalled.close()
        reader.close()
        publisher.close()
