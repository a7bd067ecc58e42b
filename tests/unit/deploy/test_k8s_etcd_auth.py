"""deploy/k8s: etcd's authentication in the production overlay (``components/etcd``).

The Job ``boltmq-etcd-auth`` runs the real ``boltmq etcd-auth`` command (its args
parsed by the click command, its password files read by the command's own reader
from the Secret ``boltmq-etcd-auth``) against the etcd members the HA services
dial, for the user and prefix they log in with; its pod runs like every BoltMQ
pod. Every HA container logs in as that user with the Secret's ``ha-password``
mounted alone; no other container gets the Secret; etcd's NetworkPolicy admits
the Job's pod to the client port and to nothing else.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from boltmq.cli.etcd_auth import AuthSpec, etcd_auth, parse_endpoints, read_password_file
from tests.unit.deploy.manifests import (
    ManifestError,
    check_runs_like_a_boltmq_pod,
    containers,
    dockerfile_entrypoint,
    objects_of,
    render,
    resolve,
    secret_files,
    stand_in,
)
from tests.unit.deploy.network_policy import Peer, Pod, admits
from tests.unit.deploy.test_k8s_etcd import ETCD, etcd_objects, named_ports

JOB = "boltmq-etcd-auth"
SECRET = "boltmq-etcd-auth"
PASSWORD_FILE = "BOLTMQ_CONTROLLER_PASSWORD_FILE"


def _job() -> dict[str, Any]:
    return objects_of(render("production"), "Job")[JOB]


def _job_command() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(pod spec, container, the click command's params)."""
    pod = _job()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    name, *args = container["command"][1:] + container.get("args", [])
    assert name == etcd_auth.name
    with etcd_auth.make_context(name, list(args)) as ctx:
        return pod, container, dict(ctx.params)


def _ha() -> list[Any]:
    return [c for c in containers("production") if c.service == "ha"]


def test_the_job_runs_boltmq_etcd_auth_for_the_ha_services_user_and_members() -> None:
    job = _job()
    assert job["metadata"]["namespace"] == etcd_objects()["StatefulSet"]["metadata"]["namespace"]
    assert 0 < job["spec"]["backoffLimit"] <= 10 and job["spec"]["activeDeadlineSeconds"] > 0
    pod, container, params = _job_command()
    assert pod["restartPolicy"] == "Never"
    assert container["command"][0] == dockerfile_entrypoint()[0] == "boltmq"
    assert container["image"] == _ha()[0].spec["image"]  # the BoltMQ image, same tag
    assert 0 < params["wait_s"] <= job["spec"]["activeDeadlineSeconds"]
    configs = {c.config for c in _ha()}
    assert {c.broker_name for c in configs} == {"broker-a", "broker-b"}
    for config in configs:
        assert parse_endpoints(params["endpoints"]) == config.controller_endpoint_list
        assert params["user"] == config.controller_username == "boltmq-ha"
        assert params["prefix"] == config.controller_prefix
    files = secret_files(container, pod)
    passwords = {}
    for option, key in (
        ("root_password_file", "root-password"),
        ("user_password_file", "ha-password"),
    ):
        path = str(params[option])
        assert files[path] == (SECRET, key), option
        passwords[key] = read_password_file(Path(stand_in(path, files)), option)
    assert passwords == {k: f"sample-{SECRET}-{k}" for k in ("root-password", "ha-password")}
    AuthSpec(passwords["root-password"], params["user"], passwords["ha-password"], params["prefix"])
    assert "env" not in container and "envFrom" not in container  # passwords: files only


def test_the_job_pod_runs_like_every_boltmq_pod() -> None:
    pod, container, _ = _job_command()
    check_runs_like_a_boltmq_pod(pod, objects_of(render("production"), "ServiceAccount"))
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["defaultMode"] == 0o440  # read by the pod's group
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def test_every_ha_container_logs_in_with_the_secret_s_ha_password_alone() -> None:
    ha = _ha()
    assert {(c.workload["metadata"]["name"], c.ordinal) for c in ha} == {
        (f"boltmq-broker-{g}", n) for g in "ab" for n in (0, 1)
    }
    for c in ha:
        files = secret_files(c.spec, c.pod)
        assert files[c.env[PASSWORD_FILE]] == (SECRET, "ha-password"), c.pod_name
        assert (SECRET, "root-password") not in files.values(), c.pod_name
        assert c.config.controller_credentials() == (
            "boltmq-ha",
            f"sample-{SECRET}-ha-password",
        )
    for c in containers("production"):
        if c.service != "ha":
            assert SECRET not in {s for s, _ in secret_files(c.spec, c.pod).values()}, c.name
            assert PASSWORD_FILE not in c.env, c.name
    for target in ("base", "dev"):
        assert not any(
            c.config.controller_username for c in containers(target) if c.service == "ha"
        )
        assert JOB not in objects_of(render(target), "Job")


def test_a_password_file_outside_the_mounted_secret_is_caught() -> None:
    c = _ha()[0]
    spec = copy.deepcopy(c.spec)
    spec["env"] = [*spec.get("env", []), {"name": PASSWORD_FILE, "value": "/etc/boltmq/pw"}]
    config_maps = objects_of(render("production"), "ConfigMap")
    with pytest.raises(ManifestError, match="no file of a Secret"):
        resolve(spec, c.workload, config_maps, c.ordinal)
    spec["volumeMounts"] = [m for m in spec["volumeMounts"] if m["name"] != "etcd-auth"]
    spec["env"] = spec["env"][:-1]
    with pytest.raises(ManifestError, match="no file of a Secret"):
        resolve(spec, c.workload, config_maps, c.ordinal)


def test_etcd_admits_the_job_to_its_client_port_and_nowhere_else() -> None:
    objects = render("production")
    policies = list(objects_of(objects, "NetworkPolicy").values())
    workload = etcd_objects()["StatefulSet"]
    namespace = workload["metadata"]["namespace"]
    ports = named_ports(workload)
    etcd = Pod(workload["spec"]["template"]["metadata"]["labels"], namespace, ports)
    job_labels = _job()["spec"]["template"]["metadata"]["labels"]
    job = Peer(job_labels, namespace)
    assert admits(policies, etcd, ports["client"], job)
    assert not admits(policies, etcd, ports["peer"], job)
    assert not admits(policies, etcd, ports["metrics"], job)
    assert not admits(policies, etcd, ports["client"], Peer(job_labels, "shop"))
    other_boltmq = {k: v for k, v in job_labels.items() if k != "app.kubernetes.io/component"}
    assert not admits(policies, etcd, ports["client"], Peer(other_boltmq, namespace))
    (policy,) = [p for p in policies if p["metadata"]["name"] == ETCD]
    client_rules = [r for r in policy["spec"]["ingress"] if {"port": "client"} in r["ports"]]
    (rule,) = client_rules
    assert len(rule["from"]) == 2  # the broker groups' pods and the Job's, nothing more
