"""QueueLockManager: one holder per queue and group, renewal, expiry."""

from __future__ import annotations

from services.broker.clients.queue_lock import QueueLockManager
from tests.unit.broker.conftest import ManualClock

EXPIRY_MS = 60_000
Q0, Q1, Q2 = ("orders", 0), ("orders", 1), ("orders", 2)


def test_a_queue_is_locked_by_one_client_of_a_group_at_a_time(clock: ManualClock) -> None:
    locks = QueueLockManager(EXPIRY_MS, clock)
    assert locks.try_lock("g1", "c-1", [Q0, Q1]) == [Q0, Q1]
    assert locks.try_lock("g1", "c-2", [Q1, Q2]) == [Q2]
    assert locks.holder("g1", Q1) == "c-1"
    # Another group is independent.
    assert locks.try_lock("g2", "c-2", [Q0]) == [Q0]


def test_the_holder_renews_and_keeps_its_lock(clock: ManualClock) -> None:
    locks = QueueLockManager(EXPIRY_MS, clock)
    locks.try_lock("g1", "c-1", [Q0])
    for _ in range(3):
        clock.advance(EXPIRY_MS)
        assert locks.try_lock("g1", "c-1", [Q0]) == [Q0]
    assert locks.try_lock("g1", "c-2", [Q0]) == []


def test_an_unrenewed_lock_expires_and_another_client_takes_it(clock: ManualClock) -> None:
    locks = QueueLockManager(EXPIRY_MS, clock)
    locks.try_lock("g1", "c-1", [Q0])
    clock.advance(EXPIRY_MS)
    assert locks.try_lock("g1", "c-2", [Q0]) == []
    clock.advance(1)
    assert locks.holder("g1", Q0) is None
    assert locks.try_lock("g1", "c-2", [Q0]) == [Q0]
    assert locks.holder("g1", Q0) == "c-2"


def test_only_the_holder_unlocks(clock: ManualClock) -> None:
    locks = QueueLockManager(EXPIRY_MS, clock)
    locks.try_lock("g1", "c-1", [Q0, Q1])
    assert locks.unlock("g1", "c-2", [Q0]) == []
    assert locks.unlock("g1", "c-1", [Q0, Q2]) == [Q0]
    assert locks.try_lock("g1", "c-2", [Q0, Q1]) == [Q0]
    assert locks.unlock_client("g1", "c-1") == [Q1]
    assert locks.holder("g1", Q1) is None


def test_expire_drops_stale_locks_only(clock: ManualClock) -> None:
    locks = QueueLockManager(EXPIRY_MS, clock)
    locks.try_lock("g1", "c-1", [Q0])
    clock.advance(EXPIRY_MS)
    locks.try_lock("g1", "c-2", [Q1])
    clock.advance(1)
    assert locks.expire() == 1
    assert locks.holder("g1", Q1) == "c-2"
