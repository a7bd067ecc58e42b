"""A broker served with its store in one process (``boltmq serve broker --with-store``).

The separately deployed store (its own process, its own pod) stays the
default. Served together, the broker calls its store in process
(:mod:`boltmq.kernel.in_process`): no gRPC hop, no serialization of the
appends and pulls between them, at the price of one GIL for both. The store
still listens on its own port with its own TLS and gate, for its HA service
and replicas, the CLI and the console; only the broker's own calls skip the
network. The store starts (and recovers) first and the broker after it;
a signal stops the broker first, so its last offsets reach a running store.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from boltmq.kernel import runtime
from boltmq.kernel.tls import server_tls
from services.broker.config import BrokerConfig
from services.broker.server import BrokerService
from services.store.config import StoreConfig
from services.store.server import StoreService


async def serve(store_config: StoreConfig, broker_config: BrokerConfig) -> None:
    """Run the store, then the broker on it, until SIGTERM/SIGINT."""
    store_tls = server_tls(store_config)  # bad files fail before the store is opened
    broker_tls = server_tls(broker_config)
    store = StoreService(store_config)

    def broker(started: Sequence[str]) -> BrokerService:
        return BrokerService(dataclasses.replace(broker_config, store_address=started[0]))

    try:
        await runtime.serve_together(
            [
                runtime.Part(
                    lambda _: store,
                    store_config.listen_host,
                    store_config.listen_port,
                    store_config.shutdown_grace_ms / 1000,
                    store_tls,
                    store_config.health_port,
                    store_config.health_host,
                ),
                runtime.Part(
                    broker,
                    broker_config.listen_host,
                    broker_config.listen_port,
                    broker_config.shutdown_grace_ms / 1000,
                    broker_tls,
                    broker_config.health_port,
                    broker_config.health_host,
                ),
            ],
            reflection_on=broker_config.reflection,
        )
    finally:
        # serve_together stops the store after a signal; this covers the paths where
        # it raises first (shutdown is idempotent).
        await asyncio.to_thread(store.store.shutdown)
