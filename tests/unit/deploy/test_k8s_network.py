"""deploy/k8s: who can reach which port, and mutual TLS between the components.

The attacker is an application: any pod, in the cluster's namespace or another.
On the rendered objects (base, where the NetworkPolicies live, and the
production overlay that adds mutual TLS) it may reach the registry's and the
brokers' ports and nothing else: not the HA port (only the pods of the same
broker group), not the store (it binds loopback and no container port or
Service names it), not metrics (the ``monitoring`` namespace only), not the
health ports (left to the kubelet, whose traffic from the node Kubernetes
always allows). Production serves no gRPC reflection, which a NetworkPolicy
cannot separate from a port's own calls. In production the store and HA ports demand a client
certificate of an internal CA mounted from its own Secret, apart from the CA
applications trust, and the HA service and the broker present one.
NetworkPolicies are evaluated by :mod:`tests.unit.deploy.network_policy`.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from tests.unit.deploy.manifests import (
    Container,
    boltmq_workloads,
    containers,
    objects_of,
    render,
)
from tests.unit.deploy.network_policy import Peer, Pod, admits, selecting

GUARDED = ("base", "production")
"""Targets checked here (dev inherits the base's policies)."""
MONITORING = Peer({"app.kubernetes.io/name": "prometheus"}, "monitoring")
CLIENT_TLS = ("tls_client_cert_file", "tls_client_key_file")
BROKER_NAME_LABEL = "boltmq.io/broker-name"


def applications(namespace: str) -> list[Peer]:
    """Application pods: beside BoltMQ in its namespace, and in one of their own."""
    return [Peer({"app": "orders"}, namespace), Peer({"app": "orders"}, "shop")]


def pods(target: str) -> list[tuple[Pod, list[Container]]]:
    """Each BoltMQ StatefulSet's pod template as a destination, with its resolved containers
    (etcd's: test_k8s_etcd.py)."""
    out = []
    for name, workload in boltmq_workloads(render(target)).items():
        members = [c for c in containers(target) if c.workload["metadata"]["name"] == name]
        named = {
            p["name"]: p["containerPort"]
            for c in workload["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        }
        labels = workload["spec"]["template"]["metadata"]["labels"]
        out.append((Pod(labels, members[0].namespace, named), members))
    return out


def every_port(members: list[Container]) -> dict[int, str]:
    """Every port of a pod (container ports, and each service's own even on loopback)."""
    ports = {p["containerPort"]: p["name"] for c in members for p in c.spec["ports"]}
    for c in members:
        ports.setdefault(c.config.listen_port, f"{c.service} (loopback)")
    return ports


def policies(target: str) -> list[dict[str, Any]]:
    return list(objects_of(render(target), "NetworkPolicy").values())


@pytest.fixture(params=GUARDED)
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---------------------------------------------------------------- reachability
def test_every_pod_is_selected_by_a_network_policy(target: str) -> None:
    for pod, members in pods(target):
        assert selecting(policies(target), pod), members[0].workload["metadata"]["name"]


def test_applications_reach_only_the_broker_and_registry_ports(target: str) -> None:
    """...and devices the MQTT gateway's ports."""
    allowed = set()
    for pod, members in pods(target):
        public = {c.config.listen_port for c in members if c.service in ("broker", "registry")}
        for c in members:
            if c.service == "mqtt":
                public |= {c.config.listen_port, c.config.tls_listen_port, c.config.ws_listen_port}
        for port, name in every_port(members).items():
            for peer in applications(pod.namespace):
                reached = admits(policies(target), pod, port, peer)
                assert reached == (port in public), f"{name} ({port}) from {peer}"
                if reached:
                    allowed.add(name)
    assert allowed == {"broker", "grpc", "mqtt", "mqtts", "mqtt-ws"}


def test_the_ha_port_admits_only_pods_of_its_own_broker_group(target: str) -> None:
    """Each group's HA port: its own pods, not another group's (the rendered groups'
    pods and a group that does not exist yet), not the same labels elsewhere."""
    every_pod = [dict(pod.labels) for pod, _ in pods(target)]
    groups = [labels for labels in every_pod if labels.get(BROKER_NAME_LABEL)]
    assert len({labels[BROKER_NAME_LABEL] for labels in groups}) == 2
    for pod, members in pods(target):
        for c in members:
            if c.service != "ha":
                continue
            port = c.config.listen_port
            group = dict(pod.labels)
            assert group[BROKER_NAME_LABEL] == c.config.broker_name
            strangers = [labels for labels in every_pod if labels != group]
            strangers.append({**group, BROKER_NAME_LABEL: "broker-z"})
            assert admits(policies(target), pod, port, Peer(group, pod.namespace))
            for other in strangers:
                assert not admits(policies(target), pod, port, Peer(other, pod.namespace))
            assert not admits(policies(target), pod, port, Peer(group, "shop"))
            assert not admits(policies(target), pod, port, MONITORING)


def test_the_store_is_on_loopback_and_in_no_service(target: str) -> None:
    services = objects_of(render(target), "Service").values()
    for pod, members in pods(target):
        for c in members:
            if c.service != "store":
                continue
            assert c.config.listen_host == "127.0.0.1"
            assert c.config.listen_port not in {p["containerPort"] for p in c.spec["ports"]}
            for peer in (*applications(pod.namespace), Peer(dict(pod.labels), pod.namespace)):
                assert not admits(policies(target), pod, c.config.listen_port, peer)
            # The broker and the HA service beside it dial it there.
            for other in members:
                if other.service in ("broker", "ha"):
                    assert other.config.store_address == f"127.0.0.1:{c.config.listen_port}"
    hidden = {"store", "ha", 10912, 10913}
    for service in services:
        for port in service["spec"]["ports"]:
            assert not {port["port"], port["targetPort"]} & hidden, service["metadata"]["name"]


def test_metrics_admit_only_the_monitoring_namespace_and_health_ports_no_peer(
    target: str,
) -> None:
    for pod, members in pods(target):
        group = Peer(dict(pod.labels), pod.namespace)
        for c in members:
            metrics, health = c.config.metrics_port, c.config.health_port
            assert metrics and health, c.name
            assert admits(policies(target), pod, metrics, MONITORING), c.name
            assert not admits(policies(target), pod, health, MONITORING), c.name
            for peer in (*applications(pod.namespace), group):
                assert not admits(policies(target), pod, metrics, peer), c.name
                assert not admits(policies(target), pod, health, peer), c.name


def test_production_serves_no_reflection_and_the_base_does() -> None:
    """A NetworkPolicy cannot keep reflection off the ports applications reach."""
    assert not any(c.config.reflection for c in containers("production"))
    assert all(c.config.reflection for c in containers("base"))


# ---------------------------------------------------------------- mutual TLS (production)
def secret_file(c: Container, path: str) -> tuple[str, str]:
    """``(secret name, key)`` the file at ``path`` of ``c`` is mounted from."""
    volumes = {v["name"]: v for v in c.pod["volumes"]}
    file = PurePosixPath(path)
    mounts = [(p, v) for p, v in c.mounts().items() if file.is_relative_to(p)]
    assert len(mounts) == 1, f"{c.name}: {path} is on no single mount"
    mount_path, volume = mounts[0]
    secret = volumes[volume].get("secret")
    assert secret is not None, f"{c.name}: {path} is not mounted from a Secret"
    relative = str(file.relative_to(mount_path))
    items = {i["path"]: i["key"] for i in secret.get("items", [])}
    if items:
        assert relative in items, f"{c.name}: {path} is not an item of its Secret volume"
    return str(secret["secretName"]), items.get(relative, relative)


def test_production_components_present_their_own_internal_certificates() -> None:
    """Every container serves and calls with its own component certificate, from a Secret
    of its own; the store, HA and registry check callers against the internal CA, which
    no Secret of the applications' CA shares."""
    by_service: dict[str, list[Container]] = {}
    for c in containers("production"):
        by_service.setdefault(c.service, []).append(c)
    own_secrets: dict[tuple[str, str], set[str]] = {}
    for c in [c for group in by_service.values() for c in group]:
        cert = secret_file(c, c.config.tls_cert_file)
        for name in CLIENT_TLS:
            path = getattr(c.config, name)
            assert path, f"{c.name}: no {name}"
            assert secret_file(c, path)[0] == cert[0], f"{c.name}: {name} is not its own"
        # A component is a service of one workload: broker-a's store is not broker-b's.
        own_secrets.setdefault((c.workload["metadata"]["name"], c.service), set()).add(cert[0])
    assert all(len(names) == 1 for names in own_secrets.values()), own_secrets
    assert len({next(iter(n)) for n in own_secrets.values()}) == len(own_secrets), own_secrets
    for c in [*by_service["store"], *by_service["ha"], *by_service["registry"]]:
        internal_ca = secret_file(c, c.config.tls_internal_ca_file)
        assert internal_ca[1] == "ca.crt", c.name
        if c.config.tls_client_ca_file:  # the registry also admits applications
            applications_ca = secret_file(c, c.config.tls_client_ca_file)
            assert applications_ca[0] != internal_ca[0], f"{c.name}: one CA for both"


def test_the_policy_evaluator_follows_the_api() -> None:
    pod = Pod({"role": "db"}, "prod", {"sql": 5432})
    peer = Peer({"role": "web"}, "prod")

    def policy(ingress: list[dict[str, Any]], namespace: str = "prod") -> dict[str, Any]:
        return {
            "metadata": {"name": "p", "namespace": namespace},
            "spec": {"podSelector": {"matchLabels": {"role": "db"}}, "ingress": ingress},
        }

    assert admits([], pod, 5432, peer)  # no policy: open
    assert admits([policy([], "other")], pod, 5432, peer)  # another namespace's policy
    assert not admits([policy([])], pod, 5432, peer)  # selected, no rule: closed
    assert admits([policy([{"ports": [{"port": "sql"}]}])], pod, 5432, peer)
    assert not admits([policy([{"ports": [{"port": "sql"}]}])], pod, 5433, peer)
    assert admits([policy([{"ports": [{"port": 5000, "endPort": 6000}]}])], pod, 5432, peer)
    same_namespace_web = [{"from": [{"podSelector": {"matchLabels": {"role": "web"}}}]}]
    assert admits([policy(same_namespace_web)], pod, 5432, peer)
    assert not admits([policy(same_namespace_web)], pod, 5432, Peer({"role": "web"}, "shop"))
    shop = [{"from": [{"namespaceSelector": {"matchLabels": NAMESPACE_SHOP}}]}]
    assert admits([policy(shop)], pod, 5432, Peer({}, "shop"))
    assert not admits([policy(shop)], pod, 5432, peer)
    assert admits([policy([{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}])], pod, 1, peer)
    with pytest.raises(AssertionError, match="matchExpressions"):
        admits([policy([{"from": [{"podSelector": {"matchExpressions": [{}]}}]}])], pod, 1, peer)


NAMESPACE_SHOP = {"kubernetes.io/metadata.name": "shop"}
