"""Debian's mosquitto_pub and mosquitto_sub (``make mosquitto``), unmodified, MQTT 3.1.1.

``-V mqttv311``: publish and subscribe at QoS 0 and 1 with wildcards, a retained message,
a persistent session (``-c``) across a disconnect, a shared subscription, refusals (a
wrong password, missing rights), and a 3.1.1 publisher read by an MQTT 5 device.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from tests.integration.mqtt.conftest import READER, Device, MqttCluster
from tests.integration.mqtt.test_mqtt_mosquitto import _pub, _sub

pytestmark = pytest.mark.skipif(
    shutil.which("mosquitto_pub") is None, reason="make mosquitto installs the clients"
)
V = "mqttv311"


def _subscribed(sub: subprocess.Popen[str]) -> None:
    """Wait for the subscriber's SUBACK (its -d debug line)."""
    assert sub.stdout is not None
    for line in sub.stdout:
        if "received SUBACK" in line:
            return
    raise AssertionError(f"no SUBACK: {sub.communicate(timeout=20)}")


def _lines(sub: subprocess.Popen[str], prefix: str) -> list[str]:
    out, err = sub.communicate(timeout=20)
    assert sub.returncode == 0, (out, err)
    return [line for line in out.splitlines() if line.startswith(prefix)]


def test_pub_and_sub_with_wildcards_at_qos_0_and_1(mqtt_cluster: MqttCluster) -> None:
    sub = _sub(mqtt_cluster, "-d", "-t", "sensors/+/m311", "-q", "1", "-C", "3", "-v", version=V)
    try:
        _subscribed(sub)
        for qos, topic, body in (
            ("1", "sensors/a/m311", "one"),
            ("0", "sensors/b/m311", "two"),
            ("1", "sensors/a/other", "not me"),
            ("1", "sensors/c/m311", "three"),
        ):
            done = _pub(mqtt_cluster, "-q", qos, "-t", topic, "-m", body, version=V)
            assert done.returncode == 0, done.stderr
        got = _lines(sub, "sensors/")
    finally:
        sub.kill()
    assert sorted(got) == ["sensors/a/m311 one", "sensors/b/m311 two", "sensors/c/m311 three"]


def test_retained_message(mqtt_cluster: MqttCluster) -> None:
    done = _pub(mqtt_cluster, "-q", "1", "-r", "-t", "sensors/m311r/state", "-m", "on", version=V)
    assert done.returncode == 0, done.stderr
    sub = _sub(mqtt_cluster, "-t", "sensors/m311r/#", "-C", "1", "-v", "-F", "%r %t %p", version=V)
    try:
        assert _lines(sub, "1 ") == ["1 sensors/m311r/state on"]
    finally:
        sub.kill()


def test_a_persistent_session_across_a_disconnect(mqtt_cluster: MqttCluster) -> None:
    session = ("-c", "-i", "m311-sleepy", "-q", "1", "-t", "devices/m311s/#", "-v")
    first = _sub(mqtt_cluster, *session, "-E", version=V)  # subscribes, then disconnects
    assert _lines(first, "devices/") == []
    for n in range(2):
        done = _pub(mqtt_cluster, "-q", "1", "-t", "devices/m311s/n", "-m", f"m{n}", version=V)
        assert done.returncode == 0, done.stderr
    back = _sub(mqtt_cluster, *session, "-C", "2", version=V)
    try:
        # two publishers (processes): MQTT orders each one's messages, not theirs together
        assert sorted(_lines(back, "devices/")) == ["devices/m311s/n m0", "devices/m311s/n m1"]
    finally:
        back.kill()


def test_a_shared_subscription(mqtt_cluster: MqttCluster) -> None:
    sub = _sub(
        mqtt_cluster, "-d", "-t", "$share/m311g/alerts/m311/#", "-q", "1", "-C", "3", version=V
    )
    try:
        _subscribed(sub)
        # the group's consumer starts at the end of the topic: publish until 3 came
        for n in range(60):
            done = _pub(mqtt_cluster, "-q", "1", "-t", "alerts/m311/x", "-m", f"n{n}", version=V)
            assert done.returncode == 0, done.stderr
            if sub.poll() is not None:
                break
            time.sleep(0.1)
        received = _lines(sub, "n")
    finally:
        sub.kill()
    assert len(received) == 3 and len(set(received)) == 3, received  # each once


def test_refusals(mqtt_cluster: MqttCluster) -> None:
    wrong = _pub(mqtt_cluster, "-q", "1", "-t", "sensors/x", "-m", "x", password="wrong", version=V)
    assert wrong.returncode != 0
    assert "bad user name or password" in wrong.stderr.lower()  # CONNACK return code 4
    denied = _pub(
        mqtt_cluster,
        *("-q", "1", "-t", "sensors/x", "-m", "x"),
        user=READER.access_key,
        password=READER.secret_key,
        version=V,
    )
    assert denied.returncode != 0, denied  # no PUBACK: the gateway closed the connection
    sub = _sub(
        mqtt_cluster,
        *("-t", "devices/#", "-C", "1"),
        user=READER.access_key,
        password=READER.secret_key,
        version=V,
    )
    try:
        _, err = sub.communicate(timeout=20)
    finally:
        sub.kill()
    assert "All subscription requests were denied" in err  # SUBACK 0x80


def test_a_311_publisher_and_an_mqtt5_subscriber(mqtt_cluster: MqttCluster) -> None:
    paho = Device(mqtt_cluster, "m311-v5-listener")
    try:
        paho.subscribe(("alerts/m311x/#", 1))
        done = _pub(mqtt_cluster, "-q", "1", "-t", "alerts/m311x/door", "-m", "open", version=V)
        assert done.returncode == 0, done.stderr
        (message,) = paho.received(1)
        assert (message.topic, message.payload) == ("alerts/m311x/door", b"open")
    finally:
        paho.close()
