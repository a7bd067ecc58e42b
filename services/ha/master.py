"""The master side of replication: accepts Replicate streams while the store is a master.

For each stream it reads the replica's first report, plans where to resume
(:mod:`services.ha.resume`), answers with the handshake chunk and hands the
rest of the stream to a :class:`~services.ha.replica_session.ReplicaSession`.
A role change or shutdown ends every session at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator

from boltmq.v1 import ha_pb2, store_pb2
from services.ha.config import HAConfig
from services.ha.errors import CannotResume, StreamSilent
from services.ha.progress import ProgressForwarder
from services.ha.replica_session import ReplicaSession
from services.ha.replicas import ConnectedReplicas
from services.ha.resume import MasterView, ResumePlan, plan_resume
from services.ha.store_client import HAStoreClient

log = logging.getLogger(__name__)


class NotMaster(CannotResume):
    """This HA service's store is not a master (now); the replica must look elsewhere."""


def master_view(info: store_pb2.StoreInfo) -> MasterView:
    """The resume planner's input from the master store's GetStoreInfo."""
    return MasterView(
        min_offset=info.commitlog_min_offset,
        max_offset=info.commitlog_max_offset,
        epoch=info.epoch,
        epochs=[(e.epoch, e.start_offset) for e in info.epochs],
        segment_bytes=info.segment_bytes,
    )


def handshake_chunk(info: store_pb2.StoreInfo, plan: ResumePlan) -> store_pb2.CommitLogChunk:
    """The first message of a Replicate stream."""
    return store_pb2.CommitLogChunk(
        offset=plan.start_offset,
        master_max_offset=info.commitlog_max_offset,
        master_epoch=info.epoch,
        epochs=list(info.epochs),
        truncate_to=plan.truncate_to,
        segment_bytes=info.segment_bytes,
        handshake=True,
    )


class MasterSide:
    """Serves Replicate streams while the store is a master."""

    def __init__(
        self,
        config: HAConfig,
        store: HAStoreClient,
        replicas: ConnectedReplicas,
        forwarder: ProgressForwarder,
    ) -> None:
        self._config = config
        self._store = store
        self._replicas = replicas
        self._forwarder = forwarder
        self._sessions: set[ReplicaSession] = set()
        self.active = False
        """True while the store is a master (set by the role watcher)."""

    def activate(self) -> None:
        """The store is a master: accept replicas."""
        self.active = True

    def deactivate(self, reason: str) -> None:
        """The store is no longer a master (or the service stops): end every stream."""
        self.active = False
        for session in list(self._sessions):
            session.close(reason)
        self._replicas.clear()

    async def replicate(
        self, reports: AsyncIterator[ha_pb2.ReplicaReport], peer: str
    ) -> AsyncGenerator[store_pb2.CommitLogChunk, None]:
        """The chunks of one Replicate stream (handshake first)."""
        first = await _first_report(reports, self._config.housekeeping_interval_ms / 1000)
        if first is None:
            return
        if not self.active:
            raise NotMaster("this HA service's store is not a master")
        info = await self._store.store_info()
        if info.role != "MASTER":
            raise NotMaster(f"this HA service's store is {info.role or 'not a master'}")
        self._replicas.note_master_max(info.commitlog_max_offset)
        address = first.replica_address or peer
        try:
            plan = plan_resume(
                first.max_offset, first.epoch, master_view(info), self._config.replica_start
            )
        except CannotResume as exc:
            log.error("replica %s cannot be served: %s", address, exc)
            raise
        log.info(
            "replica %s (end %d, epoch %d) resumes at %d%s",
            address,
            first.max_offset,
            first.epoch,
            plan.start_offset,
            f" after truncating to {plan.truncate_to}" if plan.truncate_to >= 0 else "",
        )
        session = ReplicaSession(
            self._config,
            self._store,
            self._replicas,
            self._forwarder,
            address,
            first.max_offset,
            plan,
        )
        self._sessions.add(session)
        try:
            yield handshake_chunk(info, plan)
            async for chunk in session.stream(reports):
                yield chunk
        finally:
            self._sessions.discard(session)
            session.finish()


async def _first_report(
    reports: AsyncIterator[ha_pb2.ReplicaReport], timeout_s: float
) -> ha_pb2.ReplicaReport | None:
    """The replica's first report; None when it hung up first."""
    try:
        async with asyncio.timeout(timeout_s):
            return await anext(reports)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        raise StreamSilent(f"no report within {timeout_s:g} s of connecting") from None
