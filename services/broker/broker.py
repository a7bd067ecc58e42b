"""The broker: builds its parts and runs their lifecycle, nothing more.

Every part is built once, through its constructor, in dependency order: the
long-poll hub; the store client, which tells the hub of every append; the
metadata tables and their persister; the store's role and the registrar; the
ACL and the metadata sync; the hub's arrival watcher; the metrics; the
processors; the servicer last. No part holds a reference back here, and
nothing is assigned onto a part after it is built. Two pairs need each other,
and get a callable or a small shared object instead of the other part:

- the store's role re-registers when it changes, and the registrar asks the
  role for its id, epoch and demotion: the role gets ``on_change``, a callable
  bound to the registrar built next;
- the long-poll hub names the queues pulls wait on, and the arrival watcher
  wakes the hub's pulls: both share a :class:`QueueInterests`.

The broker keeps no state of its own on disk (the store is the only process
that writes files): :meth:`Broker.start` reads its metadata from the store
and :meth:`Broker.stop` writes back what changed.
"""

from __future__ import annotations

import asyncio
import logging

from boltmq.kernel import runtime, tls
from boltmq.kernel.caller_limits import CallerLimits
from boltmq.kernel.signing import Credentials
from services.broker.access.acl_admin import AclAdmin
from services.broker.access.acl_table import AclTable, read_seed_file
from services.broker.access.authorizer import Authorizer
from services.broker.access.creation_limits import CreationLimits
from services.broker.access.gate import BrokerGate
from services.broker.access.replay_cache import ReplayCache
from services.broker.admin.admin_processor import AdminProcessor
from services.broker.admin.offset_admin import OffsetAdmin
from services.broker.arrivals.arrival_watcher import ArrivalWatcher, QueueInterests
from services.broker.arrivals.long_poll import LongPollHub
from services.broker.clients.client_manager import ClientManager
from services.broker.clients.client_processor import ClientProcessor
from services.broker.clients.queue_lock import QueueLockManager
from services.broker.cluster.metadata_sync import MetadataSync
from services.broker.cluster.registration import BrokerIdentity, Registrar
from services.broker.cluster.topic_publisher import TopicPublisher
from services.broker.config import BrokerConfig
from services.broker.delay.delay_message import levels_of
from services.broker.delay.schedule_service import ScheduleService
from services.broker.errors import BrokerError
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.metadata.delay_offset import DelayOffsetManager
from services.broker.metadata.group_access import GroupAccess
from services.broker.metadata.offset_reset import OffsetResets
from services.broker.metadata.persister import MetadataPersister
from services.broker.metadata.pop_state import PopState
from services.broker.metadata.subscription_group import SubscriptionGroupManager
from services.broker.metadata.topic_config import TopicConfigManager
from services.broker.metrics import BrokerMetrics
from services.broker.pop.pop_service import PopService
from services.broker.pull.pull_processor import PullProcessor
from services.broker.retry.dead_letter import DeadLetterProcessor
from services.broker.retry.retry_topic import RetryTopics
from services.broker.retry.send_back import SendBackProcessor
from services.broker.rocketmq_v2.protocol import build_messaging
from services.broker.send.send_processor import SendProcessor
from services.broker.send.send_stream import SendStreamer
from services.broker.servicer import BrokerServicer
from services.broker.store.store_client import StoreClient
from services.broker.store.store_role import StoreRole
from services.broker.transaction.check_channel import CheckChannels
from services.broker.transaction.transaction_service import TransactionService

log = logging.getLogger(__name__)


class BrokerStartError(RuntimeError):
    """The broker cannot start (store unreachable, metadata unreadable)."""


