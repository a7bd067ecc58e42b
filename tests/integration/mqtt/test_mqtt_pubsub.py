"""Publish and subscribe through the gateway with paho-mqtt (MQTT 5), and with the SDK.

QoS 0 and 1 end to end, wildcards matched by the gateway, retained messages, wills,
message expiry, MQTT over WebSocket, and messages crossing between MQTT devices and
BoltMQ producers and consumers both ways.
"""

from __future__ import annotations

import socket
import time

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from boltmq import Message, Producer, PullConsumer
from boltmq.client import TopicNotFound
from tests.integration.mqtt.conftest import ADMIN, Device, MqttCluster


def test_qos0_and_qos1_reach_every_matching_filter(mqtt_cluster: MqttCluster) -> None:
    temps = Device(mqtt_cluster, "temps")
    everything = Device(mqtt_cluster, "everything")
    publisher = Device(mqtt_cluster, "publisher")
    try:
        assert [int(c.value) for c in temps.subscribe(("sensors/q/+/temp", 1))] == [1]
        assert [int(c.value) for c in everything.subscribe(("sensors/q/#", 0))] == [0]
        assert publisher.publish("sensors/q/k1/temp", b"21.5", qos=1).value == 0
        publisher.publish("sensors/q/k1/hum", b"40", qos=0)
        publisher.publish("sensors/q/k2/temp", b"19.0", qos=0)

        got = {(m.topic, m.payload, m.qos) for m in temps.received(2)}
        assert got == {("sensors/q/k1/temp", b"21.5", 1), ("sensors/q/k2/temp", b"19.0", 0)}
        assert temps.nothing_more()
        got = {(m.topic, m.payload, m.qos) for m in everything.received(3)}
        assert got == {
            ("sensors/q/k1/temp", b"21.5", 0),  # granted QoS 0 caps it
            ("sensors/q/k1/hum", b"40", 0),
            ("sensors/q/k2/temp", b"19.0", 0),
        }
    finally:
        for device in (temps, everything, publisher):
            device.close()


def test_overlapping_filters_deliver_once_at_the_highest_qos(mqtt_cluster: MqttCluster) -> None:
    device = Device(mqtt_cluster, "overlap")
    try:
        device.subscribe(("sensors/o/#", 0), ("sensors/o/+", 1))
        device.publish("sensors/o/x", b"one", qos=1)
        (message,) = device.received(1)
        assert (message.topic, message.payload, message.qos) == ("sensors/o/x", b"one", 1)
        assert device.nothing_more()
    finally:
        device.close()


def test_an_mqtt_publish_is_read_by_an_sdk_consumer(mqtt_cluster: MqttCluster) -> None:
    device = Device(mqtt_cluster, "status-reporter")
    try:
        assert device.publish("devices/d1/status", b"online").value == 0
    finally:
        device.close()
    with PullConsumer(mqtt_cluster.registry.address, "sdk-readers", credentials=ADMIN) as c:
        found = []
        for queue in c.queues("devices"):
            found += c.pull(queue, 0).messages
    (message,) = [m for m in found if m.body_bytes() == b"online"]
    assert message.topic == "devices"
    assert message.properties["MQTT_TOPIC"] == "devices/d1/status"
    assert message.properties["MQTT_QOS"] == "1"
    assert message.tags == "devices/d1/status"


def test_an_sdk_message_reaches_every_matching_mqtt_subscriber(mqtt_cluster: MqttCluster) -> None:
    fire = Device(mqtt_cluster, "fire-watch")
    every = Device(mqtt_cluster, "alert-watch")
    try:
        fire.subscribe(("alerts/fire", 1))
        every.subscribe(("alerts/#", 1))
        with Producer(mqtt_cluster.registry.address, "sdk-alerts", credentials=ADMIN) as p:
            p.send(Message("alerts", b"smoke", properties={"MQTT_TOPIC": "alerts/fire"}))
            p.send(Message("alerts", b"plain"))  # no MQTT topic: the BoltMQ topic itself
        (message,) = fire.received(1)
        assert (message.topic, message.payload, message.qos) == ("alerts/fire", b"smoke", 1)
        got = {(m.topic, m.payload) for m in every.received(2)}
        assert got == {("alerts/fire", b"smoke"), ("alerts", b"plain")}  # '#' takes the parent
    finally:
        fire.close()
        every.close()


