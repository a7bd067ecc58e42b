"""Loading and saving the broker's metadata through the store.

The broker owns no files: topics.json, subscriptionGroup.json,
consumerOffset.json, delayOffset.json and popState.json travel as bytes through
the store's GetConfig/PutConfig, which writes them atomically under
``<root>/config/``. Topic and group tables are saved as soon as they change;
offsets, which change on every commit, are saved every
``offset_persist_interval_ms`` when they moved, and at shutdown (delay offsets
the same way: the scheduler repairs a crash between a delivery and the next
write, see :mod:`services.broker.delay.schedule_service`; POP state too, see
:mod:`services.broker.metadata.pop_state`, whose secret, popSecret.json, is
written once, as soon as it is created at the first start, and is never among
the :meth:`MetadataPersister.documents`).

Writes of one file are serialised by a lock and always send the table as it
is when the lock is taken, so an older snapshot can never land after a newer
one.
"""

from __future__ import annotations

import asyncio
import logging

from boltmq.kernel import runtime
from services.broker.errors import BrokerError
from services.broker.metadata.consumer_offset import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
from services.broker.metadata.delay_offset import DELAY_OFFSET_FILE, DelayOffsetManager
from services.broker.metadata.pop_state import POP_SECRET_FILE, POP_STATE_FILE, PopState
from services.broker.metadata.subscription_group import (
    SUBSCRIPTION_GROUP_FILE,
    SubscriptionGroupManager,
)
from services.broker.metadata.topic_config import TOPICS_FILE, TopicConfigManager
from services.broker.store.store_client import StoreClient

log = logging.getLogger(__name__)


class MetadataPersister:
    """Moves the three metadata tables between memory and the store."""

    def __init__(
        self,
        store: StoreClient,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        offset_persist_interval_ms: int,
        delay_offsets: DelayOffsetManager | None = None,
        pop_state: PopState | None = None,
    ) -> None:
        self._store = store
        self._pop_state = pop_state or PopState()
        self._saved_pop_version = 0
        self._delay_offsets = delay_offsets or DelayOffsetManager()
        self._saved_delay_version = 0
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._interval_s = offset_persist_interval_ms / 1000
        self._locks = {
            name: asyncio.Lock()
            for name in (
                TOPICS_FILE,
                SUBSCRIPTION_GROUP_FILE,
                CONSUMER_OFFSET_FILE,
                DELAY_OFFSET_FILE,
                POP_STATE_FILE,
            )
        }
        self._saved_offsets_version = 0
        self._task: asyncio.Task[None] | None = None

    async def load(self, wait_s: float) -> None:
        """Read every table from the store, waiting up to ``wait_s`` for it to serve.

        A missing file leaves the table at its defaults; the system topics are
        then written at once so the store holds what the broker announces.
        """
        await self._store.wait_until_serving(wait_s)
        topics = await self._store.get_config(TOPICS_FILE)
        if topics is not None:
            self._topics.load_json(topics)
        else:
            await self.save_topics()
        groups = await self._store.get_config(SUBSCRIPTION_GROUP_FILE)
        if groups is not None:
            self._groups.load_json(groups)
        offsets = await self._store.get_config(CONSUMER_OFFSET_FILE)
        if offsets is not None:
            self._offsets.load_json(offsets)
        self._saved_offsets_version = self._offsets.version
        delay = await self._store.get_config(DELAY_OFFSET_FILE)
        if delay is not None:
            self._delay_offsets.load_json(delay)
        self._saved_delay_version = self._delay_offsets.version
        pop = await self._store.get_config(POP_STATE_FILE)
        if pop is not None:
            self._pop_state.load_json(pop)
        self._saved_pop_version = self._pop_state.version
        secret = await self._store.get_config(POP_SECRET_FILE)
        if secret is not None:
            self._pop_state.load_secret_json(secret)
        if self._pop_state.ensure_secret():
            await self._store.put_config(POP_SECRET_FILE, self._pop_state.secret_json())

    def start(self) -> None:
        """Save changed offsets every interval, in the background."""
        self._task = asyncio.create_task(self._run(), name="offset-persister")

    async def stop(self) -> None:
        """Stop the periodic saves and save whatever changed since the last one."""
        task, self._task = self._task, None
        await runtime.cancel_and_wait(task)
        await self.save_offsets()
        await self.save_delay_offsets()
        await self.save_pop_state()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            # Without this loop no consumer offset would be saved again.
            with runtime.one_round("saving offsets and POP state", log):
                try:
                    await self.save_offsets()
                    await self.save_delay_offsets()
                    await self.save_pop_state()
                except BrokerError as exc:
                    log.warning(
                        "cannot save consumer offsets, delay offsets or POP state (will retry): %s",
                        exc,
                    )

    def documents(self) -> dict[str, bytes]:
        """Every table as the JSON document it is saved as, by file name."""
        return {
            TOPICS_FILE: self._topics.to_json(),
            SUBSCRIPTION_GROUP_FILE: self._groups.to_json(),
            CONSUMER_OFFSET_FILE: self._offsets.to_json(),
            DELAY_OFFSET_FILE: self._delay_offsets.to_json(),
            POP_STATE_FILE: self._pop_state.to_json(),  # its secret never (popSecret.json)
        }

    async def save_topics(self) -> None:
        """Write topics.json now."""
        async with self._locks[TOPICS_FILE]:
            await self._store.put_config(TOPICS_FILE, self._topics.to_json())

    async def save_groups(self) -> None:
        """Write subscriptionGroup.json now."""
        async with self._locks[SUBSCRIPTION_GROUP_FILE]:
            await self._store.put_config(SUBSCRIPTION_GROUP_FILE, self._groups.to_json())

    async def save_offsets(self) -> bool:
        """Write consumerOffset.json when offsets changed since the last write."""
        async with self._locks[CONSUMER_OFFSET_FILE]:
            version = self._offsets.version
            if version == self._saved_offsets_version:
                return False
            await self._store.put_config(CONSUMER_OFFSET_FILE, self._offsets.to_json())
            self._saved_offsets_version = version
            return True

    async def copy_delay_offsets(self, document: bytes) -> None:
        """Take the master's delayOffset.json (a replica's MetadataSync) and save it."""
        self._delay_offsets.load_json(document)
        await self.save_delay_offsets()

    async def save_delay_offsets(self) -> bool:
        """Write delayOffset.json when the scheduler moved since the last write."""
        async with self._locks[DELAY_OFFSET_FILE]:
            version = self._delay_offsets.version
            if version == self._saved_delay_version:
                return False
            await self._store.put_config(DELAY_OFFSET_FILE, self._delay_offsets.to_json())
            self._saved_delay_version = version
            return True

    async def copy_pop_secret(self, document: bytes) -> None:
        """Take the master's POP secret (a replica's MetadataSync, unsealed) and keep it."""
        self._pop_state.load_secret_json(document)
        await self._store.put_config(POP_SECRET_FILE, document)

    async def copy_pop_state(self, document: bytes) -> None:
        """Take the master's popState.json (a replica's MetadataSync) and save it."""
        self._pop_state.load_json(document)
        await self.save_pop_state()

    async def save_pop_state(self) -> bool:
        """Write popState.json when the POP state changed since the last write."""
        async with self._locks[POP_STATE_FILE]:
            version = self._pop_state.version
            if version == self._saved_pop_version:
                return False
            await self._store.put_config(POP_STATE_FILE, self._pop_state.to_json())
            self._saved_pop_version = version
            return True
