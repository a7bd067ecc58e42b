"""The broker's OpenTelemetry metrics: traffic per topic, consumer lag, parked long polls.

=======================================  ========  ======================================
Instrument                               Kind      Attributes / meaning
=======================================  ========  ======================================
``boltmq.broker.in.messages``            counter   ``topic``: messages the store stored
``boltmq.broker.in.bytes``               counter   ``topic``: encoded bytes of the send
                                                   requests' messages passed to the store
``boltmq.broker.in.requests``            counter   ``topic``: SendMessage calls that stored
                                                   something (a batch is one, and so
                                                   is each section of a request of
                                                   several topics)
``boltmq.broker.out.messages``           counter   ``topic``: messages pulls returned
``boltmq.broker.out.bytes``              counter   ``topic``: bytes of those pull answers
``boltmq.broker.consumer.lag``           gauge     ``consumer_group``, ``topic``,
                                                   ``queue_id``: queue end minus the
                                                   group's committed offset
``boltmq.broker.long_polls.parked``      gauge     pulls waiting for an arrival now (the
                                                   delay scheduler parks one per level)
=======================================  ========  ======================================

Counters are added once per request (a batch; a request of several topics' sections
once per section, all of its sections under one hold of each counter's lock:
:meth:`BrokerMetrics.sent_each`), never per message, as plain sums that observable
counters report when collected
(:class:`boltmq.kernel.summed_counter.SummedCounter`; an SDK counter's add costs
~5 us). The queue ends the lag is measured against are the last ones this broker
saw, in a send's answer or a pull's ``max_offset``: a queue nobody sent to or pulled
from since the broker started has no lag reported yet (asking the store at
collection time was rejected: collection runs on the scrape thread, which has
no event loop to call the store with).

The same counts of messages in (per topic) and out (per topic and consumer
group) also feed :class:`services.broker.stats.traffic_stats.TrafficStats`, the
rolling last-minute and last-hour totals ``boltmq admin stats`` reads.

Instruments come from the global meter provider (set by
:func:`boltmq.kernel.telemetry.configure`) unless one is passed; without a provider
they are no-ops.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from boltmq.kernel import telemetry
from boltmq.kernel.summed_counter import SummedCounter
from services.broker.arrivals.long_poll import LongPollHub
from services.broker.metadata.consumer_offset import ConsumerOffsetManager
from services.broker.stats.traffic_stats import TrafficStats

METER_NAME = "boltmq.broker"
SentSection = tuple[str, int, int, int, int]
"""What :meth:`BrokerMetrics.sent` counts of one send: (topic, queue_id, stored,
encoded_bytes, queue_end)."""


class BrokerMetrics:
    """The broker's instruments; processors call :meth:`sent` and :meth:`pulled`."""

    def __init__(
        self,
        hub: LongPollHub,
        offsets: ConsumerOffsetManager,
        meter_provider: MeterProvider | None = None,
        traffic: TrafficStats | None = None,
    ) -> None:
        self._hub = hub
        self.traffic = traffic if traffic is not None else TrafficStats()
        """Rolling per-topic and per-group totals of the messages counted here."""
        self._offsets = offsets
        self._queue_ends: dict[tuple[str, int], int] = {}
        meter = telemetry.meter(METER_NAME, meter_provider)
        self._messages_in = SummedCounter(
            meter,
            "boltmq.broker.in.messages",
            "{message}",
            "Messages stored through this broker",
            "topic",
        )
        self._bytes_in = SummedCounter(
            meter,
            "boltmq.broker.in.bytes",
            "By",
            "Encoded bytes of the messages sent to the store",
            "topic",
        )
        self._requests_in = SummedCounter(
            meter,
            "boltmq.broker.in.requests",
            "{request}",
            "SendMessage calls that stored messages (a batch is one)",
            "topic",
        )
        self._messages_out = SummedCounter(
            meter,
            "boltmq.broker.out.messages",
            "{message}",
            "Messages returned to consumers' pulls",
            "topic",
        )
        self._bytes_out = SummedCounter(
            meter, "boltmq.broker.out.bytes", "By", "Bytes of the pull answers", "topic"
        )
        meter.create_observable_gauge(
            "boltmq.broker.consumer.lag",
            callbacks=[self._observe_lag],
            unit="{message}",
            description="Messages in a queue after the group's committed offset",
        )
        meter.create_observable_gauge(
            "boltmq.broker.long_polls.parked",
            callbacks=[self._observe_parked],
            unit="{request}",
            description="Pulls parked until a message arrives",
        )

    def sent(
        self, topic: str, queue_id: int, stored: int, encoded_bytes: int, queue_end: int
    ) -> None:
        """One send request: ``stored`` messages, the queue now ends at ``queue_end``."""
        self._messages_in.add(stored, topic)
        self.traffic.produced(topic, stored)
        self._bytes_in.add(encoded_bytes, topic)
        self._requests_in.add(1, topic)
        if queue_end > 0:
            self._queue_ends[(topic, queue_id)] = queue_end

    def sent_each(self, sends: Sequence[SentSection]) -> None:
        """:meth:`sent` of each section of a send request, each counter's lock taken once."""
        self._messages_in.add_each([(topic, stored) for topic, _, stored, _, _ in sends])
        self.traffic.produced_each([(topic, stored) for topic, _, stored, _, _ in sends])
        self._bytes_in.add_each([(topic, size) for topic, _, _, size, _ in sends])
        self._requests_in.add_each([(topic, 1) for topic, _, _, _, _ in sends])
        ends = self._queue_ends
        for topic, queue_id, _, _, queue_end in sends:
            if queue_end > 0:
                ends[(topic, queue_id)] = queue_end

    def pulled(
        self,
        group: str,
        topic: str,
        queue_id: int,
        returned: int,
        answer_bytes: int,
        queue_end: int,
    ) -> None:
        """One answered pull of ``group``: ``returned`` messages; the store said the queue
        ends here."""
        if returned:
            self._messages_out.add(returned, topic)
            self.traffic.consumed(group, topic, returned)
            self._bytes_out.add(answer_bytes, topic)
        if queue_end > 0:
            self._queue_ends[(topic, queue_id)] = queue_end

    def _observe_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        # Runs on the scrape thread: work on copies (dict copies are atomic under the GIL).
        ends = dict(self._queue_ends)
        observations = []
        for (group, topic), queues in self._offsets.snapshot():
            for queue_id, committed in queues.items():
                end = ends.get((topic, queue_id))
                if end is not None:
                    observations.append(
                        Observation(
                            max(0, end - committed),
                            {"consumer_group": group, "topic": topic, "queue_id": queue_id},
                        )
                    )
        return observations

    def _observe_parked(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._hub.parked_count)]
