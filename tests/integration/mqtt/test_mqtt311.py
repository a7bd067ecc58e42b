"""MQTT 3.1.1 devices (paho-mqtt with ``MQTTv311``, unmodified) beside MQTT 5 ones.

Publish and subscribe at QoS 0 and 1 with wildcards, retained messages, persistent
sessions (clean session = 0) across a disconnect and their end by a clean-session
connect, shared subscriptions, ACL refusals, and 3.1.1 and 5.0 devices exchanging
messages through one gateway.
"""

from __future__ import annotations

import contextlib
import queue
import time

from paho.mqtt.enums import MQTTProtocolVersion

from tests.integration.mqtt.conftest import READER, WAIT_S, Device, MqttCluster

V311 = MQTTProtocolVersion.MQTTv311


def _device(cluster: MqttCluster, client_id: str, **kw: object) -> Device:
    device = Device(cluster, client_id, version=V311, **kw)  # type: ignore[arg-type]
    assert device.reason.value == 0, device.reason
    return device


def _granted(device: Device, *filters: tuple[str, int]) -> list[int]:
    return [int(c.value) for c in device.subscribe(*filters)]


def test_qos0_and_qos1_with_wildcards(mqtt_cluster: MqttCluster) -> None:
    sub = _device(mqtt_cluster, "v311-sub")
    pub = _device(mqtt_cluster, "v311-pub")
    try:
        assert _granted(sub, ("sensors/+/v311", 1), ("alerts/v311/#", 0)) == [1, 0]
        assert pub.publish("sensors/a/v311", b"one", qos=1).value == 0  # a PUBACK came
        pub.publish("alerts/v311/x/y", b"two", qos=0)
        pub.publish("sensors/a/other", b"not me", qos=1)
        pub.publish("sensors/b/v311", b"three", qos=1)
        got = {(m.topic, m.payload, m.qos) for m in sub.received(3)}
        assert got == {
            ("sensors/a/v311", b"one", 1),
            ("alerts/v311/x/y", b"two", 0),
            ("sensors/b/v311", b"three", 1),
        }
        assert sub.nothing_more()
    finally:
        sub.close()
        pub.close()


def test_retained_message_reaches_a_later_subscriber(mqtt_cluster: MqttCluster) -> None:
    pub = _device(mqtt_cluster, "v311-retainer")
    try:
        assert pub.publish("sensors/v311r/state", b"on", qos=1, retain=True).value == 0
    finally:
        pub.close()
    sub = _device(mqtt_cluster, "v311-late")
    try:
        assert _granted(sub, ("sensors/v311r/#", 1)) == [1]
        (message,) = sub.received(1)
        assert (message.topic, message.payload, message.retain) == (
            "sensors/v311r/state",
            b"on",
            True,
        )
    finally:
        sub.close()


def test_a_persistent_session_keeps_subscriptions_and_messages_until_a_clean_connect(
    mqtt_cluster: MqttCluster,
) -> None:
    device = _device(mqtt_cluster, "v311-sleepy", clean_start=False)
    assert not device.flags.session_present
    assert _granted(device, ("devices/v311s/#", 1)) == [1]
    device.close()
    pub = _device(mqtt_cluster, "v311-sleepy-pub")
    for n in range(3):
        assert pub.publish("devices/v311s/n", f"m{n}".encode()).value == 0
    back = _device(mqtt_cluster, "v311-sleepy", clean_start=False)
    try:
        assert back.flags.session_present  # no SUBSCRIBE: the session had it
        got = [(m.topic, m.payload) for m in back.received(3)]
        assert got == [("devices/v311s/n", f"m{n}".encode()) for n in range(3)]
    finally:
        back.close()
    clean = _device(mqtt_cluster, "v311-sleepy", clean_start=True)
    assert not clean.flags.session_present
    clean.close()
    assert pub.publish("devices/v311s/n", b"after the clean connect").value == 0
    again = _device(mqtt_cluster, "v311-sleepy", clean_start=False)
    try:
        assert not again.flags.session_present  # the clean connect ended the session
        assert again.nothing_more()
    finally:
        again.close()
        pub.close()


