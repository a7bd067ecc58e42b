"""Option parsing for both formats: one frozen dataclass per use, checked on the driver.

Spark hands options over as strings (case-insensitive names). Every mistake is
an :class:`~boltmq.spark.errors.OptionError` naming the option and the accepted
forms, raised while the query is planned, before any task starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from boltmq.spark.errors import OptionError
from boltmq.spark.security import OPTIONS as SECURITY_OPTIONS
from boltmq.spark.security import ClientSecurity, client_security
from boltmq.wire.record_batch import RECORDS_MAX

EARLIEST: Final = -2
"""JSON offset meaning "the queue's first offset" (Kafka's convention)."""
LATEST: Final = -1
"""JSON offset meaning "the queue's end" (the next offset to be written)."""
DEFAULT_GROUP: Final = "SPARK_READER"
DEFAULT_PRODUCER_GROUP: Final = "SPARK_WRITER"
PARTITION_OFFSETS_MAX: Final = 50_000
"""Default ``maxOffsetsPerPartition``: a queue range longer than this is split."""
SEND_BATCH_MAX: Final = 1024
"""Default ``batchSize``: messages per send (one request to one queue)."""
SENDS_IN_FLIGHT: Final = 4
"""Default ``maxInFlight``: sends a task keeps waiting on the broker at once."""

OffsetSpec = str | dict[str, dict[str, int]]
"""``"earliest"``, ``"latest"`` or ``{"topic": {"broker-a/0": offset}}``."""

_OFFSETS_FORM = 'earliest, latest or JSON like {"T": {"broker-a/0": 23}} (-2 earliest, -1 latest)'


def option_text(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    return None if value is None or str(value).strip() == "" else str(value).strip()


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = option_text(options, name)
    if value is None:
        return default
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise OptionError(f"option {name}={value!r}: expected true or false")


def positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    """The option as an int > 0 (``default`` when absent); OptionError otherwise."""
    value = option_text(options, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"option {name}={value!r}: expected a positive integer") from None
    if number <= 0:
        raise OptionError(f"option {name}={value!r}: expected a positive integer")
    return number


def queue_key(broker_name: str, queue_id: int) -> str:
    """The key of a queue inside one topic's offsets: ``broker-a/0``."""
    return f"{broker_name}/{queue_id}"


def split_queue_key(key: str) -> tuple[str, int]:
    """``("broker-a", 0)`` from ``broker-a/0``; OptionError when malformed."""
    broker, sep, queue = key.rpartition("/")
    if not sep or not broker or not queue.isdigit():
        raise OptionError(f"queue {key!r}: expected brokerName/queueId, e.g. broker-a/0")
    return broker, int(queue)


def parse_offsets(name: str, value: str | None, default: str) -> OffsetSpec:
    """``startingOffsets`` / ``endingOffsets``: a keyword or per-queue JSON, validated."""
    if value is None:
        return default
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option {name} is not valid JSON ({exc.msg} at char {exc.pos}); "
            f"expected {_OFFSETS_FORM}"
        ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(f"option {name}: expected {_OFFSETS_FORM}")
    spec: dict[str, dict[str, int]] = {}
    for topic, queues in parsed.items():
        if not isinstance(queues, dict):
            raise OptionError(
                f"option {name}: topic {topic!r} must map queues to offsets; "
                f"expected {_OFFSETS_FORM}"
            )
        spec[topic] = {}
        for key, offset in queues.items():
            split_queue_key(key)
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OptionError(
                    f"option {name}: offset {offset!r} of {topic} {key} must be "
                    f"an integer >= 0, or -2 (earliest) / -1 (latest)"
                )
            spec[topic][key] = offset
    return spec


@dataclass(frozen=True)
class SourceOptions:
    """What a ``boltmq`` read needs: where the registry is, which topics, which offsets."""

    registry: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    starting_timestamp_ms: int | None = None
    subscription: str = "*"
    include_body: bool = True
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    max_offsets_per_partition: int = PARTITION_OFFSETS_MAX
    group: str = DEFAULT_GROUP
    rpc_timeout_ms: int = 10_000
    security: ClientSecurity = field(default_factory=ClientSecurity)
    """TLS and ACL credentials of every call (:mod:`boltmq.spark.security`)."""

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one this query reads."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics


def _registry(options: Mapping[str, str]) -> str:
    registry = option_text(options, "registry")
    if registry is None:
        raise OptionError(
            "option registry is required: the name registry's host:port "
            "(e.g. .option('registry', '127.0.0.1:9876'))"
        )
    from boltmq.client import parse_addresses

    try:
        parse_addresses(registry)
    except ValueError as exc:
        raise OptionError(f"option registry={registry!r}: {exc}") from None
    return registry


def security_options(options: Mapping[str, str]) -> ClientSecurity:
    """The TLS and credential options of a read or write, checked, files read."""
    return client_security(*(option_text(options, name) for name in SECURITY_OPTIONS))


def _topics(options: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    topics = option_text(options, "topics") or option_text(options, "topic")
    pattern = option_text(options, "topicPattern")
    if (topics is None) == (pattern is None):
        raise OptionError(
            "give exactly one of the options topics (a comma list) and "
            "topicPattern (a regular expression)"
        )
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(
                f"option topicPattern={pattern!r} is not a regular expression: {exc}"
            ) from None
        return (), pattern
    names = tuple(dict.fromkeys(t.strip() for t in (topics or "").split(",") if t.strip()))
    if not names:
        raise OptionError("option topics names no topic")
    return names, None


def source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Parse and check a ``boltmq`` read's options (batch or streaming)."""
    registry = _registry(options)
    topics, pattern = _topics(options)
    starting = parse_offsets(
        "startingOffsets",
        option_text(options, "startingOffsets"),
        "latest" if streaming else "earliest",
    )
    ending = parse_offsets("endingOffsets", option_text(options, "endingOffsets"), "latest")
    if streaming and option_text(options, "endingOffsets") is not None:
        raise OptionError(
            "option endingOffsets is for batch reads only; a streaming query "
            "reads until stopped (use trigger(availableNow=True) to stop at "
            "the end)"
        )
    if not streaming and starting == "latest":
        raise OptionError(
            "startingOffsets=latest would read nothing in a batch query; use "
            "earliest, JSON offsets or startingTimestamp"
        )
    if ending == "earliest":
        raise OptionError("endingOffsets=earliest would read nothing; use latest or JSON")
    for label, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(spec, dict) and pattern is None:
            unknown = sorted(set(spec) - set(topics))
            if unknown:
                raise OptionError(f"option {label} names topics not in topics: {unknown}")
    timestamp = option_text(options, "startingTimestamp")
    starting_ms = None
    if timestamp is not None:
        if not timestamp.isdigit():
            raise OptionError(
                f"option startingTimestamp={timestamp!r}: expected milliseconds since the epoch"
            )
        starting_ms = int(timestamp)
    return SourceOptions(
        registry=registry,
        topics=topics,
        topic_pattern=pattern,
        starting=starting,
        ending=ending,
        starting_timestamp_ms=starting_ms,
        subscription=option_text(options, "subscription") or "*",
        include_body=option_bool(options, "includeBody", True),
        fail_on_data_loss=option_bool(options, "failOnDataLoss", True),
        max_offsets_per_trigger=positive_int(options, "maxOffsetsPerTrigger", None),
        max_offsets_per_partition=positive_int(
            options, "maxOffsetsPerPartition", PARTITION_OFFSETS_MAX
        )
        or PARTITION_OFFSETS_MAX,
        group=option_text(options, "group") or DEFAULT_GROUP,
        rpc_timeout_ms=positive_int(options, "rpcTimeoutMs", 10_000) or 10_000,
        security=security_options(options),
    )


@dataclass(frozen=True)
class SinkOptions:
    """What a ``boltmq`` write needs."""

    registry: str
    topic: str | None = None
    batch_size: int = SEND_BATCH_MAX
    group: str = DEFAULT_PRODUCER_GROUP
    send_timeout_ms: int = 10_000
    columns: tuple[str, ...] = field(default=())
    in_flight: int = SENDS_IN_FLIGHT
    security: ClientSecurity = field(default_factory=ClientSecurity)
    """TLS and ACL credentials of every call (:mod:`boltmq.spark.security`)."""


WRITE_COLUMNS: Final = ("topic", "body", "tags", "keys", "properties", "sharding_key")
"""Columns a write reads; any other column is ignored (so a read can be written back)."""


def sink_options(options: Mapping[str, str], column_names: list[str]) -> SinkOptions:
    """Parse and check a ``boltmq`` write's options against the DataFrame's columns."""
    registry = _registry(options)
    topic = option_text(options, "topic")
    if "body" not in column_names:
        raise OptionError(
            f"a boltmq write needs a body column (binary or string); the "
            f"DataFrame has {column_names}"
        )
    if topic is None and "topic" not in column_names:
        raise OptionError("a boltmq write needs a topic: a topic column or .option('topic', ...)")
    batch_size = positive_int(options, "batchSize", SEND_BATCH_MAX) or SEND_BATCH_MAX
    if batch_size > RECORDS_MAX:
        raise OptionError(
            f"option batchSize={batch_size}: at most {RECORDS_MAX} messages go in one send"
        )
    return SinkOptions(
        registry=registry,
        topic=topic,
        batch_size=batch_size,
        in_flight=positive_int(options, "maxInFlight", SENDS_IN_FLIGHT) or SENDS_IN_FLIGHT,
        group=option_text(options, "producerGroup") or DEFAULT_PRODUCER_GROUP,
        send_timeout_ms=positive_int(options, "sendTimeoutMs", 10_000) or 10_000,
        columns=tuple(c for c in column_names if c in WRITE_COLUMNS),
        security=security_options(options),
    )
