"""deploy/k8s: the HA controller's etcd (``components/etcd``, used by the production overlay).

On the rendered production overlay: a 3-member etcd StatefulSet (pinned image,
headless Service with client and peer ports, a PVC per member, required
anti-affinity, a budget), each member's ``ETCD_*`` variables naming exactly the
StatefulSet's pods (every variable a flag of the real ``etcd`` binary), every
HA container's ``controller_endpoints`` naming those members on the Service's
client port, and NetworkPolicies that admit the broker groups' pods (their HA
containers) to the client port, the members to the peer port, and nobody else.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from typing import Any

import pytest

from tests.unit.deploy.manifests import (
    container_env,
    containers,
    objects_of,
    render,
)
from tests.unit.deploy.network_policy import Peer, Pod, admits, selecting

ETCD = "boltmq-etcd"
ETCD_IMAGES = ("quay.io/coreos/etcd", "registry.k8s.io/etcd")
_PINNED_TAG = re.compile(r"^v?\d+\.\d+\.\d+(-\d+)?$")
ETCD_HELP_TIMEOUT_S = 30
MONITORING = Peer({"app.kubernetes.io/name": "prometheus"}, "monitoring")


def etcd_objects(target: str = "production") -> dict[str, dict[str, Any]]:
    """The etcd component's objects by kind (StatefulSet, Service, budget)."""
    objects = render(target)
    return {
        kind: objects_of(objects, kind)[ETCD]
        for kind in ("StatefulSet", "Service", "PodDisruptionBudget", "NetworkPolicy")
    }


def member_envs() -> list[tuple[str, dict[str, str]]]:
    """``(pod name, environment)`` of each etcd member, as the kubelet would set it."""
    workload = etcd_objects()["StatefulSet"]
    template = workload["spec"]["template"]
    (container,) = template["spec"]["containers"]
    out = []
    for ordinal in range(workload["spec"]["replicas"]):
        pod = f"{ETCD}-{ordinal}"
        namespace = workload["metadata"]["namespace"]
        env = container_env(container, {}, pod, namespace, template["metadata"]["labels"])
        out.append((pod, env))
    return out


def named_ports(workload: dict[str, Any]) -> dict[str, int]:
    return {
        p["name"]: p["containerPort"]
        for c in workload["spec"]["template"]["spec"]["containers"]
        for p in c["ports"]
    }


@cache
def etcd_flags() -> frozenset[str]:
    """The flags the real ``etcd`` binary lists in ``--help``."""
    binary = shutil.which("etcd")
    if binary is None:
        pytest.fail("etcd not found on PATH: install Debian's etcd-server (`make etcd`)")
    done = subprocess.run(
        [binary, "--help"], capture_output=True, text=True, timeout=ETCD_HELP_TIMEOUT_S
    )
    return frozenset(re.findall(r"^\s+--([a-z0-9-]+)", done.stdout + done.stderr, re.M))


# ---------------------------------------------------------------- the StatefulSet
def test_production_runs_three_etcd_members_on_three_nodes() -> None:
    objects = etcd_objects()
    workload, service, budget = (
        objects["StatefulSet"],
        objects["Service"],
        objects["PodDisruptionBudget"],
    )
    assert workload["spec"]["replicas"] == 3
    pod = workload["spec"]["template"]
    labels = pod["metadata"]["labels"]
    (container,) = pod["spec"]["containers"]
    image, _, tag = container["image"].rpartition(":")
    assert image in ETCD_IMAGES and _PINNED_TAG.fullmatch(tag), container["image"]
    assert workload["spec"]["serviceName"] == ETCD
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True  # peers before a quorum
    assert {p["name"] for p in service["spec"]["ports"]} == {"client", "peer"}
    assert service["spec"]["selector"].items() <= labels.items()
    claims = {t["metadata"]["name"] for t in workload["spec"]["volumeClaimTemplates"]}
    data_dir = member_envs()[0][1]["ETCD_DATA_DIR"]
    mounts = [m for m in container["volumeMounts"] if data_dir.startswith(m["mountPath"] + "/")]
    assert mounts and mounts[0]["name"] in claims
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["maxUnavailable"] == 1
    others = [
        w for name, w in objects_of(render("production"), "StatefulSet").items() if name != ETCD
    ]
    for selector in (
        term["labelSelector"]["matchLabels"],
        budget["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= labels.items()
        for other in others:  # exactly etcd's pods
            assert not selector.items() <= other["spec"]["template"]["metadata"]["labels"].items()


def test_etcd_runs_non_root_read_only_with_requests_and_limits() -> None:
    workload = etcd_objects()["StatefulSet"]
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] in objects_of(render("production"), "ServiceAccount")
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}
    ports = named_ports(workload)
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert ports[container[kind]["httpGet"]["port"]] == ports["metrics"], kind


