"""Network namespaces for the partition suite: every "host" its own namespace on one bridge.

:class:`Network` makes, for one test run:

- a hub namespace ``<tag>hub`` holding a bridge ``br0``;
- one namespace ``<tag>-<host>`` per host, joined to the bridge by a veth pair
  (``eth0`` inside the host, ``<tag><n>`` in the hub), with the address
  ``10.<a>.<b>.<n + 2>/24``: a private subnet that exists only inside these
  namespaces (nothing is routed to or from the machine's own namespaces).

``tag`` is unique per run (``bq`` + 6 random hex digits), so two runs never share
a name. :meth:`Network.close` deletes every namespace the run made (their veths
and the bridge go with them); the suite's fixture calls it on every exit path,
and it runs at interpreter exit too.

Faults, each undone by :meth:`Network.heal`:

- :meth:`cut` ``(a, b)``: a blackhole route to the other's address in both
  namespaces: the two hosts cannot talk, everything else still flows;
- :meth:`isolate` ``(a)``: the host's veth down: it reaches nobody.

Commands run in a namespace with ``ip netns exec`` (:meth:`Network.exec_prefix`).
"""

from __future__ import annotations

import atexit
import secrets
import subprocess
from collections.abc import Sequence

IP = "ip"


class NetnsUnavailable(RuntimeError):
    """Namespaces cannot be made here (not root, or no ``ip``)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


class Network:
    """Namespaces, a bridge and addresses for named hosts (see the module docstring)."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.tag = "bq" + secrets.token_hex(3)
        octets = secrets.randbelow(200) + 20, secrets.randbelow(250) + 1
        self.subnet = f"10.{octets[0]}.{octets[1]}"
        self.hub = f"{self.tag}hub"
        self.addresses: dict[str, str] = {}
        self._created: list[str] = []
        self._cuts: set[tuple[str, str]] = set()
        self._isolated: set[str] = set()
        self._index: dict[str, int] = {}
        atexit.register(self.close)
        try:
            self._make(list(hosts))
        except BaseException:
            self.close()
            raise

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def exec_prefix(self, host: str) -> tuple[str, ...]:
        """What runs a command inside ``host``'s namespace."""
        return (IP, "netns", "exec", self.namespace(host))

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _make(self, hosts: list[str]) -> None:
        self._add_namespace(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for n, host in enumerate(hosts):
            ns = self.namespace(host)
            self._add_namespace(ns)
            port = f"{self.tag}{n}"
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", port, "netns", self.hub)
            _ip("-n", self.hub, "link", "set", port, "master", "br0")
            _ip("-n", self.hub, "link", "set", port, "up")
            address = f"{self.subnet}.{n + 2}"
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            self.addresses[host] = address
            self._index[host] = n

    # ------------------------------------------------------------------ faults
    def cut(self, a: str, b: str) -> None:
        """No traffic between ``a`` and ``b`` (both directions)."""
        for here, there in ((a, b), (b, a)):
            if (here, there) not in self._cuts:
                route = f"{self.addresses[there]}/32"
                _ip("-n", self.namespace(here), "route", "add", "blackhole", route)
                self._cuts.add((here, there))

    def isolate(self, host: str) -> None:
        """``host`` reaches nobody and nobody reaches it."""
        _ip("-n", self.namespace(host), "link", "set", "eth0", "down")
        self._isolated.add(host)

    def heal(self) -> None:
        """Undo every cut and isolation."""
        for here, there in sorted(self._cuts):
            route = f"{self.addresses[there]}/32"
            _ip("-n", self.namespace(here), "route", "del", "blackhole", route, check=False)
        self._cuts.clear()
        for host in sorted(self._isolated):
            _ip("-n", self.namespace(host), "link", "set", "eth0", "up")
            address = self.addresses[host]
            # The link going down dropped its routes; the address's own route returns with it.
            _ip("-n", self.namespace(host), "addr", "replace", f"{address}/24", "dev", "eth0")
        self._isolated.clear()

    def close(self) -> None:
        """Delete every namespace this run made (idempotent)."""
        while self._created:
            _ip("netns", "del", self._created.pop(), check=False)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def leftover_namespaces(tag: str) -> list[str]:
    """Namespaces whose name starts with ``tag`` (after close: none)."""
    listed = _ip("netns", "list").stdout.split("\n")
    return [line.split()[0] for line in listed if line.startswith(tag)]
