"""What happens after the topic table changes: save it, then tell every registry.

Saving first means a route never points at a topic the store does not know
the broker serves; registering before answering the caller (RocketMQ does the
same when it auto-creates a topic in the send path) means a client that was
told "created" finds the route at once.
"""

from __future__ import annotations

from services.broker.cluster.registration import Registrar
from services.broker.metadata.persister import MetadataPersister


class TopicPublisher:
    """Saves topics.json and registers with every registry, in that order."""

    def __init__(self, persister: MetadataPersister, registrar: Registrar) -> None:
        self._persister = persister
        self._registrar = registrar

    async def publish(self) -> None:
        """Persist the topic table, then register it everywhere (registry failures only warn)."""
        await self._persister.save_topics()
        await self._registrar.register_all()
