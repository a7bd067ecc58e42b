"""Controller: a broker group's master elected through etcd, and a master that fences itself.

Off unless ``controller_endpoints`` is set (docs/ha.md, "Automatic failover").
Every HA service of the group runs one; all their state is in etcd
(:mod:`services.ha.group_keys`, the key layout). Each holds one etcd lease (its
session) and announces its store's CommitLog end under it (``members/<ha
address>``). The lease is renewed on a beat of its own, every TTL/6 (three renewals
in the half TTL after which a master fences itself), each renewal in a task of its
own: a step waiting on a slow store or on etcd writes, or one slow renewal, delays no
other renewal, so only etcd itself not answering fences a master. A candidate whose
store did not answer its last step stops renewing (its announced end goes with its
lease: a dead store must not keep others from standing). Each *tick*
(``controller_lease_ms / 3``):

- **candidate** (not leading): a store that is a master although this
  service was not elected is demoted first (a restarted old master, or the
  configured master before the first election). When no ``master`` key
  exists and the store may stand (:func:`campaign_refusal`: it holds what the
  last master confirmed and no live member holds more), it runs the election
  transaction for epoch ``max(etcd epoch, store epoch) + 1`` (:func:`next_epoch`)
  under its lease; the winner promotes its store with that epoch (``SetRole``).
  A store that did not win the last election waits one tick after seeing the
  key gone, so the last master, back from a short etcd outage, takes its group
  back without a failover, and the members' announced ends are final. A
  ``master`` key naming this very service while it is not leading (a fenced
  term whose lease outlived the fence, or its previous process) is revoked.
  A candidate that sees an elected master tells its follower that master's
  epoch: chunks from a master of an older epoch are refused from then on.
- **master** (leading): check the store is still a master (else resign: demote
  and revoke), and raise ``confirmed`` to the highest offset a replica has
  acknowledged.

Self-fencing: a watchdog demotes the store as soon as the lease has not been
renewed for half its TTL (:class:`LeaseClock`), counted from when the last
successful renewal was *sent*, so before etcd can expire it and elect
another: two masters never acknowledge at once. A fenced store follows
whichever master is elected next (its follower truncates a tail that master
lacks) or, when it wins again, is promoted with a new epoch. On a graceful
stop the master demotes its store and revokes its lease, so a replica takes
over within a tick.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from boltmq.kernel import runtime
from boltmq.v1 import store_pb2
from services.ha.config import HAConfig
from services.ha.errors import ControllerUnavailable, HAError
from services.ha.group_keys import GroupKeys, GroupState, MasterRecord
from services.ha.store_client import HAStoreClient

log = logging.getLogger(__name__)

MASTER = "MASTER"
FENCE_AFTER_TTL_PART = 0.5
"""A master fences itself once the lease has gone unrenewed for this part of its TTL."""
STORE_FAILURES_MAX = 2
"""Ticks in a row the master's store may not answer before the master resigns."""
RENEWALS_PER_FENCE = 3
"""Lease renewals sent within the time a master may go unrenewed before it fences."""


def campaign_refusal(
    info: store_pb2.StoreInfo, state: GroupState, own_address: str, was_master: bool
) -> str:
    """Why this store may not stand for election now ("": it may).

    Before the first election only a store that was a master may stand (the
    group's configured master starts it: an empty replica must not win over a
    store holding data). After it, a store must hold at least ``confirmed``
    (the master raises it every tick to the highest offset a replica acked),
    and no live member may have announced more: under SYNC_MASTER every
    acknowledged append is in some replica that acked it, and the member
    holding the most holds all of them.
    """
    end = info.commitlog_max_offset
    if state.confirmed is None:
        if was_master:
            return ""
        return "no election yet and this store was never a master: the group's master starts"
    if end < state.confirmed:
        return f"the store ends at {end}, before the {state.confirmed} the last master confirmed"
    ahead = {a: e for a, e in state.members.items() if e > end and a != own_address}
    if ahead:
        address, their_end = max(ahead.items(), key=lambda item: item[1])
        return f"{address} holds more (its store ends at {their_end}, this one at {end})"
    return ""


def next_epoch(etcd_epoch: int, store_epoch: int) -> int:
    """The epoch an election is for: above every epoch etcd or this store has seen."""
    return max(etcd_epoch, store_epoch) + 1


