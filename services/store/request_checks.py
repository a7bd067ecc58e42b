"""Request checks: the fields of a StoreService request, checked before the store sees them.

A malformed request (a negative offset, a topic that can never exist, a bad
field) is refused with :class:`~services.store.errors.BadRequest`:
INVALID_ARGUMENT, the message starting with the field's name (a nested one
by its path: ``pulls[2].topic``, ``more[0].queue_id``). A size limit of 0
means the store's default and one above its maximum is lowered to it, never
refused. A read of CommitLog bytes that are gone or not yet there is
OUT_OF_RANGE; a store that is not running is UNAVAILABLE.

Every limit a request is held to is named here. A bad message inside an
Append batch is not a bad request: the engine answers it with a
MESSAGE_ILLEGAL result for that message.
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Final

import grpc

from boltmq.kernel.errors import Unavailable
from boltmq.v1 import store_pb2
from boltmq.wire.pull_answer import PULL_QUEUES_MAX
from boltmq.wire.record_batch import RecordBatch
from boltmq.wire.topic import InvalidSubscription, InvalidTopic, parse_subscription, validate_topic
from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.config_files import InvalidConfigName, validate_config_name
from services.store.errors import BadRequest, Rejected
from services.store.store import MessageStore

APPEND_MESSAGES_MAX: Final = 16_384
"""Messages in one Append at most (a batch of 256 is the SDK's default)."""
PULL_MESSAGES_MAX: Final = 8_192
"""Messages one Pull returns at most (larger max_messages is lowered to this)."""
PULL_BYTES_MAX: Final = 32 * 1024 * 1024
"""Bytes one Pull returns at most (half the gRPC message limit)."""
PULL_QUEUES_DEFAULT_BYTES: Final = 4 * 1024 * 1024
"""Records of all answers of one PullQueues when its max_bytes is 0."""
QUERY_DEFAULT_MAX_COUNT: Final = 32
"""Messages QueryByKey returns when max_count is 0."""
QUERY_MAX_COUNT: Final = 1_024
"""Messages QueryByKey returns at most."""
READ_CHUNK_DEFAULT_BYTES: Final = 1024 * 1024
"""CommitLog bytes per ReadCommitLog chunk when max_chunk_bytes is 0."""
READ_CHUNK_MAX_BYTES: Final = 32 * 1024 * 1024
"""CommitLog bytes per chunk at most (larger max_chunk_bytes is lowered to this)."""
REPLICA_ADDRESS_MAX_CHARS: Final = 255
"""Longest replica identity ReportReplicas accepts."""


# ------------------------------------------------------------------- fields
def valid_topic(field: str, topic: str) -> str:
    """``topic`` if it is a topic name that can exist; BadRequest otherwise."""
    try:
        return validate_topic(topic)
    except InvalidTopic as exc:
        raise BadRequest(field, str(exc)) from None


def valid_queue_id(field: str, queue_id: int, max_queue_id: int) -> int:
    """``queue_id`` if it lies in ``0..max_queue_id``; BadRequest otherwise."""
    if not 0 <= queue_id <= max_queue_id:
        raise BadRequest(field, f"{queue_id} is not a queue id (0..{max_queue_id})")
    return queue_id


def non_negative(field: str, value: int) -> int:
    """``value`` unless it is negative."""
    if value < 0:
        raise BadRequest(field, f"{value} must not be negative")
    return value


def size_limit(field: str, value: int, default: int, maximum: int) -> int:
    """A request's size limit: 0 means ``default``; above ``maximum`` is lowered to it."""
    if value < 0:
        raise BadRequest(field, f"{value} must not be negative (0: the store's default)")
    return min(value or default, maximum)


def valid_config_name(name: str) -> str:
    """A config file's name (:func:`services.store.config_files.validate_config_name`)."""
    try:
        return validate_config_name(name)
    except InvalidConfigName as exc:
        raise BadRequest("name", str(exc)) from None


def parse_host_port(field: str, text: str) -> tuple[str, int]:
    """``(address, port)`` from ``addr:port`` or ``[v6addr]:port``; BadRequest if malformed."""
    try:
        return _host_port(text)
    except ValueError as exc:
        raise BadRequest(field, f"{text[:80]!r} is not 'address:port' {exc}") from None


@functools.lru_cache(maxsize=1024)
def _host_port(text: str) -> tuple[str, int]:
    """:func:`parse_host_port`'s answer, remembered: every append of a broker names the
    same few hosts, and ``ipaddress`` costs ~5 us a parse. ValueError saying what is
    wrong (an error is not remembered)."""
    host, sep, port_text = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        raise ValueError("with an IP address") from None
    if not sep or not 0 <= port <= 65535:
        raise ValueError("with a port 0..65535")
    return host, port


def peer_host(peer: str) -> tuple[str, int]:
    """The caller's address from ``context.peer()`` (``ipv4:a:p`` / ``ipv6:[a]:p``).

    Anything else (a Unix socket, an in-process call) is the loopback address
    with port 0: born_host is informational, never a reason to refuse a message.
    """
    kind, _, address = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        try:
            return parse_host_port("peer", address)
        except BadRequest:
            pass
    return "127.0.0.1", 0


# ------------------------------------------------------------------- the store's state
def running_store(store: MessageStore) -> MessageStore:
    """``store`` if it is running; UNAVAILABLE otherwise (recovering or shutting down)."""
    if not store.running:
        raise Unavailable("store is not running (recovering or shutting down); retry")
    return store


def check_readable(commitlog: CommitLog, offset: int) -> None:
    """OUT_OF_RANGE unless ``offset`` lies within ``[min_offset, max_offset]``."""
    if offset < commitlog.min_offset:
        raise Rejected(
            grpc.StatusCode.OUT_OF_RANGE,
            f"offset: {offset} was deleted; the CommitLog starts at {commitlog.min_offset}",
        )
    if offset > commitlog.max_offset:
        raise Rejected(
            grpc.StatusCode.OUT_OF_RANGE,
            f"offset: {offset} is past the CommitLog's end {commitlog.max_offset}",
        )


# ------------------------------------------------------------------- whole requests
def check_message_count(request: store_pb2.AppendRequest) -> None:
    """At most APPEND_MESSAGES_MAX messages in an Append (records: :func:`record_batch`)."""
    count = len(request.messages)
    if count > APPEND_MESSAGES_MAX:
        raise BadRequest("messages", f"{count} messages, at most {APPEND_MESSAGES_MAX} per call")


def record_batch(
    request: store_pb2.AppendRequest, records: bytes, max_queue_id: int
) -> RecordBatch:
    """The raw records of an Append, after checking the request's own fields."""
    if request.messages:
        raise BadRequest("records", "send messages or records, not both")
    count = request.record_count
    if not 0 < count <= APPEND_MESSAGES_MAX:
        raise BadRequest("record_count", f"{count} records; 1..{APPEND_MESSAGES_MAX} per call")
    if not records:
        raise BadRequest("records", f"empty, but record_count is {count}")
    topic = valid_topic("topic", request.topic)
    queue_id = valid_queue_id("queue_id", request.queue_id, max_queue_id)
    return RecordBatch(records, count, topic, queue_id)


def pull_limits(
    request: store_pb2.PullRequest, prefix: str, config: StoreConfig
) -> tuple[int, int]:
    """``(max_messages, max_bytes)`` of a pull whose fields are valid; BadRequest
    naming the field (after ``prefix``) otherwise."""
    valid_topic(f"{prefix}topic", request.topic)
    valid_queue_id(f"{prefix}queue_id", request.queue_id, config.max_queue_id)
    non_negative(f"{prefix}queue_offset", request.queue_offset)
    max_messages = size_limit(
        f"{prefix}max_messages",
        request.max_messages,
        config.max_transfer_count_on_message_in_memory,
        PULL_MESSAGES_MAX,
    )
    max_bytes = size_limit(
        f"{prefix}max_bytes",
        request.max_bytes,
        config.max_transfer_bytes_on_message_in_memory,
        PULL_BYTES_MAX,
    )
    try:
        parse_subscription(request.subscription)
    except InvalidSubscription as exc:
        raise BadRequest(f"{prefix}subscription", str(exc)) from None
    return max_messages, max_bytes


def pull_queues_limits(
    request: store_pb2.PullQueuesRequest, config: StoreConfig
) -> tuple[list[tuple[int, int]], int]:
    """Every pull's :func:`pull_limits` (each queue named once), and the call's max_bytes."""
    pulls = request.pulls
    if not pulls:
        raise BadRequest("pulls", "must name at least one queue")
    if len(pulls) > PULL_QUEUES_MAX:
        raise BadRequest("pulls", f"{len(pulls)} queues; at most {PULL_QUEUES_MAX} a call")
    limits = []
    seen: dict[tuple[str, int], int] = {}
    for n, pull in enumerate(pulls):
        limits.append(pull_limits(pull, f"pulls[{n}].", config))
        first = seen.setdefault((pull.topic, pull.queue_id), n)
        if first != n:
            raise BadRequest(
                f"pulls[{n}]", f"queue {pull.topic}:{pull.queue_id} is pulls[{first}] already"
            )
    max_bytes = size_limit(
        "max_bytes", request.max_bytes, PULL_QUEUES_DEFAULT_BYTES, PULL_BYTES_MAX
    )
    return limits, max_bytes


def query_fields(request: store_pb2.QueryByKeyRequest) -> tuple[str, int, int, int]:
    """``(topic, max_count, begin_ms, end_ms)`` of a QueryByKey (end_ms 0: now)."""
    topic = valid_topic("topic", request.topic)
    if not request.key:
        raise BadRequest("key", "must not be empty")
    max_count = size_limit("max_count", request.max_count, QUERY_DEFAULT_MAX_COUNT, QUERY_MAX_COUNT)
    begin_ms = non_negative("begin_ms", request.begin_ms)
    end_ms = non_negative("end_ms", request.end_ms)
    if end_ms and end_ms < begin_ms:
        raise BadRequest("end_ms", f"{end_ms} is before begin_ms {begin_ms}")
    return topic, max_count, begin_ms, end_ms


def interest_fields(
    n: int, interest: store_pb2.QueueInterest, max_queue_id: int
) -> tuple[str, int, int]:
    """``(topic, queue_id, after_offset)`` of a WatchQueues interest: the message's own
    (``n`` 0) or ``more[n - 1]``, which may not hold a ``more`` of its own."""
    prefix = f"more[{n - 1}]." if n else ""
    if n and interest.more:
        raise BadRequest(f"{prefix}more", "must be empty (one level only)")
    topic = valid_topic(f"{prefix}topic", interest.topic)
    queue_id = valid_queue_id(f"{prefix}queue_id", interest.queue_id, max_queue_id)
    after = non_negative(f"{prefix}after_offset", interest.after_offset)
    return topic, queue_id, after


def role_fields(request: store_pb2.SetRoleRequest) -> tuple[int, list[tuple[int, int]]]:
    """``(epoch, epochs)`` of a SetRole whose fields are valid in themselves
    (:func:`role_broker_id` checks the broker id against the role)."""
    if request.role not in (store_pb2.MASTER, store_pb2.REPLICA):
        raise BadRequest("role", "must be MASTER or REPLICA")
    epoch = non_negative("epoch", request.epoch)
    if request.broker_id < -1:
        raise BadRequest("broker_id", f"{request.broker_id} must be -1 or more")
    epochs = [(e.epoch, e.start_offset) for e in request.epochs]
    if any(e < 0 or start < 0 for e, start in epochs):
        raise BadRequest("epochs", "epochs and start offsets must not be negative")
    return epoch, epochs


def role_broker_id(request: store_pb2.SetRoleRequest) -> None:
    """A master registers as broker id 0, a replica with one above 0 (or -1: its own)."""
    if request.role == store_pb2.MASTER:
        if request.broker_id > 0:
            raise BadRequest("broker_id", "a master registers as broker id 0")
    elif request.broker_id == 0:
        raise BadRequest("broker_id", "a replica registers with a broker id > 0")


def replica_progress(progress: store_pb2.ReplicaProgress) -> None:
    """A ReportReplicas message's replica address and acked offset."""
    address = progress.replica_address
    if not address or len(address) > REPLICA_ADDRESS_MAX_CHARS:
        raise BadRequest("replica_address", "must be 1-255 characters")
    if progress.acked_offset < 0:
        raise BadRequest("acked_offset", f"{progress.acked_offset} is negative")
