"""Builds the MessagingService servicer from the broker's parts (the broker calls this)."""

from __future__ import annotations

from collections.abc import Callable

from boltmq.kernel.registry_client import AsyncRegistryClient
from boltmq.kernel.tls import ClientTLS
from services.broker.access.acl_table import AclTable
from services.broker.config import BrokerConfig
from services.broker.metadata.topic_config import TopicConfig, TopicConfigManager
from services.broker.rocketmq_v2.client_registry import ClientRegistry
from services.broker.rocketmq_v2.credentials import Credentials
from services.broker.rocketmq_v2.route import Routes
from services.broker.rocketmq_v2.sender import Sender
from services.broker.rocketmq_v2.servicer import MessagingServicer
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
    return MessagingServicer(
        config,
        Credentials(
            (lambda: acl.document) if config.acl_enable else None,
            config.acl_signature_max_skew_ms,
        ),
        Routes(registry, topics, config.broker_name, advertised_address, auto_create),
        Sender(config, topics, sends, transactions, auto_create),
        ClientRegistry(config.client_expiry_ms),
        transactions.channels,
    )
