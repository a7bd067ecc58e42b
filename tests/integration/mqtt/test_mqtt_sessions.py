"""Persistent sessions kept in the cluster, and shared subscriptions as consumer groups.

A session (Clean Start 0, Session Expiry > 0) keeps its subscriptions and the QoS 1
messages its device did not acknowledge across a disconnect and across a restart of
the gateway (its state is in BoltMQ: a session record and a consumer group's offsets).
"""

from __future__ import annotations

import queue as queue_module
import time

import mqtt5

from tests.integration.mqtt.conftest import Device, MqttCluster
from tests.integration.mqtt.raw_client import RawClient


def _present(device: Device) -> bool:
    return bool(device.flags.session_present)


def test_a_session_keeps_subscriptions_and_messages_across_a_disconnect(
    mqtt_cluster: MqttCluster,
) -> None:
    device = Device(mqtt_cluster, "sleepy", clean_start=False, session_expiry_s=300)
    assert not _present(device)
    device.subscribe(("sensors/sleepy/#", 1))
    device.close()
    publisher = Device(mqtt_cluster, "sleepy-pub")
    for n in range(3):
        assert publisher.publish("sensors/sleepy/n", f"m{n}".encode()).value == 0
    publisher.close()

    back = Device(mqtt_cluster, "sleepy", clean_start=False, session_expiry_s=300)
    try:
        assert _present(back)  # no SUBSCRIBE: the session had it
        got = [(m.topic, m.payload) for m in back.received(3)]
        assert got == [("sensors/sleepy/n", f"m{n}".encode()) for n in range(3)]  # in order
        assert back.nothing_more()
    finally:
        back.close()


def test_a_session_survives_a_gateway_restart(mqtt_cluster: MqttCluster) -> None:
    device = Device(mqtt_cluster, "durable", clean_start=False, session_expiry_s=300)
    device.subscribe(("devices/durable/+", 1))
    device.close()
    mqtt_cluster.restart_gateway()
    publisher = Device(mqtt_cluster, "durable-pub")
    assert publisher.publish("devices/durable/cmd", b"reboot").value == 0
    publisher.close()

    back = Device(mqtt_cluster, "durable", clean_start=False, session_expiry_s=300)
    try:
        assert _present(back)
        (message,) = back.received(1)
        assert (message.topic, message.payload) == ("devices/durable/cmd", b"reboot")
    finally:
        back.close()


def test_an_unacknowledged_qos1_message_comes_again_after_a_reconnect(
    mqtt_cluster: MqttCluster,
) -> None:
    raw = RawClient(mqtt_cluster)
    raw.connect("forgetful", clean_start=False, session_expiry_interval=300)
    raw.send(mqtt5.SubscribePacket(1, [mqtt5.TopicFilter("sensors/forgetful")]).write())
    assert isinstance(raw.packet(), mqtt5.SubAckPacket)
    publisher = Device(mqtt_cluster, "forgetful-pub")
    publisher.publish("sensors/forgetful", b"ack me")
    publisher.close()
    first = raw.packet()
    assert isinstance(first, mqtt5.PublishPacket) and first.payload == b"ack me"
    raw.close()  # no PUBACK

    again = RawClient(mqtt_cluster)
    try:
        assert again.connect(
            "forgetful", clean_start=False, session_expiry_interval=300
        ).session_present
        second = again.packet()
        assert isinstance(second, mqtt5.PublishPacket)
        assert (second.topic, second.payload, int(second.qos)) == (
            "sensors/forgetful",
            b"ack me",
            1,
        )
        assert second.packet_id is not None
        again.send(mqtt5.PubAckPacket(second.packet_id).write())
    finally:
        again.close()
    third = RawClient(mqtt_cluster)
    try:
        third.connect("forgetful", clean_start=False, session_expiry_interval=300)
        try:
            extra = third.packet(timeout_s=1.5)
        except TimeoutError:
            extra = None
        assert extra is None  # acknowledged: not delivered a third time
    finally:
        third.close()


def test_a_clean_start_discards_the_session(mqtt_cluster: MqttCluster) -> None:
    device = Device(mqtt_cluster, "fresh", clean_start=False, session_expiry_s=300)
    device.subscribe(("sensors/fresh", 1))
    device.close()
    again = Device(mqtt_cluster, "fresh", clean_start=True, session_expiry_s=300)
    assert not _present(again)
    again.close()
    publisher = Device(mqtt_cluster, "fresh-pub")
    publisher.publish("sensors/fresh", b"nobody")
    publisher.close()
    last = Device(mqtt_cluster, "fresh", clean_start=False, session_expiry_s=300)
    try:
        assert _present(last)  # the new (empty) session of the clean start
        assert last.nothing_more()
    finally:
        last.close()


def test_a_clean_start_without_a_session_of_its_own_ends_the_stored_one(
    mqtt_cluster: MqttCluster,
) -> None:
    device = Device(mqtt_cluster, "fresh-0", clean_start=False, session_expiry_s=300)
    device.subscribe(("sensors/fresh0", 1))
    device.close()
    Device(mqtt_cluster, "fresh-0", clean_start=True).close()  # session expiry 0
    later = Device(mqtt_cluster, "fresh-0", clean_start=False, session_expiry_s=300)
    try:
        assert not _present(later)  # discarded: nothing left to resume
    finally:
        later.close()


def test_a_shared_subscription_spreads_messages_over_its_members(
    mqtt_cluster: MqttCluster,
) -> None:
    members = [Device(mqtt_cluster, f"worker-{n}") for n in range(2)]
    publisher = Device(mqtt_cluster, "job-source")
    try:
        for member in members:
            assert [
                int(c.value) for c in member.subscribe(("$share/workers/devices/jobs/+", 1))
            ] == [1]
        # the group's consumer starts at the end of the topic: wait until it reads
        publisher.publish("devices/jobs/warmup", b"warmup")
        warm = None
        for _ in range(40):
            for member in members:
                if not member.inbox.empty():
                    warm = member.inbox.get()
            if warm is not None:
                break
            publisher.publish("devices/jobs/warmup", b"warmup")
        assert warm is not None
        for member in members:
            while not member.inbox.empty():
                member.inbox.get()
        jobs = {f"job-{n}".encode() for n in range(20)}
        for job in sorted(jobs):
            publisher.publish("devices/jobs/x", job)
        got: list[list[bytes]] = [[], []]
        deadline = time.monotonic() + 15
        while sum(map(len, got)) < len(jobs) and time.monotonic() < deadline:
            for n, member in enumerate(members):
                try:
                    message = member.inbox.get(timeout=0.1)
                except queue_module.Empty:
                    continue
                if message.payload != b"warmup":
                    got[n].append(message.payload)
        assert set(got[0]) | set(got[1]) == jobs
        assert not set(got[0]) & set(got[1])  # each message to one member
        assert got[0] and got[1]  # both took a share
    finally:
        for device in (*members, publisher):
            device.close()
