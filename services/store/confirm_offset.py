"""ConfirmOffset: how far consumers may read, so no failover takes back what they saw.

Under SYNC_MASTER an append no replica acknowledged stays in the master's
CommitLog, and a failover may cut it (``docs/ha.md``, "The confirm offset").
The store dispatches nothing past this offset (with ``read_confirmed_only``),
so pulls, queue ends and long-poll wake-ups stop there. It rises when a
replica acknowledges (master), with every raw append (replica: its master and
itself hold those bytes), at promotion and at start (to the CommitLog end); a
truncation lowers it to the cut; a demotion keeps it.
"""

from __future__ import annotations

import threading

from services.store.dispatcher import Dispatcher
from services.store.role import RoleState


class ConfirmOffset:
    """The offset and the dispatcher it releases."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.offset = 0
        self._dispatcher = dispatcher
        self._lock = threading.Lock()

    def raise_to(self, offset: int, *, dispatch_now: bool = False) -> bool:
        """Raise it (never lowers) and wake the dispatcher, or dispatch on this thread
        (``dispatch_now``: before the caller acknowledges what it covers); whether it rose."""
        with self._lock:
            if offset <= self.offset:
                return False
            self.offset = offset
        if dispatch_now:
            self._dispatcher.dispatch_once()
        else:
            self._dispatcher.wake()
        return True

    def lower_to(self, offset: int) -> None:
        """After a truncation: nothing past the cut is confirmed."""
        with self._lock:
            self.offset = min(self.offset, offset)

    def reset(self, offset: int) -> None:
        """At start: what the store recovered counts as confirmed."""
        with self._lock:
            self.offset = offset

    def cap(self, limit: int, role: RoleState, enabled: bool) -> int:
        """``limit`` (what could be dispatched) capped for a SYNC_MASTER or a replica."""
        if enabled and (role.sync_master or not role.is_master):
            return min(limit, self.offset)
        return limit
