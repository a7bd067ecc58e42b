"""OpenTelemetry metrics of replication lag (observable gauges, read at collection time).

On a master: ``boltmq.ha.replica.lag_bytes`` and ``boltmq.ha.replica.lag_seconds``
per connected replica (attribute ``replica``). On a replica:
``boltmq.ha.follower.lag_bytes``, the master's end as of the last chunk minus
the own store's end. The instruments come from :func:`boltmq.kernel.telemetry.meter`:
the global meter provider ``boltmq serve`` installs (OTLP and the Prometheus
endpoint, :mod:`boltmq.kernel.telemetry`) unless one is passed (tests pass an SDK
provider with an in-memory reader).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from boltmq.kernel import telemetry
from services.ha.replicas import ReplicaLag

METER_NAME = "boltmq.ha"


class LagMetrics:
    """Registers the lag gauges; each reads the live state through a callback."""

    def __init__(
        self,
        replica_lags: Callable[[], list[ReplicaLag]],
        follower_lag_bytes: Callable[[], int | None],
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self._replica_lags = replica_lags
        self._follower_lag_bytes = follower_lag_bytes
        meter = telemetry.meter(METER_NAME, meter_provider)
        meter.create_observable_gauge(
            "boltmq.ha.replica.lag_bytes",
            callbacks=[self._observe_lag_bytes],
            unit="By",
            description="CommitLog bytes the master has and the replica has not acked",
        )
        meter.create_observable_gauge(
            "boltmq.ha.replica.lag_seconds",
            callbacks=[self._observe_lag_seconds],
            unit="s",
            description="Time since the replica last had the master's whole CommitLog",
        )
        meter.create_observable_gauge(
            "boltmq.ha.follower.lag_bytes",
            callbacks=[self._observe_follower],
            unit="By",
            description="This replica's distance behind its master, as of the last chunk",
        )

    def _observe_lag_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(lag.lag_bytes, {"replica": lag.replica_address})
            for lag in self._replica_lags()
        ]

    def _observe_lag_seconds(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(lag.lag_seconds, {"replica": lag.replica_address})
            for lag in self._replica_lags()
        ]

    def _observe_follower(self, options: CallbackOptions) -> Iterable[Observation]:
        lag = self._follower_lag_bytes()
        return [] if lag is None else [Observation(lag)]
