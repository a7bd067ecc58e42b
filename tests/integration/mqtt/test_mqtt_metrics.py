"""The gateway's metrics on its Prometheus endpoint (``metrics_port``): connections by
protocol version and their subscriptions, as devices come and go."""

from __future__ import annotations

from paho.mqtt.enums import MQTTProtocolVersion

from tests.integration.mqtt.conftest import (
    ADMIN,
    GATEWAY_SETTINGS,
    Device,
    MqttCluster,
    OtherGateway,
)
from tests.integration.procs import ServiceProcess
from tests.integration.test_metrics import free_port, value, wait_for


def test_connections_and_subscriptions_are_counted(mqtt_cluster: MqttCluster) -> None:
    port = free_port()
    gateway = ServiceProcess(
        "mqtt",
        mqtt_cluster.log_dir,
        f"registry={mqtt_cluster.registry.address}",
        f"access_key={ADMIN.access_key}",
        f"secret_key={ADMIN.secret_key}",
        *GATEWAY_SETTINGS,
        f"metrics_port={port}",
    ).start()
    view = OtherGateway(gateway)
    try:
        samples = wait_for(
            port,
            lambda s: ("boltmq_mqtt_connections", frozenset({("version", "5")})) in s,
            "the connection gauge",
        )
        assert value(samples, "boltmq_mqtt_connections", version="5") == 0
        v5 = Device(view, "metrics-5")
        v311 = Device(view, "metrics-311", version=MQTTProtocolVersion.MQTTv311)
        v5.subscribe(("sensors/m/#", 1), ("devices/m", 0))
        samples = wait_for(
            port,
            lambda s: s.get(("boltmq_mqtt_subscriptions", frozenset())) == 2,
            "two subscriptions",
        )
        assert value(samples, "boltmq_mqtt_connections", version="5") == 1
        assert value(samples, "boltmq_mqtt_connections", version="3.1.1") == 1
        assert value(samples, "boltmq_mqtt_qos0_dropped_total") == 0
        v5.close()
        v311.close()
        wait_for(
            port,
            lambda s: (
                s.get(("boltmq_mqtt_connections", frozenset({("version", "5")}))) == 0
                and s.get(("boltmq_mqtt_connections", frozenset({("version", "3.1.1")}))) == 0
            ),
            "the devices to be gone",
        )
    finally:
        gateway.stop()