class LeaseClock:
    """When a master must stop acknowledging: half a TTL after its last renewal was sent."""

    def __init__(self, lease_s: float) -> None:
        self.fence_after_s = lease_s * FENCE_AFTER_TTL_PART
        self._renewed_sent_at = float("-inf")

    def renewed(self, sent_at: float) -> None:
        """A grant or renewal sent at ``sent_at`` succeeded (etcd counts the TTL from later)."""
        self._renewed_sent_at = max(self._renewed_sent_at, sent_at)

    def fence_at(self) -> float:
        """The time at which the master must have fenced itself."""
        return self._renewed_sent_at + self.fence_after_s

    def must_fence(self, now: float) -> bool:
        return now >= self.fence_at()


class Controller:
    """One HA service's part in its group's elections (see the module docstring)."""

    def __init__(
        self,
        config: HAConfig,
        store: HAStoreClient,
        acked_offsets: Callable[[], dict[str, int]],
        keys: GroupKeys | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lease_s = config.controller_lease_ms // 1000
        self.tick_s = config.controller_lease_ms / 3000
        self._store = store
        self._store_address = config.store_address
        self._acked_offsets = acked_offsets
        self.keys = keys or GroupKeys(
            config.controller_endpoint_list,
            config.controller_prefix,
            config.cluster_name,
            config.broker_name,
            timeout_s=self.tick_s,
            credentials=config.controller_credentials(),
        )
        self._clock = clock
        self.own_address = ""
        self.leading = False
        self.epoch = 0
        self.lease_id = 0
        """The session lease (0: none now; granted at the next step)."""
        self._lease_clock = LeaseClock(self._lease_s)
        self.renew_s = self._lease_clock.fence_after_s / RENEWALS_PER_FENCE
        """The renewal beat (module docstring)."""
        self._renewals: set[asyncio.Task[None]] = set()
        """Renewals in flight (a slow one does not hold up the next)."""
        self._roles = asyncio.Lock()
        """Held around every role change, so a fence never interleaves with a promotion."""
        self._announced = -1
        self._was_master = False
        self._waited_for_last_master = False
        self._published = -1
        self._store_failures = 0
        self._last_notes: dict[str, str] = {}
        """The last reason logged by the steps and by the renewals (each its own)."""
        self._tasks: list[asyncio.Task[None]] = []
        self.on_group_epoch: Callable[[int], None] | None = None
        """Called with the elected master's epoch each tick a candidate sees one (the
        follower then refuses chunks of an older, deposed master)."""

    def start(self, own_address: str) -> None:
        """Run the steps, the lease renewals and the lease watchdog in the background."""
        self.own_address = own_address
        self._tasks = [
            asyncio.create_task(self._run(), name="ha-controller"),
            asyncio.create_task(self._keep_lease(), name="ha-lease-renewals"),
            asyncio.create_task(self._watchdog(), name="ha-lease-watchdog"),
        ]

    async def stop(self) -> None:
        """Stop; a master demotes its store; the lease is given up (a replica takes over)."""
        tasks, self._tasks = [*self._tasks, *self._renewals], []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._resign("the HA service is stopping")
        await self.keys.close()

    # ------------------------------------------------------------------ loops
    async def _run(self) -> None:
        while True:
            # The loop must outlive a bug in one pass: without it nothing is elected.
            with runtime.one_round("controller step", log):
                try:
                    await self.step()
                except HAError as exc:
                    self._note(f"controller step failed: {exc}")
            await asyncio.sleep(self.tick_s)

    async def _keep_lease(self) -> None:
        while True:
            renewal = asyncio.create_task(self.renew_lease(), name="ha-lease-renewal")
            self._renewals.add(renewal)
            renewal.add_done_callback(self._renewals.discard)
            await asyncio.sleep(self.renew_s)

    async def _watchdog(self) -> None:
        while True:
            if self.leading and self._lease_clock.must_fence(self._clock()):
                await self.fence("the lease was not renewed within half its TTL")
            await asyncio.sleep(self.tick_s / 4)

    def _note(self, message: str, source: str = "step") -> None:
        """Log a reason once while it stays the same (a step repeats every tick)."""
        if message != self._last_notes.get(source):
            log.warning("%s", message)
        self._last_notes[source] = message

    # ------------------------------------------------------------------ steps
    async def step(self) -> None:
        """One tick: grant a lease when there is none (the renewal beat keeps it) and
        announce the store's end; then hold the master role, or stand for election when
        allowed."""
        try:
            info = await self._store.store_info()
        except HAError as exc:
            # A candidate's renewals stop meanwhile; a master rides out one miss.
            self._store_failures += 1
            if self.leading and self._store_failures >= STORE_FAILURES_MAX:
                await self._resign(f"the store does not answer ({exc})")
            raise
        self._store_failures = 0
        if info.role == MASTER and not self.leading:
            # Not elected (before etcd is even asked): it must not acknowledge meanwhile.
            info = await self._demote_unelected()
        if self.lease_id == 0:
            sent_at = self._clock()
            self.lease_id = await self.keys.grant(self._lease_s)
            self._announced = -1
            self._lease_clock.renewed(sent_at)
        if info.commitlog_max_offset != self._announced:
            await self.keys.announce(self.own_address, info.commitlog_max_offset, self.lease_id)
            self._announced = info.commitlog_max_offset
        if self.leading:
            await self._hold(info)
        else:
            await self._stand(info)

    async def renew_lease(self) -> None:
        """One renewal of the session lease (the renewal beat's); a lost lease fences.

        Nothing is sent without a lease (the next step grants one) or for a candidate
        whose store did not answer its last step."""
        lease_id = self.lease_id
        if lease_id == 0 or (self._store_failures and not self.leading):
            return
        sent_at = self._clock()
        try:
            alive = await self.keys.keep_alive(lease_id)
        except HAError as exc:
            self._note(f"renewing the lease failed: {exc}", "renewal")
            return
        if lease_id != self.lease_id:
            return  # given up (or lost and granted anew) meanwhile
        if alive:
            self._lease_clock.renewed(sent_at)
            self._last_notes.pop("renewal", None)  # the next failure is news again
            return
        self.lease_id = 0
        await self.fence("etcd no longer has the lease")

    async def _demote_unelected(self) -> store_pb2.StoreInfo:
        self._was_master = True
        async with self._roles:
            info = await self._store.fence()
        log.warning("the store was a master nobody elected: demoted it to a replica")
        return info

    async def _stand(self, info: store_pb2.StoreInfo) -> None:
        state = await self.keys.state()
        master = state.master
        if master is not None:
            self._waited_for_last_master = False
            if self.on_group_epoch is not None:
                self.on_group_epoch(master.epoch)
            if master.ha_address == self.own_address:
                # Named master but not leading: a fenced term (its lease outlived the
                # fence) or a previous process. The key must go before anyone is elected.
                log.warning("giving up the master key of epoch %d, held no more", master.epoch)
                if master.lease_id == self.lease_id:
                    await self._give_up_lease()
                else:
                    await self.keys.revoke(master.lease_id)
            return
        if state.last_master not in ("", self.own_address) and not self._waited_for_last_master:
            self._waited_for_last_master = True  # one tick for the last master to come back
            return
        refusal = campaign_refusal(info, state, self.own_address, self._was_master)
        if refusal:
            self._note(f"not standing for election: {refusal}")
            return
        await self._campaign(info, state)

    async def _campaign(self, info: store_pb2.StoreInfo, state: GroupState) -> None:
        epoch = next_epoch(state.epoch, info.epoch)
        record = MasterRecord(self.own_address, self._store_address, epoch)
        if not await self.keys.campaign(state, record, self.lease_id, info.commitlog_max_offset):
            return
        async with self._roles:
            self.leading, self.epoch = True, epoch
            # Only ever raised: the last master's (or, first, this store's end) stands.
            self._published = (
                state.confirmed if state.confirmed is not None else info.commitlog_max_offset
            )
            self._waited_for_last_master = False
            try:
                await self._store.promote(epoch)
            except HAError as exc:
                log.warning("elected for epoch %d but the store refused: %s", epoch, exc)
                self.leading = False
                await self._give_up_lease()
                return
        self._last_notes.clear()
        log.warning("elected master of epoch %d: the store is promoted", epoch)

    async def _hold(self, info: store_pb2.StoreInfo) -> None:
        if info.role != MASTER:
            await self._resign("the store is no longer a master")
            return
        confirmed = max(self._acked_offsets().values(), default=0)
        if confirmed > self._published:
            await self.keys.publish_confirmed(confirmed)
            self._published = confirmed

    # ------------------------------------------------------------ role changes
    async def fence(self, reason: str) -> None:
        """Stop acknowledging now: demote the store (it keeps its data and epoch)."""
        async with self._roles:
            if not self.leading:
                return
            self.leading = False
            log.warning("fencing: %s; demoting the store of epoch %d", reason, self.epoch)
            try:
                await self._store.fence()
            except HAError as exc:
                log.warning("could not demote the store (%s); it is unreachable", exc)

    async def _resign(self, reason: str) -> None:
        """Fence, then give the lease up so another store is elected at once."""
        await self.fence(reason)
        await self._give_up_lease()

    async def _give_up_lease(self) -> None:
        lease_id, self.lease_id = self.lease_id, 0
        if not lease_id:
            return
        try:
            await self.keys.revoke(lease_id)
        except ControllerUnavailable as exc:
            log.warning("could not revoke the lease (%s): it expires on its own", exc)
