"""The controller's election and fencing rules, step by step, over an in-memory etcd.

The controller (:mod:`services.ha.controller`) is driven one ``step`` (and one lease
renewal) at a time with fakes of etcd (the group's keys, with leases) and of the store
(its role, epoch and CommitLog end); time is a number the test moves, except where
the controller's own loops run. The same logic
against a real etcd and real processes: tests/integration/test_ha_controller.py.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from boltmq.v1 import store_pb2
from services.ha.config import HAConfig
from services.ha.controller import (
    RENEWALS_PER_FENCE,
    Controller,
    LeaseClock,
    campaign_refusal,
    next_epoch,
)
from services.ha.errors import ControllerUnavailable, StoreUnavailable
from services.ha.group_keys import GroupState, MasterRecord

LEASE_MS = 3000


class FakeEtcd:
    """The group's keys and leases, as etcd keeps them (a lease's expiry is explicit)."""

    def __init__(self) -> None:
        self.master: MasterRecord | None = None
        self.epoch = 0
        self.epoch_revision = 0
        self.last_master = ""
        self.confirmed: int | None = None
        self.members: dict[str, tuple[int, int]] = {}
        """HA address -> (announced end, lease)."""
        self.leases: set[int] = set()
        self._ids = itertools.count(1)
        self._revisions = itertools.count(1)
        self.down = False
        self.renewals = 0
        self.writes_held: asyncio.Event | None = None
        """When set, every write (announce, publish) waits for it: etcd slow to commit."""

    def expire(self, lease_id: int) -> None:
        self.leases.discard(lease_id)
        if self.master is not None and self.master.lease_id == lease_id:
            self.master = None
        self.members = {a: m for a, m in self.members.items() if m[1] != lease_id}


@dataclass
class FakeKeys:
    """GroupKeys over a FakeEtcd (every call fails while it is down)."""

    etcd: FakeEtcd

    def _up(self) -> None:
        if self.etcd.down:
            raise ControllerUnavailable("etcd is down")

    async def state(self) -> GroupState:
        self._up()
        e = self.etcd
        members = {address: end for address, (end, _) in e.members.items()}
        return GroupState(e.master, e.epoch, e.epoch_revision, e.last_master, e.confirmed, members)

    async def grant(self, ttl_s: int) -> int:
        self._up()
        lease_id = next(self.etcd._ids)
        self.etcd.leases.add(lease_id)
        return lease_id

    async def campaign(
        self, seen: GroupState, record: MasterRecord, lease_id: int, confirmed: int
    ) -> bool:
        self._up()
        e = self.etcd
        if e.master is not None or e.epoch_revision != seen.epoch_revision:
            return False
        e.master = MasterRecord(record.ha_address, record.store_address, record.epoch, lease_id)
        e.epoch, e.epoch_revision = record.epoch, next(e._revisions)
        e.last_master = record.ha_address
        if e.confirmed is None:
            e.confirmed = confirmed
        return True

    async def keep_alive(self, lease_id: int) -> bool:
        self._up()
        self.etcd.renewals += 1
        return lease_id in self.etcd.leases

    async def _write(self) -> None:
        self._up()
        if self.etcd.writes_held is not None:
            await self.etcd.writes_held.wait()

    async def announce(self, ha_address: str, end: int, lease_id: int) -> None:
        await self._write()
        assert lease_id in self.etcd.leases
        self.etcd.members[ha_address] = (end, lease_id)

    async def publish_confirmed(self, offset: int) -> None:
        await self._write()
        self.etcd.confirmed = offset

    async def revoke(self, lease_id: int) -> None:
        self._up()
        self.etcd.expire(lease_id)

    async def close(self) -> None:
        pass


@dataclass
class FakeStore:
    """A store's role, epoch and end, changed as SetRole changes them."""

    role: str
    epoch: int = 0
    end: int = 0
    down: bool = False
    promotions: list[int] = field(default_factory=list)

    def _info(self) -> store_pb2.StoreInfo:
        if self.down:
            raise StoreUnavailable("the store is down")
        return store_pb2.StoreInfo(role=self.role, epoch=self.epoch, commitlog_max_offset=self.end)

    async def store_info(self) -> store_pb2.StoreInfo:
        return self._info()

    async def promote(self, epoch: int) -> store_pb2.StoreInfo:
        assert self.role == "REPLICA" and epoch > self.epoch
        self.role, self.epoch = "MASTER", epoch
        self.promotions.append(epoch)
        return self._info()

    async def fence(self) -> store_pb2.StoreInfo:
        self.role = "REPLICA"
        return self._info()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def controller(
    etcd: FakeEtcd,
    store: FakeStore,
    address: str,
    acked: dict[str, int] | None = None,
    clock: Callable[[], float] | None = None,
) -> Controller:
    config = HAConfig(
        controller_endpoints="127.0.0.1:2379",
        registry_addresses="127.0.0.1:9876",
        controller_lease_ms=LEASE_MS,
    )
    node = Controller(
        config,
        store,  # type: ignore[arg-type]
        lambda: dict(acked or {}),
        keys=FakeKeys(etcd),  # type: ignore[arg-type]
        clock=clock or Clock(),
    )
    node.own_address = address
    return node


