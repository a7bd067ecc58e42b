"""Two registries under one broker and SDK clients: either may go away, a restart loses nothing.

The broker registers with every registry on each registration interval; a
registry keeps its state in memory only. So a restarted registry must hold the
broker and its topics again after one interval, and clients that list both
registries must keep finding routes while one of them is down (and keep
sending on cached routes while both are).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer, PullConsumer, PullStatus, SendStatus
from boltmq.kernel.registry_client import RegistryClient, TopicNotFound
from tests.integration.conftest import (
    CLUSTER_BROKER_SETTINGS,
    CLUSTER_REGISTRY_SETTINGS,
    CLUSTER_STORE_SETTINGS,
)
from tests.integration.procs import ServiceProcess
from tests.waiting import wait_until

REGISTER_INTERVAL_MS = 500


class TwoRegistries:
    """Registries r1 and r2, a store and a broker registered with both."""

    def __init__(self, tmp_path: Path) -> None:
        self.log_dir = tmp_path / "logs"
        self.first = self._start("registry", *CLUSTER_REGISTRY_SETTINGS)
        self.second = self._start("registry", *CLUSTER_REGISTRY_SETTINGS)
        self.store = self._start("store", f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS)
        self.broker = self._start(
            "broker",
            f"store_address={self.store.address}",
            f"registry_addresses={self.first.address},{self.second.address}",
            *CLUSTER_BROKER_SETTINGS,
        )
        self.procs = [self.first, self.second, self.store, self.broker]

    def _start(self, service: str, *settings: str, port: int = 0) -> ServiceProcess:
        return ServiceProcess(service, self.log_dir, *settings, port=port).start()

    @property
    def registries(self) -> str:
        return f"{self.first.address},{self.second.address}"

    def restart_first(self, *, kill: bool) -> None:
        """Stop r1 (SIGKILL or SIGTERM) and start a fresh, empty one on the same port."""
        if kill:
            self.first.kill()
        self.first.stop()
        self.first = self._start("registry", *CLUSTER_REGISTRY_SETTINGS, port=self.first.port)
        self.procs[0] = self.first

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@pytest.fixture
def two(tmp_path: Path) -> Iterator[TwoRegistries]:
    started = TwoRegistries(tmp_path)
    yield started
    started.stop()


def route_brokers(address: str, topic: str) -> set[str]:
    """The broker groups registry ``address`` names for ``topic`` (empty: unknown there)."""
    with RegistryClient([address], attempts_max=1) as registry:
        try:
            route = registry.get_route(topic)
        except TopicNotFound:
            return set()
        return {b.broker_name for b in route.brokers}


def send(producer: Producer, topic: str, body: bytes) -> None:
    assert producer.send(Message(topic=topic, body=body)).status is SendStatus.SEND_OK


def test_the_broker_registers_with_both_and_a_restarted_registry_is_rebuilt(
    two: TwoRegistries,
) -> None:
    with Producer(two.registries, "pg-two-registries") as producer:
        send(producer, "reg-orders", b"first")
    for registry in (two.first, two.second):
        wait_until(
            lambda r=registry: route_brokers(r.address, "reg-orders") == {"broker-a"},
            f"registry {registry.address} to route reg-orders",
        )

    two.restart_first(kill=True)
    assert route_brokers(two.first.address, "reg-orders") in (set(), {"broker-a"})
    wait_until(
        lambda: route_brokers(two.first.address, "reg-orders") == {"broker-a"},
        "the restarted registry to learn the broker's topics again",
    )
    with RegistryClient([two.first.address], attempts_max=1) as registry:
        live = [(b.broker_name, b.broker_id) for b in registry.cluster_info().brokers]
    assert live == [("broker-a", 0)]
    assert route_brokers(two.second.address, "reg-orders") == {"broker-a"}


def test_clients_keep_finding_routes_with_one_registry_down_and_sending_with_none(
    two: TwoRegistries,
) -> None:
    with Producer(two.registries, "pg-failover") as producer:
        send(producer, "reg-a", b"before")  # auto-creates reg-a
        wait_until(
            lambda: route_brokers(two.second.address, "reg-a") == {"broker-a"},
            "the registries to route reg-a",
        )
        send(producer, "reg-a", b"routed")  # the producer caches the route
        producer.client.route_refresh_s = 0.0  # every later send asks the registries again

        two.first.kill()
        two.first.stop()
        # A topic the producer never routed: the lookup must pass r1 by and ask r2.
        send(producer, "reg-b", b"with r1 down")
        with Producer(two.registries, "pg-fresh") as fresh:
            send(fresh, "reg-a", b"a fresh client with r1 down")

        two.second.kill()
        two.second.stop()
        # Routes already known keep serving while every registry is down.
        send(producer, "reg-a", b"with both down")

    two.restart_first(kill=False)
    wait_until(
        lambda: route_brokers(two.first.address, "reg-a") == {"broker-a"},
        "the restarted registry to route reg-a",
    )
    got: list[bytes] = []
    with PullConsumer(two.first.address, "cg-reg-probe") as puller:
        for queue in puller.queues("reg-a"):
            result = puller.pull(queue, 0)
            if result.status is PullStatus.FOUND:
                got.extend(bytes(m.body) for m in result.messages)
    assert sorted(got) == sorted(
        [b"before", b"routed", b"a fresh client with r1 down", b"with both down"]
    )
