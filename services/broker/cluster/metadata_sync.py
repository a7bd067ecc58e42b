"""MetadataSync: a replica's broker copies its master broker's metadata (docs/ha.md).

Topics, subscription groups, consumer offsets, delay offsets and POP state live in each
store's ``config/``. A replica's broker fetches the master broker's documents
(``GetMetadata``) every ``metadata_sync_interval_ms``, loads them into its tables and writes them to
its own store, so a promoted replica already knows every topic, group and
committed offset: consumers resume where they were, not from the start.

With the ACL on, the master also answers its ACL document and its POP secret,
sealed for the brokers' own account (:mod:`services.broker.access.acl_seal`);
the replica opens them with its own credentials and keeps them in its store.

The master is found through the registry: the live broker of the same
cluster and broker name with id 0. The master's documents replace the
replica's, as in RocketMQ's slave synchronisation; a master that cannot be
reached costs a warning, and the replica keeps serving what it has.
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from boltmq.kernel import channels, runtime
from boltmq.kernel.registry_client import AsyncRegistryClient, RegistryError
from boltmq.kernel.signing import AsyncRequestSigner, Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import broker_pb2, broker_pb2_grpc
from services.broker.access.acl_seal import SEALED_ACL_FILE, UnsealFailed, unseal
from services.broker.access.acl_table import AclTable
from services.broker.errors import BrokerError
from services.broker.metadata.consumer_offset import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
from services.broker.metadata.delay_offset import DELAY_OFFSET_FILE
from services.broker.metadata.persister import MetadataPersister
from services.broker.metadata.pop_state import POP_STATE_FILE, SEALED_POP_SECRET_FILE
from services.broker.metadata.subscription_group import (
    SUBSCRIPTION_GROUP_FILE,
    SubscriptionGroupManager,
)
from services.broker.metadata.topic_config import TOPICS_FILE, TopicConfigManager
from services.broker.store.store_role import MASTER_ID, StoreRole

log = logging.getLogger(__name__)

_ACL_REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class MetadataSyncFailed(BrokerError):
    """GetMetadata on the master broker failed; the message names the master and the status.

    A refusal by the master's ACL says what to configure: GetMetadata is an
    admin call, so the replica signs with an admin account's keys.
    """

    def __init__(
        self, master: str, code: grpc.StatusCode, details: str, credentials: Credentials | None
    ) -> None:
        hint = ""
        if code in _ACL_REFUSALS:
            signed = (
                f"signed as {credentials.access_key}"
                if credentials
                else "unsigned: this broker has no access_key"
            )
            hint = (
                f" (call {signed}; the master enforces its ACL and needs an admin "
                "account's credentials: set this broker's access_key / secret_key)"
            )
        super().__init__(
            f"GetMetadata on master broker {master} failed: {code.name}: {details}{hint}", code
        )
        self.kind = f"{master} {code.name}"
        """What a repeat of this failure has in common with it (the details may carry a
        changing figure, e.g. a clock skew in milliseconds)."""


class MetadataSync:
    """The replica side's periodic copy of the master broker's tables."""

    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        role: StoreRole,
        registry_addresses: tuple[str, ...],
        persister: MetadataPersister,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        acl: AclTable,
        interval_ms: int,
        timeout_ms: int,
        credentials: Credentials | None = None,
        tls: ClientTLS | None = None,
    ) -> None:
        self._group = (cluster_name, broker_name)
        self._tls = tls
        self._role = role
        self._registry = (
            AsyncRegistryClient(
                registry_addresses, attempts_max=1, rpc_timeout_s=timeout_ms / 1000, tls=tls
            )
            if registry_addresses
            else None
        )
        self._persister = persister
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._interval_s = interval_ms / 1000
        self._timeout_s = timeout_ms / 1000
        self._failing = ""
        self._task: asyncio.Task[None] | None = None
        self._acl = acl
        """The broker's ACL; the master's copy replaces it."""
        self._credentials = credentials
        """What this broker signs its GetMetadata calls with (None: unsigned)."""
        self.synced_rounds = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="metadata-sync")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await runtime.cancel_and_wait(task)
        if self._registry is not None:
            await self._registry.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            if self._role.is_master:
                continue
            # Without this loop a replica's metadata would stay as it was for good.
            with runtime.one_round("copying the master's metadata", log):
                await self._sync_round()

    async def _sync_round(self) -> None:
        """One copy from the master; a failure is logged once until it changes."""
        try:
            await self.sync_once()
        except (BrokerError, RegistryError, grpc.aio.AioRpcError, ValueError) as exc:
            kind = getattr(exc, "kind", None) or str(exc)
            if kind != self._failing:  # logged once until the failure changes
                log.warning("cannot copy the master's metadata (will retry): %s", exc)
            self._failing = kind
            return
        if self._failing:
            log.info("copying the master's metadata again")
        self._failing = ""

    async def master_address(self) -> str | None:
        """The group's live master broker, from the registry."""
        if self._registry is None:
            return None
        info = await self._registry.cluster_info()
        for broker in info.brokers:
            if (
                broker.cluster_name,
                broker.broker_name,
            ) == self._group and broker.broker_id == MASTER_ID:
                return broker.address
        return None

    async def sync_once(self) -> bool:
        """Copy the master's documents now; False when no master is registered."""
        address = await self.master_address()
        if address is None:
            return False
        signer = (
            [AsyncRequestSigner(self._credentials, f"broker@{self._group[1]}", self._group[1])]
            if self._credentials
            else []
        )
        channel = channels.channel(address, self._tls, signer)
        try:
            response = await broker_pb2_grpc.BrokerServiceStub(channel).GetMetadata(
                broker_pb2.GetMetadataRequest(), timeout=self._timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            raise MetadataSyncFailed(
                address, exc.code(), exc.details() or "", self._credentials
            ) from None
        finally:
            await channel.close()
        documents = dict(response.documents)
        if TOPICS_FILE in documents:
            self._topics.load_json(documents[TOPICS_FILE])
            await self._persister.save_topics()
        if SUBSCRIPTION_GROUP_FILE in documents:
            self._groups.load_json(documents[SUBSCRIPTION_GROUP_FILE])
            await self._persister.save_groups()
        if CONSUMER_OFFSET_FILE in documents:
            self._offsets.load_json(documents[CONSUMER_OFFSET_FILE])
            await self._persister.save_offsets()
        if DELAY_OFFSET_FILE in documents:
            await self._persister.copy_delay_offsets(documents[DELAY_OFFSET_FILE])
        if POP_STATE_FILE in documents:
            await self._persister.copy_pop_state(documents[POP_STATE_FILE])
        if SEALED_POP_SECRET_FILE in documents and self._credentials is not None:
            try:
                secret = unseal(
                    documents[SEALED_POP_SECRET_FILE],
                    self._credentials.access_key,
                    self._credentials.secret_key,
                )
            except UnsealFailed as exc:
                log.warning("POP secret not copied from the master broker at %s: %s", address, exc)
            else:
                await self._persister.copy_pop_secret(secret)
        if SEALED_ACL_FILE in documents and self._credentials is not None:
            try:
                acl = unseal(
                    documents[SEALED_ACL_FILE],
                    self._credentials.access_key,
                    self._credentials.secret_key,
                )
            except UnsealFailed as exc:
                log.warning("ACL not copied from the master broker at %s: %s", address, exc)
            else:
                await self._acl.save_copy(acl)
        self.synced_rounds += 1
        return True
