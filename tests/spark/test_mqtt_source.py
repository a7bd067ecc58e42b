"""Spark reads what devices publish over MQTT: a gateway in front of the module's cluster,
an unmodified paho device, and ``format("boltmq")`` on the MQTT topic's first level."""

from __future__ import annotations

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from tests.integration.conftest import Cluster
from tests.integration.procs import ServiceProcess
from tests.spark.test_broker_source import reader
from tests.waiting import wait_until


def test_spark_reads_what_a_device_published(spark, cluster: Cluster) -> None:  # type: ignore[no-untyped-def]
    gateway = ServiceProcess(
        "mqtt", cluster.log_dir, f"registry={cluster.registry.address}", "ws_listen_port=-1"
    ).start()
    device = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id="spark-device", protocol=MQTTProtocolVersion.MQTTv5
    )
    topics = ["plant/line-1/temp", "plant/line-2/temp", "plant/line-1/rpm"]
    try:
        host, port = gateway.address.rsplit(":", 1)
        device.connect(host, int(port), keepalive=30)
        device.loop_start()
        wait_until(device.is_connected, "the device's session")
        for n, topic in enumerate(topics):
            sent = device.publish(topic, f"reading-{n}".encode(), qos=1)
            sent.wait_for_publish(10)
            assert sent.is_published()
    finally:
        device.disconnect()
        device.loop_stop()
        gateway.stop()

    rows = reader(spark, cluster, "plant").select("body", "properties").collect()
    got = sorted((r.properties["MQTT_TOPIC"], r.body.decode()) for r in rows)
    assert got == sorted((t, f"reading-{n}") for n, t in enumerate(topics))
