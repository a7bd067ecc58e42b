"""deploy/k8s: the broker groups, one StatefulSet each from one component.

The base renders broker-a and broker-b from ``base/broker-group`` (a kustomize
Component) named by ``base/groups/<group>``: each group's StatefulSet, headless
Service, PodDisruptionBudget and pod anti-affinity must select exactly the pods
of that group, and its containers must run as that group (``broker_name`` from
the pod's label, advertised addresses on the group's own headless Service).
Adding a group the way docs/deploy.md says (a third directory beside the two)
is rendered and checked the same way.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.manifests import (
    K8S_DIR,
    Container,
    boltmq_workloads,
    containers,
    containers_of,
    objects_of,
    render,
    render_dir,
)

BROKER_NAME_LABEL = "boltmq.io/broker-name"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
BASE_GROUPS = ("broker-a", "broker-b")


@pytest.fixture(params=["base", "dev", "production"])
def target(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _selects(selector: dict[str, str], template: dict[str, Any]) -> bool:
    return selector.items() <= template["metadata"]["labels"].items()


def groups_of(objects: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    """Broker-group StatefulSets by their group label."""
    return {
        w["spec"]["template"]["metadata"]["labels"][BROKER_NAME_LABEL]: w
        for w in boltmq_workloads(objects).values()
        if BROKER_NAME_LABEL in w["spec"]["template"]["metadata"]["labels"]
    }


def check_groups(objects: tuple[dict[str, Any], ...], expected: tuple[str, ...]) -> None:
    """Every group of ``objects`` is selected by exactly its own Service, budget, anti-affinity."""
    groups = groups_of(objects)
    assert sorted(groups) == sorted(expected)
    templates = {
        name: w["spec"]["template"] for name, w in objects_of(objects, "StatefulSet").items()
    }
    services = objects_of(objects, "Service")
    budgets = objects_of(objects, "PodDisruptionBudget").values()
    for group, workload in groups.items():
        name = workload["metadata"]["name"]
        assert name == f"boltmq-{group}"
        assert workload["spec"]["serviceName"] == name
        own = {name}

        def selected(selector: dict[str, str]) -> set[str]:
            return {n for n, template in templates.items() if _selects(selector, template)}

        assert selected(workload["spec"]["selector"]["matchLabels"]) == own
        assert selected(services[name]["spec"]["selector"]) == own
        own_budgets = [b for b in budgets if selected(b["spec"]["selector"]["matchLabels"]) & own]
        assert len(own_budgets) == 1, f"{name}: {len(own_budgets)} budgets select its pods"
        assert own_budgets[0]["spec"]["maxUnavailable"] == 1
        budget_pods = selected(own_budgets[0]["spec"]["selector"]["matchLabels"])
        assert budget_pods == own, f"{name}: its budget selects {sorted(budget_pods)}"
        terms = workload["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert [t["topologyKey"] for t in terms] == [HOSTNAME_TOPOLOGY], name
        assert selected(terms[0]["labelSelector"]["matchLabels"]) == own, name


def check_members(members: list[Container]) -> None:
    """Each group's HA and broker run as that group, on its own headless Service."""
    for c in members:
        if c.service not in ("ha", "broker"):
            continue
        group = c.workload["spec"]["template"]["metadata"]["labels"][BROKER_NAME_LABEL]
        assert c.config.broker_name == group, c.name
        service = c.workload["spec"]["serviceName"]
        assert service == f"boltmq-{group}"
        assert c.config.advertised_address.startswith(f"{c.pod_name}.{service}."), c.name


def test_the_base_runs_two_groups_each_on_its_own_statefulset(target: str) -> None:
    check_groups(render(target), BASE_GROUPS)
    check_members(list(containers(target)))
    names = {
        c.config.broker_name for c in containers(target) if c.service == "ha" and c.ordinal == 0
    }
    assert names == set(BASE_GROUPS)


def test_members_are_required_on_different_nodes_in_every_target(target: str) -> None:
    """Required, not preferred (docs/deploy.md): a master and its replica never share a
    node. The dev overlay runs one member per group, so a one-node cluster still fits."""
    for workload in groups_of(render(target)).values():
        affinity = workload["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        assert set(affinity) == {"requiredDuringSchedulingIgnoredDuringExecution"}
        if target == "dev":
            assert workload["spec"]["replicas"] == 1


def test_a_selector_naming_no_group_would_be_caught() -> None:
    """The check itself: a budget selecting every group's pods is refused."""
    objects = [dict(o) for o in render("base")]
    for obj in objects:
        if obj["kind"] == "PodDisruptionBudget" and obj["metadata"]["name"] == "boltmq-broker-a":
            labels = dict(obj["spec"]["selector"]["matchLabels"])
            del labels[BROKER_NAME_LABEL]
            obj["spec"] = {**obj["spec"], "selector": {"matchLabels": labels}}
    with pytest.raises(AssertionError, match="budget"):
        check_groups(tuple(objects), BASE_GROUPS)


def test_a_third_group_is_one_more_directory(tmp_path: Path) -> None:
    """docs/deploy.md, step 5, on a copy of deploy/k8s: copy groups/broker-b to
    groups/broker-c with its two values changed, list it in the base's resources."""
    tree = tmp_path / "k8s"
    shutil.copytree(K8S_DIR, tree)
    groups = tree / "base" / "groups"
    shutil.copytree(groups / "broker-b", groups / "broker-c")
    kustomization = groups / "broker-c" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace("broker-b", "broker-c"))
    base = tree / "base" / "kustomization.yaml"
    text = base.read_text()
    assert text.count("  - groups/broker-b\n") == 1
    base.write_text(
        text.replace("  - groups/broker-b\n", "  - groups/broker-b\n  - groups/broker-c\n")
    )
    objects = render_dir(tree / "base")
    check_groups(objects, (*BASE_GROUPS, "broker-c"))
    check_members(list(containers_of(objects)))