def test_a_clean_connect_right_after_a_disconnect_ends_the_session(
    mqtt_cluster: MqttCluster,
) -> None:
    """The gateway ends the closing connection (saving its session) before it serves the
    next CONNECT of the client id, so a clean connect that comes at once still ends it."""
    for n in range(8):
        device = _device(mqtt_cluster, f"v311-quick-{n}", clean_start=False)
        assert _granted(device, (f"devices/v311q{n}/#", 1)) == [1]
        device.close()
        _device(mqtt_cluster, f"v311-quick-{n}", clean_start=True).close()
        again = _device(mqtt_cluster, f"v311-quick-{n}", clean_start=False)
        try:
            assert not again.flags.session_present, n
        finally:
            again.close()


def test_a_shared_subscription_of_311_devices(mqtt_cluster: MqttCluster) -> None:
    members = [_device(mqtt_cluster, f"v311-worker-{n}") for n in range(2)]
    pub = _device(mqtt_cluster, "v311-jobs")
    try:
        for member in members:
            assert _granted(member, ("$share/v311w/devices/v311jobs/+", 1)) == [1]
        # the group's consumer starts at the end of the topic: wait until it reads
        warm = None
        for _ in range(40):
            pub.publish("devices/v311jobs/warmup", b"warmup")
            for member in members:
                if not member.inbox.empty():
                    warm = member.inbox.get()
            if warm is not None:
                break
        assert warm is not None
        for n in range(6):
            assert pub.publish("devices/v311jobs/j", f"job{n}".encode()).value == 0
        jobs: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        while len(jobs) < 6 and time.monotonic() < deadline:
            for member in members:
                with contextlib.suppress(queue.Empty):
                    payload = member.inbox.get(timeout=0.05).payload
                    if payload != b"warmup":
                        jobs.append(payload)
        time.sleep(0.5)  # any copy of a job would come now
        extra = [m.inbox.get().payload for m in members for _ in range(m.inbox.qsize())]
        assert [e for e in extra if e != b"warmup"] == []
        assert sorted(jobs) == [f"job{n}".encode() for n in range(6)]  # each once
    finally:
        for member in members:
            member.close()
        pub.close()


def test_a_311_and_a_5_device_exchange_messages(mqtt_cluster: MqttCluster) -> None:
    old = _device(mqtt_cluster, "v311-old")
    new = Device(mqtt_cluster, "v5-new")
    try:
        assert _granted(old, ("alerts/mixed/to311", 1)) == [1]
        assert [int(c.value) for c in new.subscribe(("alerts/mixed/to5", 1))] == [1]
        assert new.publish("alerts/mixed/to311", b"from 5").value == 0
        assert old.publish("alerts/mixed/to5", b"from 311").value == 0
        (to_old,) = old.received(1)
        (to_new,) = new.received(1)
        assert (to_old.topic, to_old.payload) == ("alerts/mixed/to311", b"from 5")
        assert (to_new.topic, to_new.payload) == ("alerts/mixed/to5", b"from 311")
    finally:
        old.close()
        new.close()


def test_rights_are_refused_with_311_answers(mqtt_cluster: MqttCluster) -> None:
    reader = _device(mqtt_cluster, "v311-reader", credentials=READER)
    try:
        # SUBACK 0x80 for the filter without SUB right, the granted QoS for the other
        assert _granted(reader, ("devices/v311/#", 1), ("sensors/v311/#", 1)) == [0x80, 1]
        # a QoS 1 PUBLISH without PUB right: no PUBACK (3.1.1 has no reason), a close
        reader.client.publish("sensors/v311/x", b"x", qos=1)
        assert reader.disconnects.get(timeout=WAIT_S).value != 0
        assert not reader.acks
    finally:
        reader.close()
