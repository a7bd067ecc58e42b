"""Registration of the broker and its topics with every registry.

Registries are independent and share nothing, so the broker registers with
each of them: every ``register_interval_ms`` (a registry drops a broker it has
not heard from for 120 s) and at once whenever its topic table changes, so a
route exists by the time the change is acknowledged. At shutdown it
unregisters, so clients stop routing to it before the expiry would tell them.
A registry that is down only costs a warning; the next round tries again,
which is why each round makes one attempt per registry (a retrying client
would hold up the send that auto-created a topic).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from boltmq.kernel import runtime
from boltmq.kernel.registry_client import AsyncRegistryClient, RegistrationResult, RegistryError
from boltmq.kernel.tls import ClientTLS
from services.broker.errors import BrokerError
from services.broker.metadata.topic_config import TopicConfigManager
from services.broker.store.store_role import StoreRole
from services.broker.wire import topic_to_proto

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """What a registry needs to know about this broker besides its topics and role."""

    cluster_name: str
    broker_name: str
    ha_address: str


class Registrar:
    """Registers with every registry periodically and on demand."""

    def __init__(
        self,
        identity: BrokerIdentity,
        role: StoreRole,
        registry_addresses: tuple[str, ...],
        topics: TopicConfigManager,
        interval_ms: int,
        timeout_ms: int,
        tls: ClientTLS | None = None,
    ) -> None:
        self._identity = identity
        self._role = role
        self._registered_id: int | None = None
        self._topics = topics
        self._interval_s = interval_ms / 1000
        self._client = (
            AsyncRegistryClient(
                registry_addresses, rpc_timeout_s=timeout_ms / 1000, attempts_max=1, tls=tls
            )
            if registry_addresses
            else None
        )
        self._failing: dict[str, str] = {}
        """Registries whose last registration failed, with why (to warn once per outage)."""
        self._address = ""
        self._task: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()
        """Set once a registry took this broker (at once when none is configured): the
        broker is routable, so health may say SERVING."""

    def advertised_address(self) -> str:
        """``host:port`` this broker announces ("" until :meth:`start`)."""
        return self._address

    async def start(self, address: str) -> None:
        """Announce ``address`` to every registry now, then every interval in the background.

        The address is known only once the server is bound (port 0 in tests).
        The first round is awaited, so the broker is routable once it says it
        is serving.
        """
        self._address = address
        if self._client is None:
            log.warning("no registry_addresses configured: clients cannot discover this broker")
            self.registered.set()
            return
        await self.register_all()
        self._task = asyncio.create_task(self._run(), name="registrar")

    async def stop(self) -> None:
        """Stop the periodic rounds, unregister from every registry, close channels."""
        task, self._task = self._task, None
        await runtime.cancel_and_wait(task)
        await self.unregister_all()
        if self._client is not None:
            await self._client.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            # The loop must outlive a bug in one round: without it the registries drop
            # this broker while it runs, and clients stop routing to it.
            with runtime.one_round("registration round", log):
                await self.register_all()

    async def register_all(self) -> int:
        """One registration round with every registry at once; return how many took it.

        The id and epoch come from the store's role (0 for the master). A
        registry that refuses this broker as master (a newer-epoch master
        leads the group: this is an old master back after a failover) makes
        it demote its store and register again as the replica id it names.
        """
        if self._client is None or not self._address:
            return 0
        result = await self._register_once()
        if result is not None and result.superseded is not None:
            answer = result.superseded
            try:
                await self._role.demote(answer.suggested_broker_id, answer.master_address)
            except BrokerError as exc:
                log.error("cannot demote the store to follow %s: %s", answer.master_address, exc)
                return 0
            result = await self._register_once()
        if result is None or not result.accepted:
            return 0
        self.registered.set()
        return len(result.accepted)

    async def _register_once(self) -> RegistrationResult | None:
        assert self._client is not None
        identity, role = self._identity, self._role
        broker_id = role.broker_id
        if self._registered_id is not None and self._registered_id != broker_id:
            await self.unregister_all()  # leave the old id's slot at once
        try:
            # The counter is the table's version: it only grows, and it survives
            # restarts because it is saved in topics.json with the table.
            result = await self._client.register(
                cluster_name=identity.cluster_name,
                broker_name=identity.broker_name,
                broker_id=broker_id,
                address=self._address,
                ha_address=identity.ha_address,
                data_version=self._topics.data_version.counter,
                epoch=role.epoch,
                topics=[topic_to_proto(t) for t in self._topics.all()],
            )
        except RegistryError as exc:
            self._note_failures({address: str(exc) for address in self._client.addresses})
            return None
        self._note_failures(dict(result.failed))
        if result.superseded is None:
            self._registered_id = broker_id
        return result

    def _note_failures(self, failed: dict[str, str]) -> None:
        for address, reason in failed.items():
            if address not in self._failing:
                log.warning("cannot register with registry %s: %s", address, reason)
        for address in set(self._failing) - set(failed):
            log.info("registered with registry %s again", address)
        self._failing = failed

    async def unregister_all(self) -> None:
        """Tell every registry this broker is gone (best effort)."""
        if self._client is None or not self._address:
            return
        identity = self._identity
        broker_id = self._registered_id if self._registered_id is not None else self._role.broker_id
        try:
            result = await self._client.unregister(
                cluster_name=identity.cluster_name,
                broker_name=identity.broker_name,
                broker_id=broker_id,
                address=self._address,
            )
        except RegistryError as exc:
            log.warning("cannot unregister from any registry: %s", exc)
            return
        for address, reason in result.failed.items():
            log.warning("cannot unregister from registry %s: %s", address, reason)
