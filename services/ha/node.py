"""One HA service's parts and the role watcher that switches between them.

The same process serves both sides (docs/ha.md): it reads its store's role
every ``role_check_interval_ms``. While the store is a MASTER it accepts
Replicate streams and keeps the ReportReplicas stream to the store open;
while it is a REPLICA it runs the follower. A promotion stops the follower at
once (nothing more is appended once the change is seen) and a demotion ends
every replica's stream and starts following. Rejected: a push from the store
on role changes, which would make the store call out to its HA service and
point a lower layer at a higher one.

With ``controller_endpoints`` set, the node also runs the controller
(:mod:`services.ha.controller`), which changes the store's role itself (elected:
promote; fenced or not elected: demote); the watcher then follows the store's
role as it does after a manual promotion.
"""

from __future__ import annotations

import asyncio
import logging

from opentelemetry.metrics import MeterProvider

from boltmq.kernel import runtime, tls
from boltmq.v1 import ha_pb2, store_pb2
from services.ha.config import HAConfig
from services.ha.controller import Controller
from services.ha.errors import HAError
from services.ha.follower import Follower
from services.ha.master import MasterSide
from services.ha.master_locator import MasterLocator
from services.ha.metrics import LagMetrics
from services.ha.progress import ProgressForwarder
from services.ha.replicas import ConnectedReplicas
from services.ha.store_client import HAStoreClient

log = logging.getLogger(__name__)

MASTER = "MASTER"
REPLICA = "REPLICA"


class HANode:
    """The HA service's state: store client, master side, follower and role watcher."""

    def __init__(self, config: HAConfig, meter_provider: MeterProvider | None = None) -> None:
        self.config = config
        self.tls = tls.client_tls(config)
        """TLS of the HA service's own calls: its store, the registry, the master HA."""
        self.store = HAStoreClient(config.store_address, config.store_timeout_ms, self.tls)
        self.replicas = ConnectedReplicas()
        self.forwarder = ProgressForwarder(self.store, self.replicas.acked_offsets)
        self.master = MasterSide(config, self.store, self.replicas, self.forwarder)
        self.locator = MasterLocator(config, self.tls)
        self.follower: Follower | None = None
        self.controller = (
            Controller(config, self.store, self.replicas.acked_offsets)
            if config.controller_endpoint_list
            else None
        )
        """Elects the group's master through etcd; None without ``controller_endpoints``."""
        self.info: store_pb2.StoreInfo | None = None
        """The store's info as of the last successful poll."""
        self._watch_task: asyncio.Task[None] | None = None
        self._store_failing = False
        self.metrics = LagMetrics(self.replicas.lags, self._follower_lag_bytes, meter_provider)

    async def start(self, own_address: str) -> None:
        """Wait for the store's first answer, take up its role, then watch it."""
        self.follower = Follower(self.config, self.store, self.locator, own_address, self.tls)
        info = await self._first_store_info()
        await self._apply_role(info)
        self._watch_task = asyncio.create_task(self._watch(), name="ha-role-watch")
        if self.controller is not None:
            self.controller.on_group_epoch = self.follower.note_group_epoch
            self.controller.start(own_address)

    async def before_stop(self) -> None:
        """End every replica's stream (they would hold the server's grace period)."""
        self._end_master_side("the HA service is stopping")

    async def stop(self) -> None:
        """Stop electing (a master demotes its store), watching, following and forwarding;
        close the connections."""
        if self.controller is not None:
            await self.controller.stop()
        task, self._watch_task = self._watch_task, None
        await runtime.cancel_and_wait(task)
        if self.follower is not None:
            await self.follower.stop()
        self._end_master_side("the HA service is stopping")
        await self.forwarder.stop()
        await self.locator.close()
        await self.store.close()

    async def _first_store_info(self) -> store_pb2.StoreInfo:
        """GetStoreInfo, waiting for a store that is not up (or not recovered) yet."""
        pause_s = self.config.role_check_interval_ms / 1000
        while True:
            try:
                return await self.store.store_info(wait_for_ready=True)
            except HAError as exc:
                if not self._store_failing:
                    log.warning("waiting for the store at %s: %s", self.store.address, exc)
                self._store_failing = True
            await asyncio.sleep(pause_s)

    async def _watch(self) -> None:
        pause_s = self.config.role_check_interval_ms / 1000
        while True:
            await asyncio.sleep(pause_s)
            try:
                info = await self.store.store_info()
            except HAError as exc:
                if not self._store_failing:
                    log.warning("cannot read the store's role: %s", exc)
                self._store_failing = True
                continue
            if self._store_failing:
                log.info("the store at %s answers again", self.store.address)
                self._store_failing = False
            # The watcher must outlive a bug in one pass: without it roles never change.
            with runtime.one_round("applying the store's role", log):
                await self._apply_role(info)

    async def _apply_role(self, info: store_pb2.StoreInfo) -> None:
        """Run the side that the store's role calls for, and only that one."""
        previous = self.info.role if self.info is not None else ""
        self.info = info
        assert self.follower is not None
        if info.role == MASTER:
            if self.follower.running:
                await self.follower.stop()
                log.info("the store is now a master: stopped following")
            self.replicas.note_master_max(info.commitlog_max_offset)
            if not self.master.active:
                self.master.activate()
                self.forwarder.start()
                log.info("the store is a master (epoch %d): serving replicas", info.epoch)
        elif info.role == REPLICA:
            if self.master.active:
                self._end_master_side("the store is now a replica")
                await self.forwarder.stop()
            if not self.follower.running:
                self.follower.start()
                log.info("the store is a replica (epoch %d): following", info.epoch)
        elif info.role != previous:
            log.warning(
                "the store reports an unknown role %r: neither serving nor following", info.role
            )

    def _end_master_side(self, reason: str) -> None:
        if not self.master.active:
            return
        for address in self.replicas.acked_offsets():
            self.forwarder.disconnected(address)
        self.master.deactivate(reason)

    def _follower_lag_bytes(self) -> int | None:
        follower = self.follower
        if follower is None or not follower.running:
            return None
        status = follower.status
        return max(0, status.master_max_offset - status.store_max_offset)

    async def status(self) -> ha_pb2.HAStatus:
        """Replication state of this service (either side)."""
        try:
            info = await self.store.store_info()
        except HAError:
            info = self.info if self.info is not None else store_pb2.StoreInfo()
        self.replicas.note_master_max(info.commitlog_max_offset if info.role == MASTER else 0)
        status = ha_pb2.HAStatus(
            role=info.role,
            store_address=self.store.address,
            max_offset=info.commitlog_max_offset,
            epoch=info.epoch,
        )
        if self.master.active:
            status.replicas.extend(lag.to_proto() for lag in self.replicas.lags())
        follower = self.follower
        if follower is not None and follower.running:
            status.master_address = follower.status.master_address
            status.connected = follower.status.connected
            status.master_max_offset = follower.status.master_max_offset
        return status