def test_each_member_names_itself_and_exactly_the_statefulset_s_pods() -> None:
    workload = etcd_objects()["StatefulSet"]
    ports = named_ports(workload)
    namespace = workload["metadata"]["namespace"]
    envs = member_envs()

    def url(pod: str, port: str) -> str:
        return f"http://{pod}.{ETCD}.{namespace}.svc:{ports[port]}"

    expected_cluster = ",".join(f"{pod}={url(pod, 'peer')}" for pod, _ in envs)
    for pod, env in envs:
        assert env["ETCD_NAME"] == pod
        assert env["ETCD_INITIAL_CLUSTER"] == expected_cluster
        assert env["ETCD_INITIAL_ADVERTISE_PEER_URLS"] == url(pod, "peer")
        assert env["ETCD_ADVERTISE_CLIENT_URLS"] == url(pod, "client")
        for variable, port in (
            ("ETCD_LISTEN_CLIENT_URLS", "client"),
            ("ETCD_LISTEN_PEER_URLS", "peer"),
            ("ETCD_LISTEN_METRICS_URLS", "metrics"),
        ):
            assert env[variable] == f"http://0.0.0.0:{ports[port]}", variable
        assert env["ETCD_INITIAL_CLUSTER_STATE"] == "new"


def test_every_etcd_variable_is_a_flag_of_the_etcd_binary() -> None:
    flags = etcd_flags()
    assert {"name", "data-dir", "initial-cluster"} <= flags  # the help was read
    variables = [v for v in member_envs()[0][1] if v.startswith("ETCD_")]
    assert len(variables) >= 10
    for variable in variables:
        flag = variable.removeprefix("ETCD_").lower().replace("_", "-")
        assert flag in flags, f"{variable}: etcd has no --{flag}"


# ---------------------------------------------------------------- the HA services
def test_production_ha_services_elect_through_the_etcd_members() -> None:
    """controller_endpoints: each member's name on the headless Service, client port, in
    StatefulSet order; no static master; the registries given (the config requires both)."""
    workload, service = etcd_objects()["StatefulSet"], etcd_objects()["Service"]
    client = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "client")
    expected = tuple(
        f"{ETCD}-{n}.{service['metadata']['name']}:{client}"
        for n in range(workload["spec"]["replicas"])
    )
    ha = [c for c in containers("production") if c.service == "ha"]
    assert {c.config.broker_name for c in ha} == {"broker-a", "broker-b"}
    for c in ha:
        assert c.config.controller_endpoint_list == expected, c.name
        assert not c.config.master_address
        assert c.config.registry_address_list
    for c in containers("production"):
        assert "BOLTMQ_CONTROLLER_ENDPOINTS" not in c.env or c.service == "ha", c.name


def test_base_and_dev_run_no_etcd_and_no_controller() -> None:
    for target in ("base", "dev"):
        assert ETCD not in objects_of(render(target), "StatefulSet")
        assert not any(
            c.config.controller_endpoint_list for c in containers(target) if c.service == "ha"
        )


# ---------------------------------------------------------------- who reaches etcd
def test_etcd_admits_the_broker_groups_to_its_client_port_and_members_to_its_peer_port() -> None:
    objects = render("production")
    policies = list(objects_of(objects, "NetworkPolicy").values())
    workload = etcd_objects()["StatefulSet"]
    namespace = workload["metadata"]["namespace"]
    labels = workload["spec"]["template"]["metadata"]["labels"]
    ports = named_ports(workload)
    pod = Pod(labels, namespace, ports)
    assert selecting(policies, pod)
    pods = {
        name: w["spec"]["template"]["metadata"]["labels"]
        for name, w in objects_of(objects, "StatefulSet").items()
    }
    ha_pods = [
        Peer(pods[c.workload["metadata"]["name"]], namespace)
        for c in containers("production")
        if c.service == "ha"
    ]
    assert len({p.pod_labels["boltmq.io/broker-name"] for p in ha_pods}) == 2
    registry = Peer(pods["boltmq-registry"], namespace)
    member = Peer(labels, namespace)
    strangers = [
        Peer({"app": "orders"}, namespace),
        Peer({"app": "orders"}, "shop"),
        Peer(ha_pods[0].pod_labels, "shop"),  # a group's labels in another namespace
        registry,
        MONITORING,
    ]
    for peer in ha_pods:
        assert admits(policies, pod, ports["client"], peer)
        assert not admits(policies, pod, ports["peer"], peer)
        assert not admits(policies, pod, ports["metrics"], peer)
    assert admits(policies, pod, ports["peer"], member)
    for peer in strangers:
        for name in ("client", "peer"):
            assert not admits(policies, pod, ports[name], peer), f"{name} from {peer}"
    assert admits(policies, pod, ports["metrics"], MONITORING)
    for peer in strangers[:-1]:
        assert not admits(policies, pod, ports["metrics"], peer)