def state(confirmed: int | None, members: dict[str, int] | None = None) -> GroupState:
    return GroupState(None, 3, 9, "", confirmed, members or {})


def info(end: int, role: str = "REPLICA") -> store_pb2.StoreInfo:
    return store_pb2.StoreInfo(role=role, commitlog_max_offset=end)


def test_who_may_stand_for_election() -> None:
    # Before the first election only a store that was a master may stand.
    assert campaign_refusal(info(0), state(None), "b:1", was_master=True) == ""
    refusal = campaign_refusal(info(500), state(None), "b:1", was_master=False)
    assert "never a master" in refusal
    # After it, a store must hold everything the last master confirmed,
    assert campaign_refusal(info(1000), state(1000), "b:1", was_master=False) == ""
    refusal = campaign_refusal(info(999), state(1000), "b:1", was_master=True)
    assert "before the 1000 the last master confirmed" in refusal
    # and no live member may hold more (it has appends only it acknowledged).
    members = {"b:1": 1500, "c:1": 1600, "d:1": 1200}
    refusal = campaign_refusal(info(1500), state(1000, members), "b:1", was_master=False)
    assert "c:1 holds more (its store ends at 1600, this one at 1500)" in refusal
    members["c:1"] = 1500  # a tie: both may stand, the transaction picks one
    assert campaign_refusal(info(1500), state(1000, members), "b:1", was_master=False) == ""


def test_an_election_takes_an_epoch_above_every_epoch_seen() -> None:
    assert next_epoch(0, 0) == 1
    assert next_epoch(4, 2) == 5
    assert next_epoch(2, 7) == 8  # a store ahead of etcd (its keys were lost)


def test_the_lease_clock_fences_half_a_ttl_after_the_last_renewal_was_sent() -> None:
    clock = LeaseClock(3)
    assert clock.must_fence(0.0)  # nothing granted yet
    clock.renewed(10.0)
    assert clock.fence_at() == 11.5
    assert not clock.must_fence(11.4)
    assert clock.must_fence(11.5)
    clock.renewed(9.0)  # a late answer to an older renewal moves nothing back
    assert clock.fence_at() == 11.5


def test_the_configured_master_is_elected_and_the_replica_follows() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        store_a, store_b = FakeStore("MASTER", end=800), FakeStore("REPLICA", end=300)
        a, b = controller(etcd, store_a, "a:1"), controller(etcd, store_b, "b:1")
        await b.step()  # no election yet: an empty replica must not win
        assert etcd.master is None and not b.leading
        await a.step()  # demoted first (nobody elected it), then elected
        assert a.leading and store_a.promotions == [1]
        assert etcd.master is not None and etcd.master.ha_address == "a:1"
        assert etcd.confirmed == 800  # what the first master holds must survive it
        await b.step()
        assert not b.leading and store_b.role == "REPLICA"

    asyncio.run(scenario())


def test_a_lost_lease_fences_the_master_and_the_replica_in_sync_takes_the_next_epoch() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        acked = {"b:1": 0}
        store_a, store_b = FakeStore("MASTER", end=0), FakeStore("REPLICA")
        a, b = controller(etcd, store_a, "a:1", acked), controller(etcd, store_b, "b:1")
        await a.step()
        store_a.end, store_b.end, acked["b:1"] = 900, 900, 900
        await a.step()  # the master publishes what its replica acknowledged
        assert etcd.confirmed == 900
        etcd.expire(a.lease_id)
        await a.renew_lease()  # the renewal says the lease is gone: stop acknowledging
        assert not a.leading and store_a.role == "REPLICA"
        await b.step()  # the last master gets one tick to come back first
        assert etcd.master is None
        await b.step()
        assert b.leading and store_b.role == "MASTER" and store_b.epoch == 2
        await a.step()  # the old master stays a replica, following the new one
        assert not a.leading and store_a.role == "REPLICA"

    asyncio.run(scenario())


def test_a_replica_missing_confirmed_appends_never_stands() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        etcd.confirmed, etcd.epoch, etcd.epoch_revision, etcd.last_master = 900, 1, 5, "a:1"
        store_b = FakeStore("REPLICA", epoch=1, end=899)
        b = controller(etcd, store_b, "b:1")
        for _ in range(3):
            await b.step()
        assert etcd.master is None and store_b.promotions == []

    asyncio.run(scenario())