def test_retained_messages_reach_later_subscribers_until_cleared(
    mqtt_cluster: MqttCluster,
) -> None:
    publisher = Device(mqtt_cluster, "retainer")
    try:
        assert publisher.publish("sensors/r1/temp", b"18", retain=True).value == 0
        late = Device(mqtt_cluster, "late-comer")
        late.subscribe(("sensors/r1/+", 1))
        (message,) = late.received(1)
        assert (message.topic, message.payload, message.retain) == ("sensors/r1/temp", b"18", 1)
        publisher.publish("sensors/r1/temp", b"19")  # live: not flagged retained
        (live,) = late.received(1)
        assert (live.payload, live.retain) == (b"19", 0)
        late.close()

        assert publisher.publish("sensors/r1/temp", b"", retain=True).value == 0  # clears
        later = Device(mqtt_cluster, "later-comer")
        later.subscribe(("sensors/r1/+", 1))
        assert later.nothing_more()
        later.close()
    finally:
        publisher.close()


def test_a_retained_message_past_its_expiry_is_not_delivered(mqtt_cluster: MqttCluster) -> None:
    publisher = Device(mqtt_cluster, "expiring")
    properties = Properties(PacketTypes.PUBLISH)
    properties.MessageExpiryInterval = 1
    try:
        publisher.publish("sensors/e1", b"soon gone", retain=True, properties=properties)
        time.sleep(1.5)
        late = Device(mqtt_cluster, "too-late")
        late.subscribe(("sensors/e1", 1))
        assert late.nothing_more()
        late.close()
    finally:
        publisher.close()


def test_a_will_is_published_when_a_device_vanishes_not_when_it_disconnects(
    mqtt_cluster: MqttCluster,
) -> None:
    watcher = Device(mqtt_cluster, "will-watcher")
    try:
        watcher.subscribe(("wills/#", 1))
        polite = Device(mqtt_cluster, "polite", will=("wills/polite", b"gone"))
        polite.close()  # DISCONNECT 0x00: the will is discarded
        vanishing = Device(mqtt_cluster, "vanishing", will=("wills/vanishing", b"lost"))
        sock = vanishing.client.socket()
        assert isinstance(sock, socket.socket)
        sock.shutdown(socket.SHUT_RDWR)  # the network goes: no DISCONNECT
        (will,) = watcher.received(1)
        assert (will.topic, will.payload) == ("wills/vanishing", b"lost")
        assert watcher.nothing_more()
        vanishing.client.loop_stop()
    finally:
        watcher.close()


def test_mqtt_over_websocket(mqtt_cluster: MqttCluster) -> None:
    subscriber = Device(mqtt_cluster, "ws-sub", transport="websockets")
    publisher = Device(mqtt_cluster, "ws-pub", transport="websockets")
    try:
        subscriber.subscribe(("sensors/ws/#", 1))
        assert publisher.publish("sensors/ws/a", b"over ws").value == 0
        (message,) = subscriber.received(1)
        assert (message.topic, message.payload) == ("sensors/ws/a", b"over ws")
    finally:
        subscriber.close()
        publisher.close()


def test_the_mqtt_topic_must_name_a_boltmq_topic(mqtt_cluster: MqttCluster) -> None:
    device = Device(mqtt_cluster, "odd-topics")
    try:
        assert device.publish("sensors.bad/x", b"?").value == 0x90  # '.' is no topic name
        codes = [int(c.value) for c in device.subscribe(("+/temp", 1), ("#", 1))]
        assert codes == [0x8F, 0x8F]  # a wildcard first level names no BoltMQ topic
    finally:
        device.close()
    with PullConsumer(mqtt_cluster.registry.address, "sdk-readers", credentials=ADMIN) as c:
        try:
            c.queues("sensors.bad")
        except (TopicNotFound, ValueError):
            pass
        else:
            raise AssertionError("a refused topic was created")
