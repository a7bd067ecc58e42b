"""Per-caller token buckets and in-flight caps (boltmq.kernel.caller_limits)."""

from __future__ import annotations

from boltmq.kernel.caller_limits import REPORT_INTERVAL_S, CallerLimits, peer_host


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_rate_per_client() -> None:
    clock = Clock()
    limits = CallerLimits(rate_per_s=10, burst=5, in_flight_max=0, clock_s=clock)
    granted = [limits.acquire("flooder") == "" for _ in range(8)]
    assert granted == [True] * 5 + [False] * 3
    why = limits.acquire("flooder")
    assert why == "more than 10 calls a second (client_request_rate_per_s, burst 5)"
    assert limits.acquire("someone-else") == ""  # its own bucket
    clock.now += 0.25  # 2.5 tokens back
    assert [limits.acquire("flooder") == "" for _ in range(3)] == [True, True, False]


def test_in_flight_cap_and_release() -> None:
    limits = CallerLimits(rate_per_s=0, burst=1, in_flight_max=2, clock_s=Clock())
    assert limits.acquire("c") == "" and limits.acquire("c") == ""
    assert limits.acquire("c") == "more than 2 calls in flight at once (client_in_flight_max)"
    limits.release("c")
    assert limits.acquire("c") == ""


def test_the_refusal_names_the_services_settings() -> None:
    limits = CallerLimits(1, 1, 1, clock_s=Clock(), settings_prefix="caller")
    assert limits.acquire("c") == ""
    assert "(caller_in_flight_max)" in limits.acquire("c")
    limits.release("c")
    assert "(caller_request_rate_per_s, burst 1)" in limits.acquire("c")


def test_zero_limits_impose_nothing() -> None:
    limits = CallerLimits(rate_per_s=0, burst=1, in_flight_max=0, clock_s=Clock())
    assert all(limits.acquire("c") == "" for _ in range(10_000))


def test_idle_clients_are_forgotten_past_the_table_limit() -> None:
    clock = Clock()
    limits = CallerLimits(rate_per_s=100, burst=2, in_flight_max=0, clock_s=clock, clients_max=3)
    for key in ("a", "b", "c"):
        limits.acquire(key)
        limits.release(key)
    clock.now += 1.0  # every bucket refilled
    assert limits.acquire("d") == ""
    assert len(limits._buckets) == 1


def test_a_flood_is_reported_once_per_interval_and_caller() -> None:
    clock = Clock()
    limits = CallerLimits(rate_per_s=0, burst=1, in_flight_max=1, clock_s=clock)
    assert [limits.should_report("a") for _ in range(3)] == [True, False, False]
    assert limits.should_report("b")
    clock.now += REPORT_INTERVAL_S
    assert limits.should_report("a")


def test_peer_host() -> None:
    assert peer_host("ipv4:10.1.2.3:5555") == "10.1.2.3"
    assert peer_host("ipv6:[::1]:5555") == "[::1]"
    assert peer_host("unix:/tmp/socket") == "unix:/tmp/socket"
