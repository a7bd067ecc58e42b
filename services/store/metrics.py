"""The store's OpenTelemetry metrics: put and flush latency, cold pulls, dispatch lag, disk.

=====================================  =========  ==========================================
Instrument                             Kind       Meaning
=====================================  =========  ==========================================
``boltmq.store.put.duration``          histogram  seconds one Append call took (a batch,
                                                  flush and replica waits included; the
                                                  appends of one AppendStream message
                                                  stored in one engine call, and the runs
                                                  of one Append, count as one)
``boltmq.store.put.messages``          counter    messages Append calls were given
``boltmq.store.pull.cold``             counter    Pull and PullQueues calls read on a
                                                  cold-read thread (docs/store-reads.md)
``boltmq.store.flush.duration``        histogram  seconds one CommitLog flush took (only
                                                  flushes that made new bytes durable)
``boltmq.store.dispatch.lag``          gauge      CommitLog bytes written but not yet in the
                                                  consume queues and the index
``boltmq.store.commitlog.max_offset``  gauge      the CommitLog's end
``boltmq.store.disk.usage.ratio``      gauge      used share (0..1) of the file system
                                                  holding the CommitLog
=====================================  =========  ==========================================

Gauges read the live store when they are collected (on the scrape or export
thread); the histograms get one value per batch or flush, never per message; the
counters are plain sums reported when collected
(:class:`boltmq.kernel.summed_counter.SummedCounter`).
Instruments come from the global meter provider unless one is passed.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from boltmq.kernel import telemetry
from boltmq.kernel.summed_counter import SummedCounter
from services.store.cleaner import disk_usage_percent
from services.store.store import MessageStore

METER_NAME = "boltmq.store"
LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
"""Histogram bounds: a page-cache append takes ~100 us, a SYNC_MASTER one tens of ms."""


class StoreMetrics:
    """The store's instruments; the servicer calls :meth:`put`, the flusher the hook."""

    def __init__(self, store: MessageStore, meter_provider: MeterProvider | None = None) -> None:
        self._store = store
        meter = telemetry.meter(METER_NAME, meter_provider)
        self._put_duration = meter.create_histogram(
            "boltmq.store.put.duration",
            unit="s",
            description="Duration of one Append call",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        self._put_messages = SummedCounter(
            meter, "boltmq.store.put.messages", "{message}", "Messages given to Append calls"
        )
        self._cold_pulls = SummedCounter(
            meter,
            "boltmq.store.pull.cold",
            "{call}",
            "Pull and PullQueues calls read on a cold-read thread",
        )
        flush_duration = meter.create_histogram(
            "boltmq.store.flush.duration",
            unit="s",
            description="Duration of one CommitLog flush",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        store.on_flush_seconds = flush_duration.record  # taken by every flusher it starts
        meter.create_observable_gauge(
            "boltmq.store.dispatch.lag",
            callbacks=[self._observe_dispatch_lag],
            unit="By",
            description="CommitLog bytes not yet dispatched to consume queues and index",
        )
        meter.create_observable_gauge(
            "boltmq.store.commitlog.max_offset",
            callbacks=[self._observe_max_offset],
            unit="By",
            description="End of the CommitLog",
        )
        meter.create_observable_gauge(
            "boltmq.store.disk.usage.ratio",
            callbacks=[self._observe_disk],
            unit="1",
            description="Used share of the file system holding the CommitLog",
        )

    def put(self, messages: int, seconds: float) -> None:
        """One Append call of ``messages`` messages that took ``seconds``."""
        self._put_duration.record(seconds)
        self._put_messages.add(messages)

    def cold_pull(self) -> None:
        """One Pull or PullQueues call sent to a cold-read thread."""
        self._cold_pulls.add(1)

    def _observe_dispatch_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        store = self._store
        if not store.running:
            return []
        return [Observation(max(0, store.commitlog.max_offset - store.dispatcher.reput_offset))]

    def _observe_max_offset(self, options: CallbackOptions) -> Iterable[Observation]:
        store = self._store
        return [Observation(store.commitlog.max_offset)] if store.running else []

    def _observe_disk(self, options: CallbackOptions) -> Iterable[Observation]:
        directory = self._store.config.root_dir / "commitlog"
        try:
            return [Observation(disk_usage_percent(directory) / 100)]
        except OSError:
            return []  # no value beats a made-up one
