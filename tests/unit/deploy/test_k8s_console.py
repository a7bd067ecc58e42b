"""The web console's Deployment, Service and NetworkPolicy (deploy/k8s/base/console.yaml).

It runs ``boltmq console`` (the real command parses its arguments), reaches the
registries' Service, runs like every BoltMQ pod (non-root, read-only root, no
token, bounded resources), admits its HTTP port from pods of its namespace only,
and is off (0 replicas) in the production overlay.
"""

from __future__ import annotations

from typing import Any

import click
import pytest

from boltmq.cli.console import console
from tests.unit.deploy.manifests import TARGETS, final_stage_user, objects_of, render
from tests.unit.deploy.network_policy import Peer, Pod, admits, namespace_of, selecting

NAME = "boltmq-console"


def _deployment(target: str) -> dict[str, Any]:
    return objects_of(render(target), "Deployment")[NAME]


@pytest.fixture(params=sorted(TARGETS))
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_console_runs_boltmq_console_against_the_registry_service(target: str) -> None:
    objects = render(target)
    pod = _deployment(target)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["boltmq", "console"]
    context = console.make_context("console", list(container["args"]))
    assert (context.params["host"], context.params["port"]) == ("0.0.0.0", 8080)
    env = {e["name"]: e["value"] for e in container["env"]}
    host, port = env["BOLTMQ_REGISTRY"].split(":")
    registry = objects_of(objects, "Service")[host]
    assert int(port) in {p["port"] for p in registry["spec"]["ports"]}
    assert not [e for e in env if e in ("BOLTMQ_ACCESS_KEY", "BOLTMQ_SECRET_KEY")]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8080}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/login", "port": "http"}
    service = objects_of(objects, "Service")[NAME]
    labels = _deployment(target)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http"}]


def test_the_console_refuses_unknown_arguments() -> None:
    with pytest.raises(click.UsageError):
        console.make_context("console", ["--hots", "0.0.0.0"])


def test_the_console_pod_runs_like_every_boltmq_pod(target: str) -> None:
    pod = _deployment(target)["spec"]["template"]["spec"]
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True
    assert (context["runAsUser"], context["runAsGroup"]) == final_stage_user()
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["serviceAccountName"] in objects_of(render(target), "ServiceAccount")
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    for bound in ("requests", "limits"):
        assert set(container["resources"][bound]) == {"cpu", "memory"}
    tmp = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/tmp"]
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}[tmp]


@pytest.mark.parametrize("target", ["base", "production"])
def test_only_pods_of_the_namespace_reach_the_console(target: str) -> None:
    objects = render(target)
    deployment = objects_of(objects, "Deployment")[NAME]
    namespace = namespace_of(deployment)
    pod = Pod(deployment["spec"]["template"]["metadata"]["labels"], namespace, {"http": 8080})
    policies = list(objects_of(objects, "NetworkPolicy").values())
    assert selecting(policies, pod)
    assert admits(policies, pod, 8080, Peer({"app": "operator-shell"}, namespace))
    assert not admits(policies, pod, 8080, Peer({"app": "orders"}, "shop"))
    assert not admits(policies, pod, 9100, Peer({"app": "operator-shell"}, namespace))


def test_production_runs_no_console_unless_turned_on() -> None:
    assert _deployment("production")["spec"]["replicas"] == 0
    assert _deployment("base")["spec"]["replicas"] == 1
    assert _deployment("dev")["spec"]["replicas"] == 1
