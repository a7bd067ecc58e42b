"""The broker: composes its parts and runs their lifecycle, nothing more.

Parts (each its own module, none holding a reference back here): the store
client, the topic / group / offset tables and their persister, the client
and queue-lock tables, the long-poll hub with its arrival watcher, the
registrar, and the processors the servicer calls. The broker keeps no state
of its own on disk (DESIGN 2); :meth:`Broker.start` reads its metadata from
the store and :meth:`Broker.stop` writes back what changed.
"""

from __future__ import annotations

import asyncio
import logging

from boltmq.kernel import runtime, tls
from boltmq.kernel.signing import Credentials
from services.broker.access.acl_admin import AclAdmin
from services.broker.access.acl_table import AclTable, read_seed_file
from services.broker.access.authorizer import Authorizer
from services.broker.access.client_limits import ClientLimits
from services.broker.access.gate import BrokerGate
from services.broker.admin_processor import AdminProcessor
from services.broker.arrival_watcher import ArrivalWatcher
from services.broker.check_channel import CheckChannels
from services.broker.client_manager import ClientManager
from services.broker.client_processor import ClientProcessor
from services.broker.config import BrokerConfig
from services.broker.consumer_offset import ConsumerOffsetManager
from services.broker.dead_letter import DeadLetterProcessor
from services.broker.delay_message import levels_of
from services.broker.delay_offset import DelayOffsetManager
from services.broker.errors import BrokerError
from services.broker.group_access import GroupAccess
from services.broker.long_poll import LongPollHub
from services.broker.metadata import MetadataPersister
from services.broker.metadata_sync import MetadataSync
from services.broker.metrics import BrokerMetrics
from services.broker.pull_processor import PullProcessor
from services.broker.queue_lock import QueueLockManager
from services.broker.registration import BrokerIdentity, Registrar
from services.broker.retry_topic import RetryTopics
from services.broker.schedule_service import ScheduleService
from services.broker.send_back import SendBackProcessor
from services.broker.send_processor import SendProcessor
from services.broker.servicer import BrokerServicer
from services.broker.store_client import StoreClient
from services.broker.store_role import StoreRole
from services.broker.subscription_group import SubscriptionGroupManager
from services.broker.topic_config import TopicConfigManager
from services.broker.topic_publisher import TopicPublisher
from services.broker.transaction_service import TransactionService

log = logging.getLogger(__name__)


class BrokerStartError(RuntimeError):
    """The broker cannot start (store unreachable, metadata unreadable)."""


