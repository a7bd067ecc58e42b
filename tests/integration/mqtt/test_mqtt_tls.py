"""MQTT over TLS: a gateway with ``tls_cert_file`` serves devices on its TLS port.

A second gateway on the package's cluster, with a certificate of a CA made for
the test (``boltmq dev``'s generator; the certificate names 127.0.0.1): a paho
device that trusts the CA publishes and receives over TLS; one that trusts
another CA, and a device speaking plain MQTT to the TLS port, get no CONNACK.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion, MQTTProtocolVersion

from boltmq.cli.dev import certificates
from tests.integration.mqtt.conftest import ADMIN, DEVICE, GATEWAY_SETTINGS, WAIT_S, MqttCluster
from tests.integration.procs import ServiceProcess
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def tls_gateway(
    mqtt_cluster: MqttCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceProcess, certificates.DevCertificates]]:
    made = certificates.generate(tmp_path_factory.mktemp("mqtt-tls"), hosts=("127.0.0.1",))
    cert, key = made.component_files("broker", "broker-a")
    gateway = ServiceProcess(
        "mqtt",
        mqtt_cluster.log_dir,
        f"registry={mqtt_cluster.registry.address}",
        f"access_key={ADMIN.access_key}",
        f"secret_key={ADMIN.secret_key}",
        *GATEWAY_SETTINGS,
        f"tls_cert_file={cert}",
        f"tls_key_file={key}",
        "tls_listen_port=0",
    ).start()
    yield gateway, made
    gateway.stop()


def tls_port(gateway: ServiceProcess) -> int:
    return int(gateway.ports["tls"].rsplit(":", 1)[1])


def tls_device(gateway: ServiceProcess, ca_file: Path, client_id: str) -> mqtt.Client:
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=client_id, protocol=MQTTProtocolVersion.MQTTv5
    )
    client.username_pw_set(DEVICE.access_key, DEVICE.secret_key)
    client.tls_set(ca_certs=str(ca_file))
    return client


def test_a_device_trusting_the_ca_publishes_and_receives_over_tls(
    tls_gateway: tuple[ServiceProcess, certificates.DevCertificates],
) -> None:
    gateway, made = tls_gateway
    client = tls_device(gateway, made.ca_file, "tls-device")
    got: list[mqtt.MQTTMessage] = []
    subscribed = []
    client.on_message = lambda c, u, m: got.append(m)
    client.on_subscribe = lambda c, u, mid, rcs, p: subscribed.append(rcs)
    client.connect("127.0.0.1", tls_port(gateway), keepalive=30)
    client.loop_start()
    try:
        wait_until(client.is_connected, "the TLS session")
        assert isinstance(client.socket(), ssl.SSLSocket)
        client.subscribe("sensors/tls/#", qos=1)
        wait_until(lambda: bool(subscribed), "the SUBACK")
        info = client.publish("sensors/tls/1", b"over tls", qos=1)
        info.wait_for_publish(WAIT_S)
        assert info.is_published()
        wait_until(lambda: bool(got), "the message back")
        assert (got[0].topic, got[0].payload) == ("sensors/tls/1", b"over tls")
    finally:
        client.disconnect()
        client.loop_stop()


def test_an_untrusted_certificate_and_plain_mqtt_get_no_session(
    tls_gateway: tuple[ServiceProcess, certificates.DevCertificates], tmp_path: Path
) -> None:
    gateway, _ = tls_gateway
    other = certificates.generate(tmp_path / "other", hosts=("127.0.0.1",))
    context = ssl.create_default_context(cafile=str(other.ca_file))
    with socket.create_connection(("127.0.0.1", tls_port(gateway)), timeout=WAIT_S) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(raw, server_hostname="127.0.0.1")
    # a plain CONNECT (MQTT 5, client id "p") to the TLS port: never a CONNACK
    connect = bytes([0x10, 14, 0, 4]) + b"MQTT" + bytes([5, 2, 0, 30, 0, 0, 1]) + b"p"
    with socket.create_connection(("127.0.0.1", tls_port(gateway)), timeout=WAIT_S) as plain:
        plain.sendall(connect)
        try:
            answer = plain.recv(16)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    assert not answer.startswith(b"\x20")  # no CONNACK
    assert gateway.proc is not None and gateway.proc.poll() is None  # still serving