class Broker:
    """One broker's parts, wired together."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        client_tls = tls.client_tls(config)  # the broker's own calls: store, registry, HA
        interests = QueueInterests()
        self.hub = LongPollHub(config.long_poll_max_parked, on_wait=interests.name)
        self.store = StoreClient(
            config.store_address, config.store_timeout_ms, client_tls, on_written=self.hub.written
        )
        self.topics = TopicConfigManager(
            config.cluster_name, config.broker_name, config.auto_create_topic_enable
        )
        self.groups = SubscriptionGroupManager(config.auto_create_subscription_group)
        self.offsets = ConsumerOffsetManager()
        self.resets = OffsetResets()
        self.delay_offsets = DelayOffsetManager()
        self.pop_state = PopState()
        self.persister = MetadataPersister(
            self.store,
            self.topics,
            self.groups,
            self.offsets,
            config.offset_persist_interval_ms,
            self.delay_offsets,
            self.pop_state,
        )
        self._build_cluster(config, client_tls)
        self.clients = ClientManager(config.client_expiry_ms)
        self.locks = QueueLockManager(config.queue_lock_expiry_ms)
        self.watcher = ArrivalWatcher(
            self.store, self.hub, interests, config.watch_reconnect_max_ms
        )
        self.metrics = BrokerMetrics(self.hub, self.offsets)
        self.transactions = TransactionService(config, self.store, self.role, CheckChannels())
        self.schedule = ScheduleService(
            levels_of(config), self.store, self.delay_offsets, self.hub, self.role
        )
        self.servicer = self._build_servicer(config, client_tls)
        self.gate = _gate(config, self.acl)
        """The server interceptor in front of every call."""
        self._scanner: asyncio.Task[None] | None = None

    def _build_cluster(self, config: BrokerConfig, client_tls: tls.ClientTLS | None) -> None:
        """Build ``role`` (the store's), ``registrar``, ``acl`` (kept in the store) and
        ``sync`` (a replica's copy of its master broker's metadata)."""
        registrar: Registrar  # the role's on_change calls it; bound just below
        self.role = StoreRole(
            self.store,
            config.broker_id,
            config.ha_address,
            config.role_check_interval_ms,
            on_change=lambda: registrar.register_all(),
            tls=client_tls,
        )
        identity = BrokerIdentity(config.cluster_name, config.broker_name, config.ha_address)
        registrar = self.registrar = Registrar(
            identity,
            self.role,
            config.registry_address_list,
            self.topics,
            config.register_interval_ms,
            config.registry_timeout_ms,
            client_tls,
        )
        seed = read_seed_file(config.acl_file) if config.acl_file else None
        self.acl = AclTable(self.store, seed)
        self.sync = MetadataSync(
            config.cluster_name,
            config.broker_name,
            self.role,
            config.registry_address_list,
            self.persister,
            self.topics,
            self.groups,
            self.offsets,
            self.acl,
            config.metadata_sync_interval_ms,
            config.store_timeout_ms,
            Credentials(config.access_key, config.secret_key) if config.access_key else None,
            client_tls,
        )

    def _build_servicer(
        self, config: BrokerConfig, client_tls: tls.ClientTLS | None
    ) -> BrokerServicer:
        """The processors, and the servicer over them; ``rocketmq``, the RocketMQ 5
        protocol's servicer over the same parts."""
        publisher = TopicPublisher(self.persister, self.registrar)
        creations = CreationLimits(
            config.auto_create_max_per_call,
            config.auto_create_max_per_client,
            config.auto_create_rate_per_s,
            config.auto_create_burst,
        )
        group_access = GroupAccess(self.groups, self.persister, creations)
        self.pop = PopService(
            config,
            self.topics,
            group_access,
            self.offsets,
            self.pop_state,
            self.store,
            self.hub,
            self.role,
            publisher,
        )
        """POP consumption, the in-broker API (:mod:`services.broker.pop.pop_service`)."""
        admin = AdminProcessor(
            config,
            self.topics,
            self.groups,
            self.offsets,
            self.clients,
            self.store,
            publisher,
            self.role,
            self.persister,
            self.registrar.advertised_address,
            self.metrics.traffic,
            self.pop_state,
        )
        send = SendProcessor(
            config, self.topics, self.store, publisher, self.transactions, self.metrics, creations
        )
        self.rocketmq = build_messaging(
            config,
            self.topics,
            send,
            self.transactions,
            self.acl,
            self.registrar.advertised_address,
            client_tls,
            self.pop,
            self.groups,
        )
        return BrokerServicer(
            send,
            PullProcessor(
                config,
                self.topics,
                group_access,
                self.offsets,
                self.store,
                self.hub,
                self.role,
                self.resets,
            ),
            ClientProcessor(
                self.topics,
                group_access,
                self.clients,
                self.offsets,
                self.locks,
                RetryTopics(self.topics, publisher),
                creations,
            ),
            admin,
            self.transactions,
            SendBackProcessor(config, self.topics, group_access, self.store, publisher),
            DeadLetterProcessor(config, self.topics, self.store),
            AclAdmin(self.acl, config.acl_enable, config.access_key),
            self.metrics,
            OffsetAdmin(
                self.topics,
                self.offsets,
                self.resets,
                self.store,
                self.hub,
                self.role,
                self.persister,
            ),
            self.pop,
            SendStreamer(
                send,
                config.send_stream_in_flight_max,
                inline=lambda: self.store.in_process and not self.role.appends_wait,
            ),
        )

    async def start(self, advertised_address: str) -> None:
        """Load metadata from the store, then open the arrival stream and register."""
        try:
            await self.persister.load(wait_s=self.config.store_connect_timeout_ms / 1000)
            await self.acl.load()
            await self.role.refresh()
        except BrokerError as exc:
            raise BrokerStartError(f"broker cannot load its metadata: {exc}") from None
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
        await self.rocketmq.close()
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
            with runtime.one_round("client expiry", log):
                for group, client_id in self.clients.expire():
                    log.info("consumer %s of group %s expired", client_id, group)
                    self.locks.unlock_client(group, client_id)
                self.locks.expire()


def _gate(config: BrokerConfig, acl: AclTable) -> BrokerGate:
    """Access control (signed calls checked against ``acl``) and per-client limits, as
    configured; always installed, as it names each call's caller (creation limits)."""
    authorizer = (
        Authorizer(
            lambda: acl.document,
            config.acl_signature_max_skew_ms,
            ReplayCache(config.acl_signature_max_skew_ms, config.acl_replay_cache_max_entries),
            broker_name=config.broker_name,
        )
        if config.acl_enable
        else None
    )
    limits = (
        CallerLimits(
            config.client_request_rate_per_s,
            config.client_request_burst,
            config.client_in_flight_max,
        )
        if config.client_request_rate_per_s or config.client_in_flight_max
        else None
    )
    return BrokerGate(authorizer, limits)
