"""The SDK's tuning options: one frozen dataclass per client that has many.

    producer = Producer(registry, "orders", options=ProducerOptions(linger_ms=20))
    consumer = PushConsumer(
        registry, "billing", {"orders": "*"}, listener,
        options=PushConsumerOptions(consume_from="LAST", consume_threads=8),
    )

Every field has a default, its unit in its name or its docstring, and is
checked when the options are made: a wrong value is a ValueError naming the
field, before any connection is opened. The essential arguments (registry,
group, subscriptions, listener, TLS, credentials) stay the clients' own
parameters; the options say how they work, not what they are for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from boltmq.wire.topic import NAME_CHARACTERS, is_group

MODELS = ("CLUSTERING", "BROADCASTING")
"""Message models of a push consumer's group."""
CONSUME_FROM = ("FIRST", "LAST", "TIMESTAMP", "FIRST_OFFSET", "LAST_OFFSET")
"""Where a push consumer starts a queue its group has no committed offset for
(``FIRST_OFFSET`` and ``LAST_OFFSET``: RocketMQ's names of ``FIRST`` and ``LAST``)."""
PULL_MAX_BYTES = 4 * 1024 * 1024
"""Default ``pull_max_bytes``: the record bytes of one PullQueues call."""
CONSUME_THREADS = 4
"""Default ``consume_threads``."""


def _check_int(options: object, name: str, minimum: int) -> None:
    """ValueError unless the field ``name`` of ``options`` is an int of at least ``minimum``."""
    value = getattr(options, name)
    if type(value) is not int or value < minimum:
        bound = "positive" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{type(options).__name__}.{name} must be {bound}, not {value!r}")


def _check_choice(options: object, name: str, choices: Sequence[str]) -> None:
    value = getattr(options, name)
    if value not in choices:
        raise ValueError(f"{type(options).__name__}.{name} must be one of {choices}, not {value!r}")


SEND_PATHS = ("stream", "unary")
"""What ``ProducerOptions.send_path`` may be."""


@dataclass(frozen=True)
class ProducerOptions:
    """How a :class:`boltmq.Producer` sends (see :mod:`boltmq.producer`)."""

    send_timeout_ms: int = 3_000
    """Deadline of one send request (ms); also of the producer's other broker calls."""
    retry_times: int = 2
    """Attempts after the first when a send fails in a way worth retrying (another broker's
    queue each time; a sharded send retries its own queue). 0: no retry."""
    batch_size: int = 256
    """Messages of one topic that ``send_async`` / ``send_oneway`` gather into one request
    at most; a full batch leaves without waiting for ``linger_ms``. Also the most messages
    one natural batch of concurrent sends carries (``natural_batching``)."""
    linger_ms: int = 5
    """How long an asynchronous message waits for others to join its batch (ms)."""
    max_pending: int = 100_000
    """Asynchronous messages queued at most (messages); ``send_async`` waits while the
    queue is full (back-pressure, never an unbounded buffer)."""
    default_topic_queue_nums: int = 4
    """Queues per broker of a topic that this producer's first send creates (queues)."""
    route_refresh_ms: int = 30_000
    """How long a topic's route is used before the registry is asked again (ms)."""
    fault_avoidance_ms: int = 10_000
    """How long a broker group is skipped after a send to it failed as unreachable,
    timed out, overloaded or SERVICE_NOT_AVAILABLE (ms; :mod:`boltmq.fault_avoidance`):
    sends take other groups' queues meanwhile. Sharded sends never move (order): they
    fail instead. 0: off (a failed send still retries on another group)."""
    natural_batching: bool = True
    """Concurrent synchronous sends (``send``, ``send_batch`` of several threads) to one
    broker and topic that queue while a call there is in flight leave together in the next
    call, each getting its own result or error (:mod:`boltmq.send_batcher`); a send alone
    leaves at once. False: every send is its own call."""
    compress_body_over: int = 4096
    """Bodies longer than this (bytes; RocketMQ's ``compressMsgBodyOverHowmuch``) are
    sent and stored zlib-compressed, with the COMPRESSED sys flag (zlib only: the
    standard library's); consumers inflate them (:mod:`boltmq.wire.body_compression`).
    At least 1; a value above the broker's largest body turns compression off."""
    heartbeat_interval_ms: int = 30_000
    """How often the producer heartbeats its group to every master it knows (ms;
    :mod:`boltmq.producer_heartbeat`); a master it learns of is heartbeated within a second."""
    send_path: str = "stream"
    """``stream``: sends go as messages on one open SendStream per broker
    (:mod:`boltmq.send_stream`); ``unary``: one SendMessage call each (for brokers
    that predate SendStream, or to compare)."""
    stream_in_flight_max: int = 256
    """Sends waiting on one broker's stream at most (``send_path="stream"``); a send
    beyond it waits for a place until its deadline. Keep it at or below the broker's
    ``send_stream_in_flight_max``."""

    def __post_init__(self) -> None:
        if self.send_path not in SEND_PATHS:
            raise ValueError(
                f"ProducerOptions.send_path must be one of {', '.join(SEND_PATHS)}, "
                f"not {self.send_path!r}"
            )
        if type(self.natural_batching) is not bool:
            raise ValueError(
                f"ProducerOptions.natural_batching must be a bool, not {self.natural_batching!r}"
            )
        for name in (
            "send_timeout_ms",
            "batch_size",
            "max_pending",
            "default_topic_queue_nums",
            "compress_body_over",
            "heartbeat_interval_ms",
            "stream_in_flight_max",
        ):
            _check_int(self, name, minimum=1)
        for name in ("retry_times", "linger_ms", "route_refresh_ms", "fault_avoidance_ms"):
            _check_int(self, name, minimum=0)


