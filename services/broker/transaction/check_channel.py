"""Check-back channels: the open TransactionChecks streams of each producer group.

A :class:`TransactionProducer` keeps one server-streaming call per broker open;
the broker pushes a :class:`TransactionCheck` down one live stream of the
half message's group (round-robin), and the producer answers through
EndTransaction. A stream is a bounded queue: a producer that stops reading
loses checks (they are sent again after the next timeout), it never makes the
broker buffer without limit.

Initial metadata (:data:`CHECKS_OPEN_METADATA`) is sent once a stream is
registered: a producer that waits for it knows a check from then on reaches it.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

from boltmq.v1 import broker_pb2

CHECKS_OPEN_METADATA = (("boltmq-checks-open", "1"),)
"""Initial metadata of TransactionChecks, sent once the stream is registered."""
CHECK_CHANNEL_QUEUE_MAX = 1024
"""Checks waiting in one stream at most; a full stream drops the check (it comes again)."""


@dataclass(eq=False)
class CheckChannel:
    """One producer's open stream."""

    group: str
    client_id: str
    queue: asyncio.Queue[broker_pb2.TransactionCheck] = field(
        default_factory=lambda: asyncio.Queue(CHECK_CHANNEL_QUEUE_MAX)
    )


class CheckChannels:
    """Open streams by producer group."""

    def __init__(self) -> None:
        self._by_group: dict[str, list[CheckChannel]] = {}
        self._turn = itertools.count()

    def open(self, group: str, client_id: str) -> CheckChannel:
        """Register a stream; the caller closes it when the call ends."""
        channel = CheckChannel(group, client_id)
        self._by_group.setdefault(group, []).append(channel)
        return channel

    def close(self, channel: CheckChannel) -> None:
        """Forget a stream whose call ended."""
        channels = self._by_group.get(channel.group, [])
        if channel in channels:
            channels.remove(channel)
        if not channels:
            self._by_group.pop(channel.group, None)

    def push(self, group: str, check: broker_pb2.TransactionCheck) -> str | None:
        """Hand ``check`` to one live stream of ``group``; its client id, or None when the
        group has no stream (or every one is full)."""
        channels = self._by_group.get(group, [])
        if not channels:
            return None
        start = next(self._turn)
        for i in range(len(channels)):
            channel = channels[(start + i) % len(channels)]
            try:
                channel.queue.put_nowait(check)
            except asyncio.QueueFull:
                continue
            return channel.client_id
        return None
