"""One ACL-enforcing cluster and one MQTT gateway for every MQTT test (package scope).

The gateway signs with the admin account; devices connect with their own accounts:
``DEVICE`` (PUB and SUB on sensors, devices, alerts, wills), ``READER`` (SUB on sensors
only). Clients are unmodified: paho-mqtt (PyPI) here, Debian's mosquitto_pub/_sub in
their module.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from boltmq.kernel.signing import Credentials
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import ServiceProcess

ADMIN = Credentials("mqtt-gateway", "gateway-secret-1")
DEVICE = Credentials("device-one", "device-secret-1")
READER = Credentials("reader-dev", "reader-secret-1")
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": DEVICE.access_key,
            "secretKey": DEVICE.secret_key,
            "topicPerms": {t: "PUB|SUB" for t in ("sensors", "devices", "alerts", "wills")},
        },
        {
            "accessKey": READER.access_key,
            "secretKey": READER.secret_key,
            "topicPerms": {"sensors": "SUB"},
        },
    ]
}
GATEWAY_SETTINGS = ("max_subscriptions=20", "max_packet_bytes=65536", "ws_listen_port=0")
WAIT_S = 10.0


class MqttCluster:
    """Registry, store, ACL broker and a gateway; the gateway restarts on its ports."""

    def __init__(self, tmp: Path) -> None:
        self.log_dir = tmp / "logs"
        seed = tmp / "acl.json"
        seed.write_text(json.dumps(SEED))
        self.registry = ServiceProcess("registry", self.log_dir, *CLUSTER_REGISTRY_SETTINGS).start()
        self.store = ServiceProcess(
            "store", self.log_dir, f"root_dir={tmp / 'store'}", *CLUSTER_STORE_SETTINGS
        ).start()
        self.broker = ServiceProcess(
            "broker",
            self.log_dir,
            f"store_address={self.store.address}",
            f"registry_addresses={self.registry.address}",
            *CLUSTER_BROKER_SETTINGS,
            "acl_enable=true",
            f"acl_file={seed}",
            "acl_signature_max_skew_ms=60000",
        ).start()
        self.gateway = self._start_gateway(0, 0)

    def _start_gateway(self, port: int, ws_port: int) -> ServiceProcess:
        return ServiceProcess(
            "mqtt",
            self.log_dir,
            f"registry={self.registry.address}",
            f"access_key={ADMIN.access_key}",
            f"secret_key={ADMIN.secret_key}",
            *GATEWAY_SETTINGS,
            f"ws_listen_port={ws_port}",
            port=port,
        ).start()

    @property
    def host(self) -> str:
        return self.gateway.address.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return self.gateway.port

    @property
    def ws_port(self) -> int:
        return int(self.gateway.ports["ws"].rsplit(":", 1)[1])

    def restart_gateway(self) -> None:
        port, ws_port = self.port, self.ws_port
        assert self.gateway.stop() == 0, self.gateway.last_error()
        self.gateway = self._start_gateway(port, ws_port)

    def stop(self) -> None:
        for proc in (self.gateway, self.broker, self.store, self.registry):
            proc.stop()


class OtherGateway(MqttCluster):
    """The package's cluster as devices see it through another gateway pod."""

    def __init__(self, gateway: ServiceProcess) -> None:  # the cluster is already running
        self.gateway = gateway


@pytest.fixture(scope="package")
def mqtt_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttCluster]:
    cluster = MqttCluster(tmp_path_factory.mktemp("mqtt"))
    yield cluster
    cluster.stop()


class Device:
    """A paho-mqtt client speaking MQTT 5 (or ``version``, e.g. 3.1.1) with what it
    received in ``inbox``."""

    def __init__(
        self,
        cluster: MqttCluster,
        client_id: str,
        credentials: Credentials | None = DEVICE,
        *,
        clean_start: bool = True,
        session_expiry_s: int = 0,
        will: tuple[str, bytes] | None = None,
        transport: str = "tcp",
        version: MQTTProtocolVersion = MQTTProtocolVersion.MQTTv5,
    ) -> None:
        v5 = version == MQTTProtocolVersion.MQTTv5
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            clean_session=None if v5 else clean_start,
            protocol=version,
            transport=transport,  # type: ignore[arg-type]
        )
        if credentials is not None:
            self.client.username_pw_set(credentials.access_key, credentials.secret_key)
        if will is not None:
            self.client.will_set(will[0], will[1], qos=1)
        self.inbox: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.connack: queue.Queue[Any] = queue.Queue()
        self.acks: dict[int, Any] = {}
        self.subacks: queue.Queue[list[Any]] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self._acked = threading.Condition()
        self.client.on_message = lambda c, u, m: self.inbox.put(m)
        self.client.on_connect = lambda c, u, f, rc, p: self.connack.put((rc, f))
        self.client.on_subscribe = lambda c, u, mid, rcs, p: self.subacks.put(rcs)
        self.client.on_publish = self._on_publish
        self.client.on_disconnect = lambda c, u, f, rc, p: self.disconnects.put(rc)
        properties = Properties(PacketTypes.CONNECT)
        if session_expiry_s:
            properties.SessionExpiryInterval = session_expiry_s
        port = cluster.ws_port if transport == "websockets" else cluster.port
        if v5:
            self.client.connect(
                cluster.host, port, keepalive=30, clean_start=clean_start, properties=properties
            )
        else:
            self.client.connect(cluster.host, port, keepalive=30)
        self.client.loop_start()
        self.reason, self.flags = self.connack.get(timeout=WAIT_S)

    def _on_publish(self, client: object, userdata: object, mid: int, rc: Any, p: Any) -> None:
        with self._acked:
            self.acks[mid] = rc
            self._acked.notify_all()

    def subscribe(self, *filters: tuple[str, int]) -> list[Any]:
        self.client.subscribe(list(filters))
        return self.subacks.get(timeout=WAIT_S)

    def publish(self, topic: str, payload: bytes, qos: int = 1, **kw: Any) -> Any:
        """Publish; for QoS 1 wait for the PUBACK and return its reason code."""
        info = self.client.publish(topic, payload, qos=qos, **kw)
        if qos == 0:
            return None
        with self._acked:
            assert self._acked.wait_for(lambda: info.mid in self.acks, WAIT_S), "no PUBACK"
            return self.acks[info.mid]

    def received(self, count: int, timeout_s: float = WAIT_S) -> list[mqtt.MQTTMessage]:
        return [self.inbox.get(timeout=timeout_s) for _ in range(count)]

    def nothing_more(self, wait_s: float = 1.0) -> bool:
        try:
            extra = self.inbox.get(timeout=wait_s)
        except queue.Empty:
            return True
        raise AssertionError(f"unexpected message on {extra.topic}: {extra.payload!r}")

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()