class Broker:
    """One broker's parts, wired together."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        client_tls = tls.client_tls(config)  # the broker's own calls: store, registry, HA
        self.store = StoreClient(config.store_address, config.store_timeout_ms, client_tls)
        self.topics = TopicConfigManager(
            config.cluster_name, config.broker_name, config.auto_create_topic_enable
        )
        self.groups = SubscriptionGroupManager(config.auto_create_subscription_group)
        self.offsets = ConsumerOffsetManager()
        self.clients = ClientManager(config.client_expiry_ms)
        self.locks = QueueLockManager(config.queue_lock_expiry_ms)
        self.hub = LongPollHub(config.long_poll_max_parked)
        self.watcher = ArrivalWatcher(self.store, self.hub, config.watch_reconnect_max_ms)
        self.delay_offsets = DelayOffsetManager()
        self.persister = MetadataPersister(
            self.store,
            self.topics,
            self.groups,
            self.offsets,
            config.offset_persist_interval_ms,
            self.delay_offsets,
        )
        self.role = StoreRole(
            self.store,
            config.broker_id,
            config.ha_address,
            config.role_check_interval_ms,
            tls=client_tls,
        )
        identity = BrokerIdentity(config.cluster_name, config.broker_name, config.ha_address)
        self.registrar = Registrar(
            identity,
            self.role,
            config.registry_address_list,
            self.topics,
            config.register_interval_ms,
            config.registry_timeout_ms,
            client_tls,
        )
        self.role.on_change = self.registrar.register_all
        self.sync = MetadataSync(
            config.cluster_name,
            config.broker_name,
            self.role,
            config.registry_address_list,
            self.persister,
            self.topics,
            self.groups,
            self.offsets,
            config.metadata_sync_interval_ms,
            config.store_timeout_ms,
            client_tls,
        )
        publisher = TopicPublisher(self.persister, self.registrar)
        group_access = GroupAccess(self.groups, self.persister)
        self.admin = AdminProcessor(
            config,
            self.topics,
            self.groups,
            self.offsets,
            self.clients,
            self.store,
            publisher,
            self.role,
            self.persister,
        )
        self.transactions = TransactionService(config, self.store, self.role, CheckChannels())
        send = SendProcessor(config, self.topics, self.store, publisher)
        send.transactions = self.transactions
        self.servicer = BrokerServicer(
            send,
            PullProcessor(
                config, self.topics, group_access, self.offsets, self.store, self.hub, self.role
            ),
            ClientProcessor(self.topics, group_access, self.clients, self.offsets, self.locks),
            self.admin,
            self.transactions,
        )
        self.metrics = BrokerMetrics(self.hub, self.offsets)
        self.servicer.metrics = self.metrics
        send.metrics = self.metrics
        self._scanner: asyncio.Task[None] | None = None
        self._wire_retry_and_delay(config, group_access, publisher)
        self._wire_access(config)

    def _wire_retry_and_delay(
        self, config: BrokerConfig, group_access: GroupAccess, publisher: TopicPublisher
    ) -> None:
        """Send-back, dead letters, retry topics on heartbeats and the delay scheduler."""
        self.schedule = ScheduleService(
            levels_of(config), self.store, self.delay_offsets, self.hub, self.role
        )
        self.servicer.send_back = SendBackProcessor(
            config, self.topics, group_access, self.store, publisher
        )
        self.servicer.dead_letters = DeadLetterProcessor(config, self.topics, self.store)
        self.servicer._clients.retry_topics = RetryTopics(self.topics, publisher)

    def _wire_access(self, config: BrokerConfig) -> None:
        """The ACL (kept in the store), its admin calls, and the replica's copy of it."""
        seed = read_seed_file(config.acl_file) if config.acl_file else None
        self.acl = AclTable(self.store, seed)
        self.servicer.acl = AclAdmin(self.acl, config.acl_enable)
        self.sync.acl = self.acl
        if config.access_key:
            self.sync.credentials = Credentials(config.access_key, config.secret_key)
        authorizer = (
            Authorizer(lambda: self.acl.document, config.acl_signature_max_skew_ms)
            if config.acl_enable
            else None
        )
        limits = (
            ClientLimits(
                config.client_request_rate_per_s,
                config.client_request_burst,
                config.client_in_flight_max,
            )
            if config.client_request_rate_per_s or config.client_in_flight_max
            else None
        )
        self.gate = BrokerGate(authorizer, limits) if authorizer or limits else None
        """The server interceptor in front of every call (None: nothing to enforce)."""

    async def start(self, advertised_address: str) -> None:
        """Load metadata from the store, then open the arrival stream and register."""
        try:
            await self.persister.load(wait_s=self.config.store_connect_timeout_ms / 1000)
            await self.acl.load()
            await self.role.refresh()
        except BrokerError as exc:
            raise BrokerStartError(f"broker cannot load its metadata: {exc}") from None
        self.admin.advertised_address = advertised_address
        self.watcher.start()
        self.persister.start()
        self.schedule.start()
        self.role.start()
        self.sync.start()
        self.transactions.start()
        await self.registrar.start(advertised_address)
        self._scanner = asyncio.create_task(self._scan_clients(), name="client-scanner")
        log.info(
            "broker %s/%s id %d serving %d topics at %s (store %s, %s)",
            self.config.cluster_name,
            self.config.broker_name,
            self.role.broker_id,
            len(self.topics.all()),
            advertised_address,
            self.config.store_address,
            "master" if self.role.is_master else "replica",
        )

    async def stop(self) -> None:
        """Answer parked pulls, unregister, save offsets, close connections."""
        await self.schedule.stop()
        self.hub.close()
        task, self._scanner = self._scanner, None
        await runtime.cancel_and_wait(task)
        await self.sync.stop()
        await self.transactions.stop()
        await self.role.stop()
        await self.registrar.stop()
        await self.watcher.stop()
        try:
            await self.persister.stop()
        except BrokerError as exc:
            log.error("consumer offsets not saved at shutdown: %s", exc)
        await self.store.close()

    async def _scan_clients(self) -> None:
        interval_s = self.config.client_scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            for group, client_id in self.clients.expire():
                log.info("consumer %s of group %s expired", client_id, group)
                self.locks.unlock_client(group, client_id)
            self.locks.expire()
