"""CreationLimits: how many topics and consumer groups a caller may auto-create.

A heartbeat, pull, offset commit or send naming an unknown consumer group or
topic creates it (``auto_create_subscription_group``,
``auto_create_topic_enable``), and a clustering group's heartbeat also
creates its ``%RETRY%`` topic. Each creation rewrites a metadata file in the
store and, for topics, re-registers with every registry, so one caller
naming thousands of fresh names would cost the whole cluster. Three caps,
each 0 for none:

- ``per_call``: creations one call may cause (a larger call is refused
  before anything is created: INVALID_ARGUMENT, retrying cannot help);
- ``per_client``: creations one caller (client) may cause since the broker started
  (RESOURCE_EXHAUSTED; explicit ``boltmq admin`` creations are not counted);
- ``rate_per_s`` / ``burst``: a token bucket per caller, one token per
  creation (RESOURCE_EXHAUSTED; retry later).

The client charged is :func:`~services.broker.access.caller.current_client_key`
(access key with the ACL on, else IP address). A refusal creates nothing and takes
nothing from the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from services.broker.access.caller import current_client_key
from services.broker.errors import BrokerError, InvalidArgument


class TooManyCreations(BrokerError):
    """A caller's auto-creation budget is spent (RESOURCE_EXHAUSTED)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


@dataclass
class _Budget:
    tokens: float
    updated_s: float
    created: int = 0


class CreationLimits:
    """Per-call, per-caller and per-second caps on auto-created topics and groups."""

    def __init__(
        self,
        per_call: int,
        per_client: int,
        rate_per_s: float,
        burst: int,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_call = per_call
        self.per_client = per_client
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock_s = clock_s
        self._budgets: dict[str, _Budget] = {}

    def check_per_call(self, count: int, what: str) -> None:
        """Refuse (INVALID_ARGUMENT) a call that would cause more than ``per_call`` creations,
        charging nothing: a call whose creations are charged one by one (a send of several
        sections) asks this first, for all of them."""
        if self.per_call and count > self.per_call:
            raise InvalidArgument(
                f"{what}: the call would create {count} topics and consumer groups; "
                f"one call may create at most {self.per_call}"
            )

    def charge(self, count: int, what: str) -> None:
        """Allow ``count`` creations of ``what`` by the current caller, or raise why not."""
        if count <= 0:
            return
        self.check_per_call(count, what)
        caller = current_client_key() or "anonymous"
        now = self._clock_s()
        budget = self._budgets.get(caller)
        if budget is None:
            budget = self._budgets[caller] = _Budget(float(self.burst), now)
        if self.per_client and budget.created + count > self.per_client:
            raise TooManyCreations(
                f"{what}: {caller} has auto-created {budget.created} topics and consumer "
                f"groups, at most {self.per_client}; ask an operator to create them"
            )
        if self.rate_per_s:
            budget.tokens = min(
                float(self.burst), budget.tokens + (now - budget.updated_s) * self.rate_per_s
            )
            budget.updated_s = now
            if budget.tokens < count:
                raise TooManyCreations(
                    f"{what}: {caller} may auto-create {self.rate_per_s:g} topics and "
                    f"consumer groups a second (burst {self.burst}); retry later"
                )
            budget.tokens -= count
        budget.created += count
