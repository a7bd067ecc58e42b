"""StatefulSetMember: a broker-group member's settings from its Kubernetes pod name.

In ``deploy/k8s`` a broker group is one StatefulSet; the pod with ordinal N
(named ``<statefulset>-<N>``) runs member N of the group, exactly as
:class:`boltmq.cli.dev.local_cluster.LocalCluster` starts member N on one machine:

- the store starts as the configured ``broker_role`` (ASYNC_MASTER or
  SYNC_MASTER) when N is 0 and as ``SLAVE`` otherwise;
- the broker registers with ``broker_id`` N (while its store is the master it
  registers as 0 anyway: the store, not the flag, decides; see
  ``services/broker/store/store_role.py``).

Every pod of a StatefulSet shares one pod template, so these two values
cannot be written into the manifest; ``boltmq serve store|broker
--statefulset-pod $(POD_NAME)`` derives them from the pod name that the
downward API hands the container. Rejected: a shell wrapper computing them
with ``${POD_NAME##*-}`` (untested string surgery in YAML), and the
``apps.kubernetes.io/pod-index`` label (gives the broker id, but the store's
role still needs a condition on it).

Both values only seed a store that has never run: once a store has been
promoted or demoted, ``<root>/ha/role.json`` holds its role and id and wins
over the configuration at every restart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

REPLICA_ROLE = "SLAVE"
POD_NAME_PATTERN = re.compile(
    r"^(?P<set>[a-z0-9]([-a-z0-9]*[a-z0-9])?)-(?P<ordinal>0|[1-9]\d{0,8})$"
)
"""A StatefulSet pod name: the set's DNS-label name, a dash and the ordinal (no leading zero)."""
POD_NAME_MAX_CHARS = 63
"""Pod names of a StatefulSet are DNS labels (the pod's hostname)."""
MEMBER_SETTINGS = {"store": ("broker_role",), "broker": ("broker_id",)}
"""Settings each service derives from the ordinal; other services take no ``--statefulset-pod``."""


class InvalidPodName(ValueError):
    """A ``--statefulset-pod`` value that is not ``<statefulset>-<ordinal>``, or misused."""


def pod_ordinal(pod_name: str) -> int:
    """The ordinal N of StatefulSet pod ``<statefulset>-<N>``; InvalidPodName otherwise."""
    match = POD_NAME_PATTERN.fullmatch(pod_name)
    if len(pod_name) > POD_NAME_MAX_CHARS or match is None:
        raise InvalidPodName(
            f"--statefulset-pod expects a StatefulSet pod name like "
            f"'boltmq-broker-a-0' (lowercase DNS label, '-', ordinal), "
            f"got {pod_name!r}"
        )
    return int(match["ordinal"])


def member_settings(
    service: str, pod_name: str, explicit: Mapping[str, object] | None = None
) -> dict[str, object]:
    """Settings that make ``service`` member N of its broker group (N from ``pod_name``).

    ``explicit`` holds the settings given with ``--set``: naming one of the
    derived settings there too is a contradiction and an error, not a silent
    override either way.
    """
    if service not in MEMBER_SETTINGS:
        raise InvalidPodName(
            f"--statefulset-pod applies to {' and '.join(MEMBER_SETTINGS)}, not to {service}"
        )
    clash = [name for name in MEMBER_SETTINGS[service] if name in (explicit or {})]
    if clash:
        raise InvalidPodName(f"--statefulset-pod derives {', '.join(clash)}; do not also --set it")
    ordinal = pod_ordinal(pod_name)
    if service == "broker":
        return {"broker_id": ordinal}
    return {} if ordinal == 0 else {"broker_role": REPLICA_ROLE}
