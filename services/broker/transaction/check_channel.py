"""Check-back channels: the open TransactionChecks streams of each producer group.

A :class:`TransactionProducer` keeps one server-streaming call per broker open;
the broker pushes a :class:`TransactionCheck` down one live stream of the
half message's group (round-robin) whose caller may publish to the half's
topic, and the producer answers through EndTransaction. A stream is a
bounded queue: a producer that stops reading loses checks (they are sent
again after the next timeout), it never makes the broker buffer without limit.

A stream lasts as long as its producer keeps it, so each caller (its access key,
or its host when the ACL is off) holds at most ``CHECK_STREAMS_PER_CALLER_MAX``
open at once: a few accounts cannot fill the broker's concurrent calls with
streams that never end.

Initial metadata (:data:`CHECKS_OPEN_METADATA`) is sent once a stream is
registered: a producer that waits for it knows a check from then on reaches it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from boltmq.v1 import broker_pb2
from services.broker.errors import TooManyStreams

CHECK_STREAMS_PER_CALLER_MAX = 16
"""Open TransactionChecks streams one caller may hold (a producer keeps one per broker
and producer group)."""
CHECKS_OPEN_METADATA = (("boltmq-checks-open", "1"),)
"""Initial metadata of TransactionChecks, sent once the stream is registered."""
CHECK_CHANNEL_QUEUE_MAX = 1024
"""Checks waiting in one stream at most; a full stream drops the check (it comes again)."""


@dataclass(eq=False)
class CheckChannel:
    """One producer's open stream."""

    group: str
    client_id: str
    owner: str = ""
    """Who holds the stream (access key, or host with the ACL off): what the cap counts."""
    accepts: Callable[[str], bool] = lambda topic: True
    """Whether this stream may carry a half message of the topic (its caller's rights)."""
    queue: asyncio.Queue[broker_pb2.TransactionCheck] = field(
        default_factory=lambda: asyncio.Queue(CHECK_CHANNEL_QUEUE_MAX)
    )


class CheckChannels:
    """Open streams by producer group."""

    def __init__(self) -> None:
        self._by_group: dict[str, list[CheckChannel]] = {}
        self._per_owner: dict[str, int] = {}
        self._turn = itertools.count()

    def open(
        self,
        group: str,
        client_id: str,
        accepts: Callable[[str], bool] = lambda topic: True,
        owner: str = "",
    ) -> CheckChannel:
        """Register a stream taking the halves of topics ``accepts`` allows; the caller
        closes it when the call ends. TooManyStreams past ``owner``'s cap."""
        held = self._per_owner.get(owner, 0)
        if held >= CHECK_STREAMS_PER_CALLER_MAX:
            raise TooManyStreams(
                f"{owner or 'this caller'} already holds {held} TransactionChecks streams "
                f"(at most {CHECK_STREAMS_PER_CALLER_MAX}); close one first"
            )
        channel = CheckChannel(group, client_id, owner, accepts)
        self._by_group.setdefault(group, []).append(channel)
        self._per_owner[owner] = held + 1
        return channel

    def close(self, channel: CheckChannel) -> None:
        """Forget a stream whose call ended."""
        channels = self._by_group.get(channel.group, [])
        if channel in channels:
            channels.remove(channel)
            held = self._per_owner.pop(channel.owner, 1) - 1
            if held:
                self._per_owner[channel.owner] = held
        if not channels:
            self._by_group.pop(channel.group, None)

    def push(self, group: str, check: broker_pb2.TransactionCheck) -> str | None:
        """Hand ``check`` to one live stream of ``group`` that accepts its topic; its
        client id, or None when the group has no such stream (or every one is full)."""
        channels = self._by_group.get(group, [])
        if not channels:
            return None
        start = next(self._turn)
        for i in range(len(channels)):
            channel = channels[(start + i) % len(channels)]
            if not channel.accepts(check.message.topic):
                continue
            try:
                channel.queue.put_nowait(check)
            except asyncio.QueueFull:
                continue
            return channel.client_id
        return None
