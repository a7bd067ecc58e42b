"""RoleChanges: the store's current role, and every change of it.

A store is a master (it accepts client writes and assigns queue offsets) or
a replica (it takes the master's CommitLog bytes as they are). The role is
loaded from ``<root>/ha/role.json`` at start (:class:`services.store.role.RoleFile`)
and changes only here, each change saved before it takes effect:

- :meth:`RoleChanges.promote`: a replica becomes the master of a new epoch,
  once everything it received is dispatched and every queue's next offset is
  rebuilt from the consume queues;
- :meth:`RoleChanges.demote`: the store follows a master, adopting its epoch
  history; SYNC_MASTER appends still waiting for a replica give up;
- :meth:`RoleChanges.truncate`: a replica cuts its CommitLog back to a record
  boundary (a rejoining old master drops the tail no newer master had), with
  the consume-queue and index entries past the cut.

The facade (:class:`services.store.store.MessageStore`) checks the store is
running and holds its state lock around each change; it hands this class the
parts a change touches, never itself. See ``docs/ha.md`` for epochs and
promotion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.consume_queue import ConsumeQueueTable
from services.store.dispatcher import Dispatcher
from services.store.flusher import CommitLogFlusher
from services.store.index_service import IndexService
from services.store.recovery import finish_queue_offsets
from services.store.replica_tracker import ReplicaTracker
from services.store.role import MASTER_ROLES, RoleChangeRefused, RoleFile, RoleState

log = logging.getLogger(__name__)


class RoleChanges:
    """The store's role (``role``) and its promotion, demotion and truncation."""

    def __init__(
        self,
        config: StoreConfig,
        role_file: RoleFile,
        commitlog: CommitLog,
        queues: ConsumeQueueTable,
        index: IndexService,
        dispatcher: Dispatcher,
        replicas: ReplicaTracker,
    ) -> None:
        self.config = config
        self.role_file = role_file
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.dispatcher = dispatcher
        self.replicas = replicas
        self.role = RoleState(config.broker_role)
        """The role the store runs as now (replaced whole by every change)."""

    def load(self) -> list[str]:
        """Take the saved role (a master keeps the configured flavour, ASYNC or SYNC);
        notes on a role file that could not be used."""
        role, note = self.role_file.load(self.config.broker_role)
        if role.is_master and self.config.broker_role in MASTER_ROLES:
            role.broker_role = self.config.broker_role
        self.role = role
        return [note] if note else []

    def _promoted_role(self) -> str:
        """A store configured as a master returns to that flavour (a SYNC_MASTER demoted
        by a fence and elected again stays SYNC); a replica takes ``promoted_broker_role``."""
        configured = self.config.broker_role
        return configured if configured in MASTER_ROLES else self.config.promoted_broker_role

    def _copy(self) -> RoleState:
        role = self.role
        return RoleState(role.broker_role, role.epoch, list(role.epochs), role.broker_id)

    def promote(
        self, epoch: int, broker_id: int, wait_dispatched: Callable[[], object]
    ) -> RoleState:
        """Turn this replica into a master of a new epoch; writes are accepted after it.

        Everything received is dispatched first (``wait_dispatched``) and the
        next queue offset of every queue is rebuilt from the consume queues, so
        new appends continue each queue where replication left it.
        """
        if self.role.is_master:
            raise RoleChangeRefused(
                f"store is already {self.role.broker_role} (epoch {self.role.epoch})"
            )
        wait_dispatched()
        commitlog = self.commitlog
        with commitlog.lock, self.dispatcher.paused():
            finish_queue_offsets(commitlog, self.queues)
            role = self._copy()
            role.promote(self._promoted_role(), epoch, commitlog.max_offset)
            role.broker_id = broker_id
            self.role_file.save(role)
            self.replicas.reset(commitlog.max_offset)
            self.role = role
        log.warning(
            "store promoted to %s, epoch %d from CommitLog offset %d",
            role.broker_role,
            role.epoch,
            commitlog.max_offset,
        )
        return role

    def demote(
        self, epoch: int, epochs: Sequence[tuple[int, int]], broker_id: int, only_if_replica: bool
    ) -> RoleState:
        """Follow a master (of ``epoch``, with its epoch history): client writes are refused.

        With ``only_if_replica`` a master is left alone (RoleChangeRefused): the
        HA follower's bookkeeping must never undo a promotion.
        """
        if only_if_replica and self.role.is_master:
            raise RoleChangeRefused(
                f"the store is {self.role.broker_role} (epoch "
                f"{self.role.epoch}); only_if_replica refuses to demote it"
            )
        role = self._copy()
        role.demote(epoch, list(epochs), broker_id)
        self.role_file.save(role)
        self.role = role
        self.replicas.gate.close()  # SYNC_MASTER appends still waiting give up now
        return role

    def truncate(self, offset: int, flusher: CommitLogFlusher | None) -> int:
        """Cut the CommitLog back to ``offset`` (a record boundary), with what derives from it.

        Replica stores only. Consume queues and index entries past the cut go
        too, and the cut bytes are zeroed (a crash cannot bring them back).
        Returns how many bytes were cut.
        """
        if self.role.is_master:
            raise RoleChangeRefused("only a replica store can be truncated")
        commitlog = self.commitlog
        if not commitlog.min_offset <= offset <= commitlog.max_offset:
            raise ValueError(
                f"offset {offset} is outside the CommitLog "
                f"[{commitlog.min_offset}, {commitlog.max_offset}]"
            )
        if not commitlog.is_record_start(offset):
            raise ValueError(f"offset {offset} is not the start of a record")
        if offset == commitlog.max_offset:
            return 0
        with commitlog.lock, self.dispatcher.paused():
            cut = commitlog.files.truncate_to(offset)
            shortened = {
                (cq.topic, cq.queue_id): None for cq in self.queues if cq.truncate_past(offset)
            }
            notes = self.index.truncate_past(offset)
            self.dispatcher.rewind(offset)
            finish_queue_offsets(commitlog, self.queues)
            if flusher is not None and flusher.flushed_offset > offset:
                flusher.gate.reset(offset)
        # Watchers hear of every queue that lost entries as of an arrival: what they knew
        # of its end (a broker's kept "nothing new" answer) no longer holds.
        self.dispatcher.notify(shortened)
        for note in notes:
            log.warning("truncate: %s", note)
        log.warning("CommitLog truncated to %d: %d bytes cut", offset, cut)
        return cut
