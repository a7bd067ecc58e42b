"""FaultAvoidance with a hand-moved clock: which groups a producer skips, and until when."""

from __future__ import annotations

import pytest

from boltmq import ProducerOptions
from boltmq.fault_avoidance import FaultAvoidance


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_failed_group_is_avoided_until_its_time_is_up(clock: Clock) -> None:
    table = FaultAvoidance(2_000, clock)
    assert table.available("broker-a") and table.avoided() == []
    table.failed("broker-a")
    assert not table.available("broker-a") and table.available("broker-b")
    assert table.avoided() == ["broker-a"]
    clock.now += 1.999
    assert not table.available("broker-a")
    clock.now += 0.001
    assert table.available("broker-a") and table.avoided() == []


def test_a_new_failure_extends_and_a_success_clears(clock: Clock) -> None:
    table = FaultAvoidance(1_000, clock)
    table.failed("broker-b")
    clock.now += 0.9
    table.failed("broker-b")
    clock.now += 0.9
    assert not table.available("broker-b")  # 1.8 s after the first, 0.9 after the last
    table.succeeded("broker-b")
    assert table.available("broker-b")
    table.succeeded("broker-c")  # never failed: nothing to clear
    assert table.avoided() == []


def test_zero_turns_it_off(clock: Clock) -> None:
    table = FaultAvoidance(0, clock)
    table.failed("broker-a")
    assert table.available("broker-a") and table.avoided() == []


def test_order_puts_avoided_groups_last_soonest_first(clock: Clock) -> None:
    table = FaultAvoidance(5_000, clock)
    queues = [("broker-a", 0), ("broker-b", 0), ("broker-c", 0), ("broker-a", 1), ("broker-b", 1)]
    assert table.order(queues, lambda q: q[0]) == queues  # nothing avoided: as given
    table.failed("broker-b")
    clock.now += 1.0
    table.failed("broker-a")  # ends a second after broker-b's
    assert table.order(queues, lambda q: q[0]) == [
        ("broker-c", 0),
        ("broker-b", 0),
        ("broker-b", 1),
        ("broker-a", 0),
        ("broker-a", 1),
    ]
    clock.now += 4.0  # broker-b's mark is over
    assert table.order(queues, lambda q: q[0])[:3] == [
        ("broker-b", 0),
        ("broker-c", 0),
        ("broker-b", 1),
    ]


def test_every_group_avoided_still_offers_them_all(clock: Clock) -> None:
    table = FaultAvoidance(5_000, clock)
    table.failed("broker-b")
    clock.now += 1.0
    table.failed("broker-a")
    assert table.order(["broker-a", "broker-b"], str) == ["broker-b", "broker-a"]


@pytest.mark.parametrize("value", [-1, 1.5, "10", None])
def test_a_bad_duration_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="avoid_ms must be an int >= 0"):
        FaultAvoidance(value, Clock())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ProducerOptions.fault_avoidance_ms"):
        ProducerOptions(fault_avoidance_ms=value)  # type: ignore[arg-type]


def test_the_default_avoids_for_ten_seconds() -> None:
    assert ProducerOptions().fault_avoidance_ms == 10_000
