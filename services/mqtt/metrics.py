"""OpenTelemetry metrics of one gateway pod, read from the hub at collection time.

``boltmq serve mqtt`` installs the meter provider (the Prometheus endpoint on
``metrics_port``, OTLP; :mod:`boltmq.kernel.telemetry`), as for every service:

- ``boltmq.mqtt.connections``: live device connections, attribute ``version``
  (``5`` or ``3.1.1``);
- ``boltmq.mqtt.subscriptions``: filters those connections hold (shared ones too);
- ``boltmq.mqtt.qos0_dropped``: QoS 0 messages dropped since the start because a
  device read too slowly (its queue was full).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from boltmq.kernel import telemetry
from services.mqtt.hub import Hub

METER_NAME = "boltmq.mqtt"
VERSIONS = {4: "3.1.1", 5: "5"}


class GatewayMetrics:
    """Registers the gateway's instruments; each reads the hub through a callback."""

    def __init__(self, hub: Hub, meter_provider: MeterProvider | None = None) -> None:
        self._hub = hub
        meter = telemetry.meter(METER_NAME, meter_provider)
        meter.create_observable_gauge(
            "boltmq.mqtt.connections",
            callbacks=[self._connections],
            description="Live device connections of this gateway pod",
        )
        meter.create_observable_gauge(
            "boltmq.mqtt.subscriptions",
            callbacks=[self._subscriptions],
            description="Topic filters the live connections hold",
        )
        meter.create_observable_counter(
            "boltmq.mqtt.qos0_dropped",
            callbacks=[self._dropped],
            description="QoS 0 messages dropped because a device read too slowly",
        )

    def _connections(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = Counter(
            VERSIONS.get(c.version, str(c.version)) for c in list(self._hub.connections.values())
        )
        return [Observation(counts.get(v, 0), {"version": v}) for v in VERSIONS.values()]

    def _subscriptions(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(sum(len(c.filters) for c in list(self._hub.connections.values())))]

    def _dropped(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._hub.dropped)]