def test_a_master_cut_off_from_etcd_fences_itself_before_the_lease_can_expire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        store_a = FakeStore("MASTER")
        a = controller(etcd, store_a, "a:1")
        clock = a._clock
        assert isinstance(clock, Clock)
        await a.step()
        assert a.leading
        etcd.down = True
        await a.renew_lease()  # fails: the lease clock stays where the grant left it
        await a.renew_lease()
        failures = [r for r in caplog.records if "renewing the lease failed" in r.message]
        assert len(failures) == 1  # logged once while the reason stays the same
        assert not a._lease_clock.must_fence(clock.now + 1.4)  # the watchdog's test
        clock.now += 1.5  # half the 3 s TTL since the grant was sent
        assert a._lease_clock.must_fence(clock.now)
        await a.fence("the lease was not renewed within half its TTL")
        assert not a.leading and store_a.role == "REPLICA"
        etcd.down = False  # etcd is back with the old lease still alive: this service
        await a.step()  # revokes its previous lease,
        assert etcd.master is None
        await a.step()  # and, the last master, stands again at once with a new epoch
        assert a.leading and store_a.promotions == [1, 2]

    asyncio.run(scenario())


def test_a_master_whose_store_stops_answering_resigns() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        store_a = FakeStore("MASTER")
        a = controller(etcd, store_a, "a:1")
        await a.step()
        store_a.down = True
        with pytest.raises(StoreUnavailable):
            await a.step()
        assert a.leading  # one missed answer is not enough
        with pytest.raises(StoreUnavailable):
            await a.step()
        assert not a.leading and etcd.master is None  # the lease is given up at once

    asyncio.run(scenario())


def test_a_master_whose_step_waits_on_slow_etcd_writes_keeps_renewing_and_stays_master() -> None:
    """The controller's own loops, in real time: etcd answers renewals but its writes
    stall, and the step waits on one longer than a master may go unrenewed."""

    async def scenario() -> None:
        etcd = FakeEtcd()
        store_a = FakeStore("MASTER")
        a = controller(etcd, store_a, "a:1", clock=time.monotonic)
        await a.step()
        assert a.leading
        etcd.writes_held = asyncio.Event()
        store_a.end = 500  # the next step announces it, and waits
        renewals = etcd.renewals
        a.start("a:1")
        try:
            await asyncio.sleep(a._lease_clock.fence_after_s * 1.5)
            assert a.leading and store_a.role == "MASTER"
            assert etcd.renewals - renewals >= RENEWALS_PER_FENCE
            assert etcd.members["a:1"][0] == 0  # the step still waits to announce 500
        finally:
            await a.stop()
        assert not a.leading and etcd.master is None  # a stop resigns

    asyncio.run(scenario())


def test_a_candidate_whose_store_does_not_answer_stops_renewing_its_lease() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        store_b = FakeStore("REPLICA", end=300)
        b = controller(etcd, store_b, "b:1")
        await b.step()
        await b.renew_lease()
        assert etcd.renewals == 1 and etcd.members == {"b:1": (300, b.lease_id)}
        store_b.down = True
        with pytest.raises(StoreUnavailable):
            await b.step()
        await b.renew_lease()  # its announced end must go with the lease
        assert etcd.renewals == 1
        store_b.down = False
        await b.step()
        await b.renew_lease()
        assert etcd.renewals == 2

    asyncio.run(scenario())


def test_two_candidates_never_win_the_same_epoch() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        etcd.confirmed, etcd.epoch, etcd.epoch_revision = 0, 4, 7
        stores = [FakeStore("REPLICA", epoch=4) for _ in range(2)]
        nodes = [controller(etcd, s, f"n{i}:1") for i, s in enumerate(stores)]
        await asyncio.gather(*(n.step() for n in nodes))
        assert [n.leading for n in nodes].count(True) == 1
        assert sorted(s.epoch for s in stores) == [4, 5]

    asyncio.run(scenario())


def test_of_two_replicas_the_one_holding_more_is_elected() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        acked = {"b:1": 0, "c:1": 0}
        stores = {n: FakeStore("MASTER" if n == "a" else "REPLICA") for n in "abc"}
        nodes = {
            n: controller(etcd, stores[n], f"{n}:1", acked if n == "a" else None) for n in "abc"
        }
        for n in "abc":
            await nodes[n].step()
        stores["a"].end, stores["b"].end, stores["c"].end = 1000, 900, 900
        acked.update({"b:1": 900, "c:1": 900})
        for n in "abc":
            await nodes[n].step()
        assert etcd.confirmed == 900
        # c acknowledges the last appends and announces them; the master dies before it
        # publishes them as confirmed: b reaches `confirmed` but c holds more.
        stores["c"].end, acked["c:1"] = 1000, 1000
        await nodes["c"].step()
        etcd.expire(nodes["a"].lease_id)  # the master dies
        for _ in range(2):
            for n in "bc":
                await nodes[n].step()
        assert stores["c"].role == "MASTER" and stores["b"].role == "REPLICA"

    asyncio.run(scenario())


def test_a_candidate_tells_its_follower_the_elected_masters_epoch() -> None:
    async def scenario() -> None:
        etcd = FakeEtcd()
        store_a, store_b = FakeStore("MASTER", end=800), FakeStore("REPLICA", end=300)
        a, b = controller(etcd, store_a, "a:1"), controller(etcd, store_b, "b:1")
        seen: list[int] = []
        b.on_group_epoch = seen.append
        await a.step()  # elected for epoch 1
        await b.step()
        assert seen == [1]  # the follower refuses chunks of any older master from now on

    asyncio.run(scenario())
