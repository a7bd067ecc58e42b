"""Builds the MessagingService servicer from the broker's parts (the broker calls this)."""

from __future__ import annotations

from collections.abc import Callable

from boltmq.kernel.registry_client import AsyncRegistryClient
from boltmq.kernel.tls import ClientTLS
from services.broker.access.acl_table import AclTable
from services.broker.config import BrokerConfig
from services.broker.delay.delay_message import levels_of
from services.broker.metadata.subscription_group import SubscriptionGroupManager
from services.broker.metadata.topic_config import TopicConfig, TopicConfigManager
from services.broker.pop.pop_service import PopService
from services.broker.rocketmq_v2.client_registry import ClientRegistry
from services.broker.rocketmq_v2.credentials import Credentials
from services.broker.rocketmq_v2.receiver import Receiver
from services.broker.rocketmq_v2.route import Routes
from services.broker.rocketmq_v2.sender import Sender
from services.broker.rocketmq_v2.servicer import MessagingServicer
from services.broker.rocketmq_v2.telemetry_session import GroupPolicy
from services.broker.send.send_processor import SendProcessor
from services.broker.transaction.transaction_service import TransactionService


def build_messaging(
    config: BrokerConfig,
    topics: TopicConfigManager,
    sends: SendProcessor,
    transactions: TransactionService,
    acl: AclTable,
    advertised_address: Callable[[], str],
    client_tls: ClientTLS | None,
    pop: PopService,
    groups: SubscriptionGroupManager,
) -> MessagingServicer:
    """The servicer, its registry client (closed by :meth:`MessagingServicer.close`)."""

    async def auto_create(topic: str) -> TopicConfig:
        return await sends.auto_create(topic, 0, "topic")

    registry = (
        AsyncRegistryClient(
            config.registry_address_list,
            attempts_max=1,
            rpc_timeout_s=config.registry_timeout_ms / 1000,
            tls=client_tls,
        )
        if config.registry_address_list
        else None
    )
    backoff_ms = tuple(
        levels_of(config).delay_ms(level) for level in range(1, levels_of(config).count + 1)
    )

    def group_policy(group: str) -> GroupPolicy:
        settings = groups.get(group)
        return GroupPolicy(
            pop.max_attempts(group),
            settings is not None and settings.consume_message_orderly,
            backoff_ms,
        )

    clients = ClientRegistry(config.client_expiry_ms)
    return MessagingServicer(
        config,
        Credentials(
            (lambda: acl.document) if config.acl_enable else None,
            config.acl_signature_max_skew_ms,
        ),
        Routes(registry, topics, config.broker_name, advertised_address, auto_create),
        Sender(config, topics, sends, transactions, auto_create),
        Receiver(pop, clients.fifo),
        clients,
        transactions.channels,
        group_policy,
    )
