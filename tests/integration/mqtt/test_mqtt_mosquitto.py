"""Debian's mosquitto_pub and mosquitto_sub (``make mosquitto``), unmodified, MQTT 5.

Publish and subscribe at QoS 0 and 1 with wildcards, retained messages, a refused
account and a refused topic, each checked through the clients' own output and exit
codes.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.integration.mqtt.conftest import DEVICE, READER, Device, MqttCluster

pytestmark = pytest.mark.skipif(
    shutil.which("mosquitto_pub") is None, reason="make mosquitto installs the clients"
)
TIMEOUT_S = "10"


def _auth(cluster: MqttCluster, user: str, password: str, version: str = "5") -> list[str]:
    return ["-h", cluster.host, "-p", str(cluster.port), "-V", version, "-u", user, "-P", password]


def _pub(
    cluster: MqttCluster,
    *args: str,
    user: str = DEVICE.access_key,
    password: str = DEVICE.secret_key,
    version: str = "5",
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mosquitto_pub", *_auth(cluster, user, password, version), *args],
        capture_output=True,
        text=True,
        timeout=20,
    )


def _sub(
    cluster: MqttCluster,
    *args: str,
    user: str = DEVICE.access_key,
    password: str = DEVICE.secret_key,
    version: str = "5",
) -> subprocess.Popen[str]:
    return subprocess.Popen(  # stdbuf: its lines as they come (stdout is a pipe)
        [
            "stdbuf",
            "-oL",
            "mosquitto_sub",
            *_auth(cluster, user, password, version),
            "-W",
            TIMEOUT_S,
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_mosquitto_pub_and_sub_with_wildcards_at_qos_0_and_1(mqtt_cluster: MqttCluster) -> None:
    sub = _sub(
        mqtt_cluster, "-d", "-t", "sensors/+/mosq", "-q", "1", "-C", "3", "-v", "-i", "mosq-sub"
    )
    try:
        assert sub.stdout is not None
        for line in sub.stdout:  # -d: the client's debug lines, "received SUBACK" among them
            if "received SUBACK" in line:
                break
        sends = (
            ("1", "sensors/a/mosq", "one"),
            ("0", "sensors/b/mosq", "two"),
            ("1", "sensors/a/other", "not me"),
            ("1", "sensors/c/mosq", "three"),
        )
        for qos, topic, body in sends:
            done = _pub(mqtt_cluster, "-q", qos, "-t", topic, "-m", body)
            assert done.returncode == 0, done.stderr
        out, err = sub.communicate(timeout=20)
    finally:
        sub.kill()
    assert sub.returncode == 0, (out, err)
    messages = [line for line in out.splitlines() if line.startswith("sensors/")]
    # three publishers (processes): MQTT orders each one's messages, not theirs together
    assert sorted(messages) == ["sensors/a/mosq one", "sensors/b/mosq two", "sensors/c/mosq three"]


def test_mosquitto_retained_message(mqtt_cluster: MqttCluster) -> None:
    done = _pub(mqtt_cluster, "-q", "1", "-r", "-t", "sensors/mosq/state", "-m", "on")
    assert done.returncode == 0, done.stderr
    got = subprocess.run(
        [
            "mosquitto_sub",
            *_auth(mqtt_cluster, DEVICE.access_key, DEVICE.secret_key),
            "-W",
            TIMEOUT_S,
            "-t",
            "sensors/mosq/#",
            "-C",
            "1",
            "-v",
            "-F",
            "%r %t %p",
        ],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "1 sensors/mosq/state on"


def test_mosquitto_refusals(mqtt_cluster: MqttCluster) -> None:
    wrong = _pub(mqtt_cluster, "-q", "1", "-t", "sensors/x", "-m", "x", password="wrong-secret")
    assert wrong.returncode != 0
    assert "bad user name or password" in wrong.stderr.lower()  # CONNACK 0x86
    denied = _pub(
        mqtt_cluster,
        "-q",
        "1",
        "-t",
        "sensors/x",
        "-m",
        "x",
        user=READER.access_key,
        password=READER.secret_key,
    )
    assert "not authorized" in denied.stderr.lower()  # PUBACK 0x87
    sub = subprocess.run(
        [
            "mosquitto_sub",
            *_auth(mqtt_cluster, READER.access_key, READER.secret_key),
            "-W",
            "3",
            "-t",
            "devices/#",
            "-C",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert "All subscription requests were denied" in sub.stderr  # SUBACK 0x87


def test_mosquitto_and_paho_talk_to_each_other(mqtt_cluster: MqttCluster) -> None:
    paho = Device(mqtt_cluster, "paho-listener")
    try:
        paho.subscribe(("alerts/mosq/#", 1))
        done = _pub(mqtt_cluster, "-q", "1", "-t", "alerts/mosq/door", "-m", "open")
        assert done.returncode == 0, done.stderr
        (message,) = paho.received(1)
        assert (message.topic, message.payload) == ("alerts/mosq/door", b"open")
    finally:
        paho.close()