@dataclass(frozen=True)
class PushConsumerOptions:
    """How a :class:`boltmq.PushConsumer` consumes (see :mod:`boltmq.push_consumer`)."""

    model: str = "CLUSTERING"
    """``CLUSTERING``: the group's members share the queues and commit offsets to the
    broker; ``BROADCASTING``: every member reads every queue and keeps its offsets in a
    local file (:mod:`boltmq.offset_store`), continuing there after a restart."""
    orderly: bool = False
    """Lock each queue on the broker and pass its messages one at a time, in order; a
    failed message is retried in place (its queue waits) instead of sent back."""
    consume_from: str = "FIRST"
    """Where a queue the group has no committed offset for starts: ``FIRST`` (or
    ``FIRST_OFFSET``: everything retained), ``LAST`` (or ``LAST_OFFSET``: only new
    messages) or ``TIMESTAMP`` (the first message stored at or after
    ``consume_timestamp_ms``). A queue with a committed offset always resumes there."""
    consume_timestamp_ms: int = 0
    """With ``consume_from="TIMESTAMP"`` (and only then, where it is required): the time
    new queues start from (epoch ms)."""
    pull_batch_size: int = 32
    """Messages one pull takes from each queue at most (messages)."""
    pull_max_bytes: int = PULL_MAX_BYTES
    """Record bytes one PullQueues call of a thread may return, its queues together (bytes)."""
    consume_batch_max_size: int = 32
    """Messages one listener call gets at most (messages; orderly: always 1)."""
    consume_threads: int = CONSUME_THREADS
    """Threads that pull and call the listener (threads); each serves every n-th owned
    queue, so at most this many listener calls run at once."""
    long_poll_ms: int = 15_000
    """How long a pull waits at the broker for new messages (ms; 0: it answers at once)."""
    rebalance_interval_ms: int = 20_000
    """How often the consumer heartbeats and retakes its share of the queues (ms)."""
    route_refresh_ms: int = 30_000
    """How long a topic's route is used before the registry is asked again (ms): queues
    added to a topic, or a broker group added, are taken at the first rebalance after."""
    commit_interval_ms: int = 5_000
    """How often consumed offsets are committed to the broker (ms; CLUSTERING)."""
    suspend_on_failure_ms: int = 1_000
    """How long a queue waits before its failed messages are offered to the listener again
    when the broker did not take them back (ms)."""
    rpc_timeout_ms: int = 5_000
    """Deadline of every broker and registry call but the long poll's wait (ms)."""
    max_reconsume_times: int = 0
    """Failures after which a message goes to the group's dead-letter topic (0: the
    group's ``retry_max_times``, 16)."""
    offset_store_dir: str = ""
    """BROADCASTING: the directory of the offsets files (``""``: ``~/.boltmq/offsets``);
    this consumer's is ``<dir>/<instance_name>/<group>/offsets.json``."""
    instance_name: str = "DEFAULT"
    """BROADCASTING: this consumer's stable name in ``offset_store_dir`` (RocketMQ's
    ``instanceName``): members of one group sharing a directory need different ones
    (letters, digits, ``%``, ``|``, ``_`` and ``-``)."""

    def __post_init__(self) -> None:
        _check_choice(self, "model", MODELS)
        _check_choice(self, "consume_from", CONSUME_FROM)
        _check_int(self, "consume_timestamp_ms", minimum=0)
        if (self.consume_from == "TIMESTAMP") != (self.consume_timestamp_ms > 0):
            raise ValueError(
                "PushConsumerOptions.consume_timestamp_ms (epoch ms) is set with "
                "consume_from='TIMESTAMP', and only then; got consume_from="
                f"{self.consume_from!r}, consume_timestamp_ms={self.consume_timestamp_ms!r}"
            )
        if type(self.orderly) is not bool:
            raise ValueError(f"PushConsumerOptions.orderly must be a bool, not {self.orderly!r}")
        for name in (
            "pull_batch_size",
            "pull_max_bytes",
            "consume_batch_max_size",
            "consume_threads",
            "rebalance_interval_ms",
            "commit_interval_ms",
            "rpc_timeout_ms",
        ):
            _check_int(self, name, minimum=1)
        for name in (
            "long_poll_ms",
            "suspend_on_failure_ms",
            "max_reconsume_times",
            "route_refresh_ms",
        ):
            _check_int(self, name, minimum=0)
        if not isinstance(self.offset_store_dir, str):
            raise ValueError(
                f"PushConsumerOptions.offset_store_dir must be a str, not {self.offset_store_dir!r}"
            )
        if not is_group(self.instance_name):
            raise ValueError(
                f"PushConsumerOptions.instance_name must be 1..255 of {NAME_CHARACTERS}, "
                f"not {self.instance_name!r}"
            )
