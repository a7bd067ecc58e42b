"""Kubernetes NetworkPolicy ingress rules, evaluated the way the API defines them.

:func:`admits` answers "may ``peer`` open a TCP connection to ``port`` of a pod
with these labels in this namespace?" from the rendered policies:

- a pod no Ingress policy selects admits everything;
- otherwise a connection is admitted when one rule of one selecting policy
  matches both its port (a number, a ``port``..``endPort`` range, or a
  container port's name; no ``ports``: every port) and its peer (no ``from``:
  every peer; a ``podSelector`` alone: pods of the policy's namespace; a
  ``namespaceSelector``: pods of the namespaces it selects, narrowed by a
  ``podSelector`` beside it);
- an ``ipBlock`` is taken to match every peer (over-approximated: a test that a
  port is closed then fails rather than passes on an address range);
- ``matchExpressions`` are not evaluated: a selector holding one is an error.

Traffic from the pod's own node (the kubelet's probes) is always allowed by
Kubernetes whatever the policies say, so it is not a peer here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.unit.deploy.manifests import ManifestError

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server puts on every namespace: its name."""


@dataclass(frozen=True)
class Peer:
    """A caller: a pod's labels and namespace (whose labels include its name)."""

    pod_labels: Mapping[str, str]
    namespace: str
    namespace_labels: Mapping[str, str] = field(default_factory=dict)

    def labels_of_namespace(self) -> dict[str, str]:
        return {**self.namespace_labels, NAMESPACE_NAME_LABEL: self.namespace}


@dataclass(frozen=True)
class Pod:
    """A destination: a pod template's labels, its namespace and its named container ports."""

    labels: Mapping[str, str]
    namespace: str
    named_ports: Mapping[str, int]


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector (``matchLabels`` only) against ``labels``; ``{}`` selects all."""
    if selector.get("matchExpressions"):
        raise ManifestError("matchExpressions are not evaluated by the tests: use matchLabels")
    return dict(selector.get("matchLabels", {})).items() <= dict(labels).items()


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("namespace", "default"))


def _port_matches(ports: list[dict[str, Any]] | None, port: int, pod: Pod) -> bool:
    if not ports:
        return True
    for entry in ports:
        if entry.get("protocol", "TCP") != "TCP":
            continue
        wanted = entry.get("port")
        if wanted is None:
            return True
        if isinstance(wanted, str):
            if pod.named_ports.get(wanted) == port:
                return True
        elif wanted <= port <= entry.get("endPort", wanted):
            return True
    return False


def _peer_matches(sources: list[dict[str, Any]] | None, namespace: str, peer: Peer) -> bool:
    if not sources:
        return True
    for source in sources:
        if "ipBlock" in source:
            return True
        if "namespaceSelector" in source:
            in_namespace = selects(source["namespaceSelector"], peer.labels_of_namespace())
        else:
            in_namespace = peer.namespace == namespace
        if in_namespace and selects(source.get("podSelector", {}), peer.pod_labels):
            return True
    return False


def selecting(policies: Iterable[Mapping[str, Any]], pod: Pod) -> list[Mapping[str, Any]]:
    """The Ingress policies that select ``pod``."""
    return [
        p
        for p in policies
        if namespace_of(p) == pod.namespace
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and selects(p["spec"]["podSelector"], pod.labels)
    ]


def admits(policies: Iterable[Mapping[str, Any]], pod: Pod, port: int, peer: Peer) -> bool:
    """Whether ``peer`` may connect to ``port`` of ``pod`` under ``policies``."""
    chosen = selecting(policies, pod)
    if not chosen:
        return True
    return any(
        _port_matches(rule.get("ports"), port, pod)
        and _peer_matches(rule.get("from"), namespace_of(policy), peer)
        for policy in chosen
        for rule in policy["spec"].get("ingress", [])
    )
