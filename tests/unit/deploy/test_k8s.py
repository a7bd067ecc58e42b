"""deploy/k8s: every target renders, validates against the Kubernetes schemas, and runs.

"Runs" as far as it can be checked without a cluster: each container's args
parse with the real ``boltmq serve`` command, its environment builds a valid
service config (every ``BOLTMQ_*`` name a field of that config), and the
probes, ports, addresses and security settings agree with that config
(helpers in :mod:`tests.unit.deploy.manifests`).
"""

from __future__ import annotations

import copy
import re
from pathlib import PurePosixPath
from typing import Any

import click
import kubernetes_validate
import pytest

from boltmq.cli.dev.statefulset import REPLICA_ROLE
from boltmq.kernel.config import ENV_PREFIX
from boltmq.kernel.runtime import LIVENESS_SERVICE
from tests.unit.deploy.manifests import (
    TARGETS,
    Container,
    ManifestError,
    boltmq_workloads,
    check_runs_like_a_boltmq_pod,
    container_env,
    containers,
    dockerfile_entrypoint,
    objects_of,
    parse_serve,
    render,
)

MIN_KUBERNETES = "1.30"
"""Oldest Kubernetes the base and dev overlay are validated against (native gRPC probes GA)."""
LATEST_KUBERNETES = kubernetes_validate.utils.latest_version()
SCHEMA_VERSIONS = {
    "base": (MIN_KUBERNETES, LATEST_KUBERNETES),
    "dev": (MIN_KUBERNETES, LATEST_KUBERNETES),
    "production": (MIN_KUBERNETES, LATEST_KUBERNETES),
}
WILDCARD_HOST = "0.0.0.0"
LOOPBACK_HOST = "127.0.0.1"
LOOPBACK_SERVICES = frozenset({"store"})
"""Bound to loopback: only the other containers of its own pod call it."""
MASTER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")
BROKER_NAME_LABEL = "boltmq.io/broker-name"
_QUANTITY = re.compile(r"^(\d+)(Mi|Gi|Ti)$")
_QUANTITY_MIB = {"Mi": 1, "Gi": 1024, "Ti": 1024 * 1024}


def _mib(quantity: str) -> int:
    match = _QUANTITY.match(quantity)
    assert match, f"storage {quantity!r}: use Mi, Gi or Ti"
    return int(match[1]) * _QUANTITY_MIB[match[2]]


def _workloads(target: str) -> dict[str, dict[str, Any]]:
    objects = render(target)
    return {**objects_of(objects, "StatefulSet"), **objects_of(objects, "Deployment")}


