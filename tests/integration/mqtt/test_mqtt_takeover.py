"""One connection per client id across gateway pods: a device connecting through a
second gateway takes the session over, and the first pod closes its older connection
with DISCONNECT 0x8E (session taken over)."""

from __future__ import annotations

from tests.integration.mqtt.conftest import (
    ADMIN,
    GATEWAY_SETTINGS,
    WAIT_S,
    Device,
    MqttCluster,
    OtherGateway,
)
from tests.integration.procs import ServiceProcess


def test_a_connect_through_another_pod_takes_the_client_id_over(
    mqtt_cluster: MqttCluster,
) -> None:
    second = ServiceProcess(
        "mqtt",
        mqtt_cluster.log_dir,
        f"registry={mqtt_cluster.registry.address}",
        f"access_key={ADMIN.access_key}",
        f"secret_key={ADMIN.secret_key}",
        *GATEWAY_SETTINGS,
        "pod_id=second-pod",
    ).start()
    first_device = Device(mqtt_cluster, "roaming-device")
    other = Device(mqtt_cluster, "bystander")
    try:
        again = Device(OtherGateway(second), "roaming-device")
        try:
            reason = first_device.disconnects.get(timeout=WAIT_S * 3)
            assert reason == 0x8E  # session taken over
            assert again.disconnects.empty()  # the newer connection stays
            assert other.disconnects.empty()  # another client id is untouched
            assert again.publish("sensors/roaming", b"still here") == 0
        finally:
            again.close()
    finally:
        first_device.client.loop_stop()
        other.close()
        second.stop()
