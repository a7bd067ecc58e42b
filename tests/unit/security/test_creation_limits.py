"""Caps on auto-created topics and groups (services.broker.access.creation_limits)."""

from __future__ import annotations

import contextvars

import grpc
import pytest

from boltmq.kernel.config import ConfigError
from services.broker.access.caller import current_client_key, reset_client_key, set_client_key
from services.broker.access.creation_limits import CreationLimits, TooManyCreations
from services.broker.config import BrokerConfig
from services.broker.errors import InvalidArgument


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def as_caller(key: str, limits: CreationLimits, count: int) -> None:
    """``limits.charge(count)`` inside a call made by ``key``."""

    def charge() -> None:
        token = set_client_key(key)
        try:
            limits.charge(count, "consumer_groups")
        finally:
            reset_client_key(token)

    contextvars.copy_context().run(charge)


def test_a_call_creating_more_than_the_per_call_cap_is_refused_whole() -> None:
    limits = CreationLimits(per_call=4, per_client=0, rate_per_s=1, burst=10, clock_s=Clock())
    with pytest.raises(InvalidArgument, match="would create 512 .* at most 4"):
        as_caller("app", limits, 512)
    as_caller("app", limits, 4)  # the refusal took nothing from the bucket (10 tokens)
    as_caller("app", limits, 4)


def test_burst_then_rate_per_caller() -> None:
    clock = Clock()
    limits = CreationLimits(per_call=0, per_client=0, rate_per_s=2, burst=5, clock_s=clock)
    as_caller("flooder", limits, 5)
    with pytest.raises(TooManyCreations, match="flooder may auto-create 2 .* a second") as info:
        as_caller("flooder", limits, 1)
    assert info.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    as_caller("someone-else", limits, 5)  # its own bucket
    clock.now += 1.0  # 2 tokens back
    as_caller("flooder", limits, 2)
    with pytest.raises(TooManyCreations):
        as_caller("flooder", limits, 1)


def test_per_client_total_since_start() -> None:
    clock = Clock()
    limits = CreationLimits(per_call=0, per_client=6, rate_per_s=1, burst=4, clock_s=clock)
    as_caller("app", limits, 4)
    clock.now += 1000.0  # the bucket refills; the total does not
    as_caller("app", limits, 2)
    with pytest.raises(TooManyCreations, match="app has auto-created 6 .* at most 6"):
        as_caller("app", limits, 1)
    as_caller("other", limits, 1)


def test_nothing_to_create_costs_nothing_and_zero_means_no_limit() -> None:
    limits = CreationLimits(per_call=0, per_client=0, rate_per_s=0, burst=1, clock_s=Clock())
    for _ in range(100):
        as_caller("app", limits, 50)
    as_caller("app", CreationLimits(1, 1, 1, 1), 0)


def test_outside_a_call_the_caller_is_empty_and_charged_as_anonymous() -> None:
    assert current_client_key() == ""
    limits = CreationLimits(per_call=0, per_client=1, rate_per_s=0, burst=1, clock_s=Clock())
    limits.charge(1, "topic")
    with pytest.raises(TooManyCreations, match="anonymous"):
        limits.charge(1, "topic")


def test_settings_refuse_a_per_call_cap_the_bucket_could_never_grant() -> None:
    with pytest.raises(ConfigError, match="auto_create_max_per_call"):
        BrokerConfig(auto_create_max_per_call=300, auto_create_burst=200)
    with pytest.raises(ConfigError, match="auto_create_max_per_call"):
        BrokerConfig(auto_create_max_per_call=0)
    with pytest.raises(ConfigError, match="auto_create_rate_per_s"):
        BrokerConfig(auto_create_rate_per_s=-1)
    BrokerConfig(auto_create_max_per_call=0, auto_create_rate_per_s=0)  # every cap off
