"""StoreRole: what the broker's store is (master or replica), and changing it (docs/ha.md).

A broker group is one master store (registered as broker id 0) and replicas
(ids > 0), each store fronted by its own broker. The broker does not decide
its role: its store does, durably (``SetRole``). This module keeps the
broker's view of it fresh:

- every ``role_check_interval_ms`` it reads the store's info; a change (a
  promotion, a demotion) calls ``on_change`` so the broker re-registers at
  once under its new id and epoch;
- :meth:`StoreRole.promote` turns a caught-up replica into the master
  (``boltmq admin broker promote``);
- :meth:`StoreRole.demote` follows a registry's word that a newer-epoch
  master holds the group: the old master's store becomes a replica, and its
  HA service starts following the new master (truncating the tail the new
  master never had).

The registered id is 0 for a master; a replica uses the id its store was
given at demotion, else the broker's configured ``broker_id``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from boltmq.kernel import channels, runtime
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import ha_pb2, ha_pb2_grpc, store_pb2
from services.broker.errors import BrokerError, FailedPrecondition, StoreUnavailable
from services.broker.store.store_client import StoreClient

log = logging.getLogger(__name__)

MASTER_ID = 0
HA_STATUS_TIMEOUT_S = 3.0


class StoreRole:
    """The broker's cached view of its store's role, epoch and registered id."""

    def __init__(
        self,
        store: StoreClient,
        configured_broker_id: int,
        ha_address: str,
        check_interval_ms: int,
        on_change: Callable[[], Awaitable[object]] | None = None,
        tls: ClientTLS | None = None,
    ) -> None:
        self._store = store
        self._tls = tls
        self._configured_id = configured_broker_id
        self._ha_address = ha_address
        self._interval_s = check_interval_ms / 1000
        self._on_change = on_change
        self.is_master = configured_broker_id == MASTER_ID
        self.epoch = 0
        self.store_broker_id = -1
        self.max_offset = 0
        self.appends_wait = True
        """Whether the store's appends wait for a flush or a replica (until its first info
        says otherwise, they may)."""
        self._task: asyncio.Task[None] | None = None

    @property
    def broker_id(self) -> int:
        """The id to register with: 0 for a master, else the replica's id."""
        if self.is_master:
            return MASTER_ID
        if self.store_broker_id > 0:
            return self.store_broker_id
        return self._configured_id if self._configured_id > 0 else 1

    def _apply(self, info: store_pb2.StoreInfo) -> bool:
        """Take the store's info; True when the role, epoch or id changed."""
        before = (self.is_master, self.epoch, self.store_broker_id)
        self.is_master = info.role == "MASTER"
        self.epoch = info.epoch
        self.store_broker_id = info.broker_id
        self.max_offset = info.commitlog_max_offset
        self.appends_wait = info.appends_wait
        return before != (self.is_master, self.epoch, self.store_broker_id)

    async def refresh(self) -> bool:
        """Read the store's role now; True when it changed. StoreUnavailable if unreachable."""
        return self._apply(await self._store.store_info())

    def start(self) -> None:
        """Check the role every interval in the background."""
        self._task = asyncio.create_task(self._run(), name="store-role")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await runtime.cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            # Without this loop a failover would never reach the broker's registration.
            with runtime.one_round("store role check", log):
                try:
                    changed = await self.refresh()
                except BrokerError:
                    continue  # the store is restarting: keep the last known role
                if changed:
                    log.warning(
                        "store role is now %s (epoch %d): registering as broker id %d",
                        "MASTER" if self.is_master else "REPLICA",
                        self.epoch,
                        self.broker_id,
                    )
                    if self._on_change is not None:
                        await self._on_change()

    async def promote(self, max_lag_bytes: int) -> None:
        """Make the store the master; FailedPrecondition unless it is a caught-up replica."""
        await self.refresh()
        if self.is_master:
            raise FailedPrecondition(f"the store is already the master (epoch {self.epoch})")
        if max_lag_bytes > 0:
            lag = await self._replication_lag()
            if lag > max_lag_bytes:
                raise FailedPrecondition(
                    f"the store is {lag} bytes behind its master (max_lag_bytes "
                    f"{max_lag_bytes}); let it catch up or pass max_lag_bytes 0"
                )
        info = await self._store.set_role(
            store_pb2.SetRoleRequest(role=store_pb2.MASTER, broker_id=MASTER_ID)
        )
        self._apply(info)
        log.warning(
            "promoted: the store is the master of epoch %d from offset %d",
            info.epoch,
            info.commitlog_max_offset,
        )
        if self._on_change is not None:
            await self._on_change()

    async def _replication_lag(self) -> int:
        """Master end (as the HA service last heard it) minus the store's end."""
        if not self._ha_address:
            raise FailedPrecondition(
                "no ha_address configured: cannot tell how far behind the "
                "store is; pass max_lag_bytes 0 to promote anyway"
            )
        channel = channels.channel(self._ha_address, self._tls)
        try:
            status = await ha_pb2_grpc.HAServiceStub(channel).Status(
                ha_pb2.HAStatusRequest(), timeout=HA_STATUS_TIMEOUT_S
            )
        except Exception as exc:  # grpc.aio.AioRpcError and friends
            raise StoreUnavailable(
                f"HA service at {self._ha_address} did not answer: {exc}"
            ) from None
        finally:
            await channel.close()
        return max(0, status.master_max_offset - status.max_offset)

    async def demote(self, suggested_broker_id: int, master_address: str) -> None:
        """A newer-epoch master leads the group: become its replica under a free id."""
        info = await self._store.set_role(
            store_pb2.SetRoleRequest(role=store_pb2.REPLICA, broker_id=max(1, suggested_broker_id))
        )
        self._apply(info)
        log.warning(
            "demoted: %s leads the group with a newer epoch; this store is now replica "
            "id %d and its HA service follows the master",
            master_address,
            self.broker_id,
        )
