"""Per-client token buckets and in-flight caps (services.broker.access.client_limits)."""

from __future__ import annotations

from services.broker.access.client_limits import ClientLimits


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_rate_per_client() -> None:
    clock = Clock()
    limits = ClientLimits(rate_per_s=10, burst=5, in_flight_max=0, clock_s=clock)
    granted = [limits.acquire("flooder") == "" for _ in range(8)]
    assert granted == [True] * 5 + [False] * 3
    assert "calls a second" in limits.acquire("flooder")
    assert limits.acquire("someone-else") == ""  # its own bucket
    clock.now += 0.25  # 2.5 tokens back
    assert [limits.acquire("flooder") == "" for _ in range(3)] == [True, True, False]


def test_in_flight_cap_and_release() -> None:
    limits = ClientLimits(rate_per_s=0, burst=1, in_flight_max=2, clock_s=Clock())
    assert limits.acquire("c") == "" and limits.acquire("c") == ""
    assert "in flight" in limits.acquire("c")
    limits.release("c")
    assert limits.acquire("c") == ""


def test_idle_clients_are_forgotten_past_the_table_limit() -> None:
    clock = Clock()
    limits = ClientLimits(rate_per_s=100, burst=2, in_flight_max=0, clock_s=clock, clients_max=3)
    for key in ("a", "b", "c"):
        limits.acquire(key)
        limits.release(key)
    clock.now += 1.0  # every bucket refilled
    assert limits.acquire("d") == ""
    assert len(limits._buckets) == 1
