"""ReplayCache: the nonces of signed calls the broker accepted, kept while they could be replayed.

A signed call (:mod:`boltmq.kernel.signing`) carries a nonce and a timestamp;
the broker accepts a timestamp within ``window_ms`` of its clock, so a call
stamped ``t`` could be sent again until ``t + window_ms``. The cache keeps each
accepted nonce until then: a second call with the same nonce inside the window
is a replay, and outside it the timestamp alone refuses it.

Entries sit in a set and, in arrival order, in a deque of ``(expiry, nonce)``;
each admission first drops expired ones from the front. Arrival order is
expiry order up to the clients' skew, so an entry can outlive its expiry by at
most twice the window (kept longer, never shorter). The cache holds at most
``max_entries``: when that many unexpired nonces are held, new calls are
refused (RESOURCE_EXHAUSTED, retriable) rather than forgetting a nonce that
could still be replayed. Memory: about 250 bytes per entry.
"""

from __future__ import annotations

from collections import deque


class ReplayCache:
    """Nonces accepted within the window; single-threaded (the broker's event loop)."""

    def __init__(self, window_ms: int, max_entries: int) -> None:
        if window_ms <= 0 or max_entries <= 0:
            raise ValueError("window_ms and max_entries must be positive")
        self._window_ms = window_ms
        self._max_entries = max_entries
        self._seen: set[str] = set()
        self._order: deque[tuple[int, str]] = deque()

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, nonce: str, timestamp_ms: int, now_ms: int) -> str:
        """Record ``nonce`` of a call stamped ``timestamp_ms``; "" when it is new, else why
        the call is refused ("replayed" or "full")."""
        self._expire(now_ms)
        if nonce in self._seen:
            return "replayed"
        if len(self._seen) >= self._max_entries:
            return "full"
        self._seen.add(nonce)
        self._order.append((timestamp_ms + self._window_ms, nonce))
        return ""

    def _expire(self, now_ms: int) -> None:
        order = self._order
        while order and order[0][0] < now_ms:
            self._seen.discard(order.popleft()[1])
