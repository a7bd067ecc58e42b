"""Batch and streaming writes to ``boltmq``: rows become messages, sent in batches.

Delivery is at-least-once: a task that fails after some of its batches were
stored is retried by Spark and sends them again, and a streaming micro-batch
re-run after a crash does the same. Consumers that need exactly-once
processing deduplicate by a key of their own (``keys`` or a property).

Rows are encoded straight into CommitLog records (no Message objects), grouped
by (topic, sharding key) and sent with :meth:`boltmq.Producer.send_records`
(one request to one queue per group of up to ``batchSize``); a row no store
would accept, or any message the broker refuses, fails the task naming it.
Up to ``maxInFlight`` sends wait on the broker at once (threads: gRPC waits
without the GIL), so the task encodes the next batch while the broker and the
store work on the previous ones; two batches of one sharding key are never in
flight together, so a key's messages keep their order.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from boltmq.kernel.allocator import settle_garbage_collector_once
from boltmq.message import SendStatus
from boltmq.spark.errors import OptionError, WriteError
from boltmq.spark.options import SinkOptions
from boltmq.unique_id import new_unique_id
from boltmq.wire.record import PROPERTY_UNIQ_KEY, InvalidMessage
from boltmq.wire.record_batch import send_record_parts

SAVE_MODE_HELP = (
    "A boltmq write only appends: use df.write.format('boltmq').mode('append').save(). "
    "Spark's default save mode, ErrorIfExists, is rejected by Spark for every Python data "
    "source (UNSUPPORTED_DATA_SOURCE_SAVE_MODE), and overwrite cannot apply to a topic, "
    "which is an append-only log."
)

OUTPUT_MODE_HELP = (
    "A boltmq streaming write only appends: use outputMode('append') (the default). "
    "Complete mode would send the whole result table again at every micro-batch, as new "
    "messages, since a topic cannot be truncated; update mode is rejected by Spark for "
    "Python sinks. Aggregations need a watermark to run in append mode."
)


def refuse_overwrite(overwrite: bool, *, streaming: bool = False) -> None:
    """Overwrite (a batch save mode, or complete output mode) has no meaning for a topic,
    an append-only log; say what to do instead."""
    if overwrite:
        raise OptionError(OUTPUT_MODE_HELP if streaming else SAVE_MODE_HELP)


@dataclass
class SentCount(WriterCommitMessage):
    """What one task sent."""

    messages: int


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _body(value: Any, row: int) -> bytes:
    if value is None:
        raise WriteError(f"row {row}: body is null; every message needs a body")
    if isinstance(value, str):
        return value.encode("utf-8")
    return value if type(value) is bytes else bytes(value)


Key = tuple[str, "str | None"]
"""(topic, sharding key): the rows sent together."""


def _records(
    options: SinkOptions, batch: Any, born_ms: int
) -> Iterator[tuple[Key, tuple[bytes, bytes, bytes]]]:
    """``((topic, sharding_key), record parts)`` for every row of an Arrow record batch,
    encoded straight from the columns (no Message objects: ~1 us a row instead of ~3.5),
    refused as :meth:`boltmq.Message.to_record` refuses a message."""
    columns = {name: batch.column(name).to_pylist() for name in options.columns}
    count = batch.num_rows
    nothing = [None] * count
    topics = columns.get("topic", nothing)
    bodies = columns["body"]
    tags = columns.get("tags", nothing)
    keys = columns.get("keys", nothing)
    properties = columns.get("properties", nothing)
    sharding = columns.get("sharding_key", nothing)
    for row in range(count):
        topic = topics[row] or options.topic
        if not topic:
            raise WriteError(f"row {row}: topic is null and no topic option was given")
        try:
            props = dict(properties[row]) if properties[row] else None
            parts = send_record_parts(
                topic,
                _body(bodies[row], row),
                _text(tags[row]) or None,
                keys[row] or (),
                props,
                0,
                born_ms,
                (props or {}).get(PROPERTY_UNIQ_KEY) or new_unique_id(),
            )
        except (InvalidMessage, TypeError, struct.error) as exc:
            raise WriteError(f"row {row}: a message to {topic[:60]!r} is invalid: {exc}") from None
        yield (topic, _text(sharding[row])), parts


def send_all(options: SinkOptions, batches: Iterator[Any]) -> SentCount:
    """Send every row of ``batches``; WriteError on the first refusal (the task fails)."""
    from boltmq.options import ProducerOptions
    from boltmq.producer import Producer

    settle_garbage_collector_once()  # a Spark worker's heap (boltmq/kernel/allocator.py)
    with (
        Producer(
            options.registry,
            options.group,
            options=ProducerOptions(send_timeout_ms=options.send_timeout_ms),
            tls=options.security.tls,
            credentials=options.security.credentials,
        ) as producer,
        _Sends(producer, options.in_flight, options.security.unreachable_hint()) as sends,
    ):
        pending: dict[Key, list[bytes]] = {}
        full = PARTS_PER_RECORD * options.batch_size
        for batch in batches:
            for key, parts in _records(options, batch, time.time_ns() // 1_000_000):
                group = pending.get(key)
                if group is None:
                    group = pending[key] = []
                group += parts
                if len(group) >= full:
                    sends.submit(key, pending.pop(key))
        for key, group in pending.items():
            sends.submit(key, group)
    return SentCount(sends.sent)


PARTS_PER_RECORD = 3
"""head, body and tail (:func:`boltmq.wire.record_batch.send_record_parts`)."""


class _Sends:
    """At most ``limit`` batches in flight; one at a time per (topic, sharding key)."""

    def __init__(self, producer: Any, limit: int, unreachable_hint: str) -> None:
        self.producer = producer
        self.limit = limit
        self.unreachable_hint = unreachable_hint
        self.sent = 0
        self._pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="boltmq-spark")
        self._flying: list[Future[int]] = []
        self._last: dict[Key, Future[int]] = {}

    def __enter__(self) -> _Sends:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        try:
            if kind is None:
                while self._flying:
                    self._settle(self._flying[0])
        finally:
            for future in self._flying:
                future.cancel()
            self._pool.shutdown(wait=True)

    def submit(self, key: Key, parts: list[bytes]) -> None:
        """Send the records whose parts are ``parts`` (all of ``key``)."""
        previous = self._last.get(key)
        if key[1] is not None and previous is not None and previous in self._flying:
            self._settle(previous)  # keep a sharding key's batches in order
        while len(self._flying) >= self.limit:
            self._settle(self._flying[0])
        future = self._pool.submit(
            _send,
            self.producer,
            key,
            b"".join(parts),
            len(parts) // PARTS_PER_RECORD,
            self.unreachable_hint,
        )
        self._flying.append(future)
        self._last[key] = future

    def _settle(self, future: Future[int]) -> None:
        """Wait for ``future``; its WriteError fails the task."""
        self._flying.remove(future)
        self.sent += future.result()


def _send(producer: Any, key: Key, records: bytes, count: int, unreachable_hint: str) -> int:
    topic, sharding_key = key
    try:
        results = producer.send_records(topic, records, count, sharding_key=sharding_key)
    except Exception as exc:
        # The SDK's errors carry the gRPC code's name; UNAVAILABLE is where a TLS
        # mismatch shows (the handshake failure itself is not reported).
        hint = unreachable_hint if "UNAVAILABLE" in str(exc) else ""
        raise WriteError(f"sending {count} messages to {topic!r} failed: {exc}{hint}") from exc
    for result in results:
        if result.status is SendStatus.SEND_FAILED:
            raise WriteError(
                f"the broker refused a message to {topic!r}: {result.put_status} {result.error}"
            )
    return len(results)


class BoltMQWriter(DataSourceArrowWriter):
    """``df.write.format("boltmq").mode("append")``."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return send_all(self.options, iterator)


class BoltMQStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("boltmq")``: each micro-batch's rows, at least once."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return send_all(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every message was acknowledged before its task finished."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: sent messages stay sent (at-least-once)."""
