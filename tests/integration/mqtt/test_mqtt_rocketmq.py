"""What a device publishes over MQTT, the official RocketMQ 5 client consumes, unmodified.

A paho device publishes on ``rmqbridge/...`` through the package's gateway; the
official Python SimpleConsumer (its own venv, ``make rocketmq-clients``) receives
the messages from the broker over RocketMQ's protocol, with the MQTT topic in a
property, and acks them.
"""

from __future__ import annotations

import uuid

from paho.mqtt.enums import MQTTProtocolVersion

from tests.integration.mqtt.conftest import ADMIN, Device, MqttCluster
from tests.integration.rocketmq.official_client import needs_official_client, of, run_client


@needs_official_client
def test_the_official_rocketmq_client_consumes_what_devices_publish(
    mqtt_cluster: MqttCluster,
) -> None:
    marker = uuid.uuid4().hex[:8]
    topics = [f"rmqbridge/eu/{n}" for n in range(2)] + ["rmqbridge/us/0"]
    device = Device(mqtt_cluster, f"rmq-bridge-{marker}", ADMIN)
    legacy = Device(
        mqtt_cluster, f"rmq-bridge-311-{marker}", ADMIN, version=MQTTProtocolVersion.MQTTv311
    )
    try:
        for topic in topics[:2]:
            assert device.publish(topic, f"{marker} {topic}".encode()) == 0  # PUBACK success
        legacy.publish(topics[2], f"{marker} {topics[2]}".encode())
    finally:
        device.close()
        legacy.close()

    events = run_client(
        "rmq_consumer.py",
        mqtt_cluster.broker.address,
        "drain",
        f"rmq-bridge-{marker}",
        "rmqbridge",
        "3",
        "30",
        credentials=(ADMIN.access_key, ADMIN.secret_key),
    )
    received = of(events, "received")
    assert sorted(r["body"] for r in received) == sorted(f"{marker} {t}" for t in topics)
    for message in received:
        assert message["topic"] == "rmqbridge"
        assert message["properties"]["MQTT_TOPIC"] == message["body"].split(" ", 1)[1]
