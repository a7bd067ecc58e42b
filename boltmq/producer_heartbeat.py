"""A producer's heartbeats: its producer group at every master it knows.

The brokers list a group's producers (``boltmq admin connections producer
GROUP``) from these heartbeats and forget a producer silent for their
``client_expiry_ms``. A background thread heartbeats every master of every
broker group a cached route names (the brokers this producer sends to), and
every master of the cluster once the client asked for them (a
TransactionProducer does, for its check streams), once
per ``heartbeat_interval_ms``, and a master it learns of between two rounds at
its next check (at most a second later); :meth:`ProducerHeartbeat.stop` ends
the thread and unregisters the producer from those masters, as a RocketMQ
producer's shutdown does. A failed heartbeat is logged and retried next round.
"""

from __future__ import annotations

import logging
import threading
import time

import grpc

from boltmq.client import ClientInstance, heartbeat_request, rpc_error_text
from boltmq.v1 import broker_pb2

log = logging.getLogger(__name__)

CHECK_S = 1.0
"""How often the thread looks for masters it has not heartbeated yet (s)."""


class ProducerHeartbeat:
    """The heartbeat thread of one producer group's client."""

    def __init__(self, client: ClientInstance, group: str, interval_ms: int) -> None:
        self._client = client
        self._group = group
        self._interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._beaten: set[str] = set()
        """Masters heartbeated at least once (unregistered from on stop)."""

    def start(self) -> None:
        """Start heartbeating in the background."""
        self._thread = threading.Thread(
            target=self._run, name="boltmq-producer-heartbeat", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop heartbeating and unregister from every master heartbeated."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        request = broker_pb2.UnregisterClientRequest(
            client_id=self._client.client_id, producer_groups=[self._group]
        )
        for address in sorted(self._beaten):
            try:
                self._client.broker(address).UnregisterClient(request, timeout=2.0)
            except grpc.RpcError as exc:
                log.warning("unregister from %s: %s", address, rpc_error_text(exc))

    def _run(self) -> None:
        last_round = 0.0
        while True:
            now = time.monotonic()
            masters = self._client.known_masters()
            if now - last_round >= self._interval_s:
                due, last_round = masters, now
            else:
                due = masters - self._beaten
            self.beat(due)
            if self._stop.wait(min(CHECK_S, self._interval_s)):
                return

    def beat(self, addresses: set[str]) -> None:
        """Heartbeat the producer group to each of ``addresses`` now."""
        request = heartbeat_request(self._client.client_id, producer_groups=[self._group])
        for address in sorted(addresses):
            try:
                self._client.broker(address).Heartbeat(request, timeout=self._client.rpc_timeout_s)
                self._beaten.add(address)
            except grpc.RpcError as exc:
                log.warning("heartbeat to %s: %s", address, rpc_error_text(exc))