def _validate(obj: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(obj, version, strict=True)


@pytest.fixture(params=sorted(TARGETS))
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---------------------------------------------------------------- schemas
def test_every_object_validates_against_the_kubernetes_schemas(target: str) -> None:
    objects = render(target)
    assert {o["kind"] for o in objects} >= {
        "StatefulSet",
        "Service",
        "ConfigMap",
        "ServiceAccount",
        "PodDisruptionBudget",
    }
    for version in SCHEMA_VERSIONS[target]:
        for obj in objects:
            _validate(obj, version)


def test_schema_validation_rejects_a_broken_object() -> None:
    workload = copy.deepcopy(_workloads("base")["boltmq-broker-a"])
    _validate(workload, LATEST_KUBERNETES)
    container = workload["spec"]["template"]["spec"]["containers"][0]
    container["ports"][0]["containerPort"] = "store"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(workload, LATEST_KUBERNETES)
    del container["ports"]
    container["readinessProbe"]["grpc"]["sevice"] = ""  # strict: unknown fields are errors
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(workload, LATEST_KUBERNETES)


# ---------------------------------------------------------------- commands and settings
def test_every_container_runs_boltmq_serve_with_a_valid_config(target: str) -> None:
    resolved = containers(target)
    assert {c.service for c in resolved} == {"registry", "store", "ha", "broker", "mqtt"}
    for c in resolved:
        expected = LOOPBACK_HOST if c.service in LOOPBACK_SERVICES else WILDCARD_HOST
        assert c.config.listen_host == expected, c.name
        unknown = {
            name
            for name in c.env
            if name.startswith(ENV_PREFIX)
            and name.removeprefix(ENV_PREFIX).lower() not in c.config_fields
        }
        assert not unknown, (
            f"{c.pod_name}/{c.name}: {sorted(unknown)} are not settings of "
            f"{type(c.config).__name__}"
        )


def test_the_image_entrypoint_is_boltmq_serve() -> None:
    assert dockerfile_entrypoint() == ["boltmq", "serve"]


def test_args_are_parsed_by_the_real_cli() -> None:
    """A flag or service the CLI does not have fails the parse the tests rely on."""
    good = [
        "serve",
        "store",
        "--host",
        WILDCARD_HOST,
        "--port",
        "10913",
        "--statefulset-pod",
        "boltmq-broker-a-1",
    ]
    assert parse_serve(good)["statefulset_pod"] == "boltmq-broker-a-1"
    with pytest.raises(click.NoSuchOption):
        parse_serve([*good, "--replicas", "2"])
    with pytest.raises(click.BadParameter):
        parse_serve(["serve", "nameserver"])
    with pytest.raises(ManifestError):
        parse_serve(["server", "store"])


def test_unknown_variable_references_and_config_maps_are_caught() -> None:
    container = {
        "name": "x",
        "envFrom": [],
        "env": [{"name": "BOLTMQ_ADVERTISED_ADDRESS", "value": "$(POD_NAME).svc:10911"}],
    }
    with pytest.raises(ManifestError, match=r"\$\(POD_NAME\)"):
        container_env(container, {}, "boltmq-broker-a-0", "boltmq")
    container = {"name": "x", "envFrom": [{"configMapRef": {"name": "boltmq-nothing"}}]}
    with pytest.raises(ManifestError, match="boltmq-nothing"):
        container_env(container, {}, "boltmq-broker-a-0", "boltmq")


def test_probes_ask_the_plaintext_health_port(target: str) -> None:
    """Every container has a health port, and the kubelet's gRPC probes use it.

    The kubelet probes in plaintext and without a client certificate, so a probe
    of a TLS (or mutual TLS) service port would fail; ``health_port`` is a
    plaintext listener with only the health service (boltmq.kernel.runtime).
    """
    for c in containers(target):
        ports = {p["containerPort"] for p in c.spec["ports"]}
        # A loopback port is no container port; probes and scrapes come to the pod's address.
        assert (c.config.listen_port in ports) == (c.config.listen_host != LOOPBACK_HOST)
        assert (c.config.health_host or c.config.listen_host) == WILDCARD_HOST, c.name
        if c.config.metrics_port:
            assert c.config.metrics_port in ports, c.name
            assert (c.config.metrics_host or c.config.listen_host) == WILDCARD_HOST, c.name
        assert c.config.health_port, f"{c.pod_name}/{c.name}: no BOLTMQ_HEALTH_PORT"
        assert c.config.health_port in ports, c.name
        assert c.config.health_port not in (c.config.listen_port, c.config.metrics_port)
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            grpc = c.spec[kind]["grpc"]
            assert grpc["port"] == c.config.health_port, f"{c.name} {kind}"
            expected = "" if kind == "readinessProbe" else LIVENESS_SERVICE
            assert grpc.get("service", "") == expected, f"{c.name} {kind}"
            assert "mode" not in grpc, f"{c.name} {kind}: the health port is plaintext"


def test_container_ports_of_a_pod_do_not_collide(target: str) -> None:
    for workload in _workloads(target).values():
        seen: dict[int, str] = {}
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for port in container["ports"]:
                number = port["containerPort"]
                assert number not in seen, (
                    f"{container['name']} and {seen[number]} both use port {number}"
                )
                seen[number] = container["name"]


# ---------------------------------------------------------------- the broker group
def _group_containers(target: str) -> dict[tuple[str, int], dict[str, Container]]:
    pods: dict[tuple[str, int], dict[str, Container]] = {}
    for c in containers(target):
        pods.setdefault((c.workload["metadata"]["name"], c.ordinal), {})[c.service] = c
    return {key: pod for key, pod in pods.items() if "store" in pod}


def test_a_broker_group_pod_is_one_member_of_the_group(target: str) -> None:
    """Store, HA and broker as LocalCluster runs member N: broker id N, replicas SLAVE."""
    groups = _group_containers(target)
    assert groups
    for (_, ordinal), pod in groups.items():
        store, ha, broker = pod["store"], pod["ha"], pod["broker"]
        local_store = f"127.0.0.1:{store.config.listen_port}"
        assert ha.config.store_address == broker.config.store_address == local_store
        assert broker.config.broker_id == ordinal
        if ordinal == 0:
            assert store.config.broker_role in MASTER_ROLES
        else:
            assert store.config.broker_role == REPLICA_ROLE
        assert ha.config.broker_name == broker.config.broker_name
        assert ha.config.cluster_name == broker.config.cluster_name
        assert broker.config.ha_address == ha.config.advertised_address
        assert store.config.store_host == store.env["BOLTMQ_STORE_HOST"]
        assert store.config.store_port == broker.config.listen_port


def test_advertised_addresses_are_the_pods_stable_dns_names(target: str) -> None:
    services = objects_of(render(target), "Service")
    for c in containers(target):
        if c.service not in ("ha", "broker"):
            continue
        service_name = c.workload["spec"]["serviceName"]
        service = services[service_name]
        assert service["spec"]["clusterIP"] == "None", service_name
        host = f"{c.pod_name}.{service_name}.{c.namespace}.svc"
        assert c.config.advertised_address == f"{host}:{c.config.listen_port}"
        # The pod's name resolves whatever ports the headless Service lists; the HA
        # port is in none (only the group's own pods may dial it: NetworkPolicy).
        assert c.config.listen_port in {p["containerPort"] for p in c.spec["ports"]}
        in_service = c.config.listen_port in {p["port"] for p in service["spec"]["ports"]}
        assert in_service == (c.service == "broker"), c.name


def test_brokers_and_ha_register_with_every_registry_pod(target: str) -> None:
    """Registries share nothing, so each one must be named (not a load-balanced Service)."""
    registries = [c for c in containers(target) if c.service == "registry"]
    expected = {
        f"{c.pod_name}.{c.workload['spec']['serviceName']}:{c.config.listen_port}"
        for c in registries
    }
    assert len(expected) == _workloads(target)["boltmq-registry"]["spec"]["replicas"]
    for c in containers(target):
        if c.service in ("ha", "broker"):
            assert set(c.config.registry_address_list) == expected, c.name


def test_store_data_is_on_the_pods_volume_claim(target: str) -> None:
    for c in containers(target):
        claims = {t["metadata"]["name"] for t in c.workload["spec"].get("volumeClaimTemplates", [])}
        if c.service != "store":
            assert not claims & set(c.mounts().values()), f"{c.name} mounts the store's data"
            continue
        root = PurePosixPath(str(c.config.root_dir))
        volumes = [name for path, name in c.mounts().items() if root.is_relative_to(path)]
        assert volumes and volumes[0] in claims, f"{root} is not on a volumeClaimTemplate"


def test_services_and_budgets_select_pods_and_ports_that_exist(target: str) -> None:
    objects = render(target)
    workloads = {**_workloads(target), **objects_of(objects, "Deployment")}  # the console
    templates = [w["spec"]["template"] for w in workloads.values()]

    def selected(selector: dict[str, str]) -> list[dict[str, Any]]:
        return [t for t in templates if selector.items() <= t["metadata"]["labels"].items()]

    for service in objects_of(objects, "Service").values():
        pods = selected(service["spec"]["selector"])
        assert pods, service["metadata"]["name"]
        names = {p["name"] for c in pods[0]["spec"]["containers"] for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in names, service["metadata"]["name"]
    budgets = objects_of(objects, "PodDisruptionBudget").values()
    budgeted = [
        w
        for w in _workloads(target).values()
        if w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        != "console"
    ]
    assert len(budgets) == len(budgeted)  # not the console's one-pod Deployment
    for budget in budgets:
        assert selected(budget["spec"]["selector"]["matchLabels"]), budget["metadata"]["name"]


# ---------------------------------------------------------------- security and resources
def test_pods_run_non_root_with_read_only_root_filesystems(target: str) -> None:
    accounts = objects_of(render(target), "ServiceAccount")
    for workload in boltmq_workloads(render(target)).values():  # etcd: test_k8s_etcd.py
        check_runs_like_a_boltmq_pod(workload["spec"]["template"]["spec"], accounts)


def test_every_container_has_requests_and_limits(target: str) -> None:
    for workload in _workloads(target).values():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for bound in ("requests", "limits"):
                assert set(container["resources"][bound]) == {"cpu", "memory"}, (
                    f"{container['name']} {bound}"
                )


def test_tls_files_are_mounted_from_a_secret(target: str) -> None:
    for c in containers(target):
        volumes = {v["name"]: v for v in c.pod.get("volumes", [])}
        for name in (
            "tls_cert_file",
            "tls_key_file",
            "tls_ca_file",
            "tls_client_cert_file",
            "tls_client_key_file",
            "tls_client_ca_file",
            "tls_internal_ca_file",
        ):
            path = getattr(c.config, name)
            if not path:
                continue
            mounts = [v for p, v in c.mounts().items() if PurePosixPath(path).is_relative_to(p)]
            assert mounts and "secret" in volumes[mounts[0]], f"{c.name}: {name} {path}"


# ---------------------------------------------------------------- overlays
def test_dev_runs_single_replicas_on_small_volumes() -> None:
    base = _workloads("base")["boltmq-broker-a"]
    base_mib = _mib(
        base["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    )
    for workload in _workloads("dev").values():
        assert workload["spec"]["replicas"] == 1
        for claim in workload["spec"].get("volumeClaimTemplates", []):
            assert _mib(claim["spec"]["resources"]["requests"]["storage"]) < base_mib


def test_production_is_a_sync_master_with_a_replica_tls_and_telemetry() -> None:
    workloads = _workloads("production")
    assert workloads["boltmq-broker-a"]["spec"]["replicas"] == 2
    assert workloads["boltmq-registry"]["spec"]["replicas"] == 2
    for c in containers("production"):
        if c.service == "store" and c.ordinal == 0:
            assert c.config.broker_role == "SYNC_MASTER"
        assert c.config.tls_cert_file and c.config.tls_key_file and c.config.tls_ca_file
        assert c.env["OTEL_EXPORTER_OTLP_ENDPOINT"].startswith("http")
        assert c.env["OTEL_SERVICE_NAME"] == f"boltmq-{c.service}"
    broker_pod = workloads["boltmq-broker-a"]["spec"]["template"]["spec"]
    assert "boltmq-acl" in {v.get("secret", {}).get("secretName") for v in broker_pod["volumes"]}


def test_production_components_have_their_own_certificates_and_check_internal_callers() -> None:
    """Store, HA and registry believe only the internal CA's component certificates; every
    container presents its own (one Secret per component), so a store cannot pass for its
    broker and an application CA never issues a component's identity."""
    secrets: dict[tuple[str, str], str] = {}
    for c in containers("production"):
        volumes = {v["name"]: v for v in c.pod.get("volumes", [])}
        tls_volume = c.mounts()[str(PurePosixPath(c.config.tls_cert_file).parent)]
        secret = volumes[tls_volume]["secret"]["secretName"]
        component = (c.workload["metadata"]["name"], c.service)
        assert secrets.setdefault(component, secret) == secret, c.name
        if c.service == "mqtt":  # an application of the cluster, with a Secret of its own
            assert secret == "boltmq-tls-mqtt", c.name
        elif c.service != "registry":  # a group's Secret names its group
            group = c.workload["spec"]["template"]["metadata"]["labels"][BROKER_NAME_LABEL]
            assert secret == f"boltmq-tls-{group}-{c.service}", c.name
        assert c.config.tls_client_cert_file == c.config.tls_cert_file, c.name
        if c.service in ("store", "ha", "registry"):
            assert c.config.tls_internal_ca_file == c.config.tls_ca_file, c.name
            assert not c.config.allow_unauthenticated_internal
        if c.service == "registry":
            assert c.config.tls_client_ca_file
            assert (
                PurePosixPath(c.config.tls_client_ca_file).parent
                != PurePosixPath(c.config.tls_internal_ca_file).parent
            )  # the application CA is another Secret
    groups = {name for name, service in secrets if service == "store"}
    assert len(groups) == 2
    assert len(set(secrets.values())) == len(secrets) == 2 + 3 * len(groups), secrets


def test_production_brokers_enforce_the_acl_and_sign_their_own_metadata_copies() -> None:
    """Every production broker has admin credentials from the ACL Secret.

    A replica's broker copies its master's metadata through the ACL; after a
    failover any ordinal may be that replica, so ordinal 0 needs them too.
    """
    brokers = [c for c in containers("production") if c.service == "broker"]
    assert {c.ordinal for c in brokers} == {0, 1}
    for c in brokers:
        assert c.config.acl_enable and c.config.acl_file == "/etc/boltmq/acl/acl.json"
        refs = {
            item["name"]: item["valueFrom"]["secretKeyRef"]
            for item in c.spec["env"]
            if "secretKeyRef" in item.get("valueFrom", {})
        }
        assert refs == {
            "BOLTMQ_ACCESS_KEY": {"name": "boltmq-acl", "key": "broker-access-key"},
            "BOLTMQ_SECRET_KEY": {"name": "boltmq-acl", "key": "broker-secret-key"},
        }
        assert c.config.access_key == "sample-boltmq-acl-broker-access-key"
        assert c.mounts()["/etc/boltmq/acl"] == "acl"
    acl_volume = next(v for v in brokers[0].pod["volumes"] if v["name"] == "acl")
    # The credentials are env only: the mounted directory holds the document alone.
    assert acl_volume["secret"]["items"] == [{"key": "acl.json", "path": "acl.json"}]
    for target in ("base", "dev"):
        assert not any(
            c.config.acl_enable or c.config.access_key
            for c in containers(target)
            if c.service == "broker"
        )


def test_production_brokers_create_no_topic_or_group_on_an_application_s_call() -> None:
    """An application naming new topics or groups would make the broker rewrite its
    metadata and re-register for each: in production operators create them."""
    brokers = [c for c in containers("production") if c.service == "broker"]
    assert brokers
    for c in brokers:
        assert not c.config.auto_create_topic_enable
        assert not c.config.auto_create_subscription_group
        assert c.config.auto_create_max_per_call and c.config.auto_create_rate_per_s
