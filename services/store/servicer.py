"""StoreServicer: the gRPC edge of the message store (``boltmq.v1.StoreService``).

The edge turns requests into store calls and results back into protos, and
nothing else: every decision about messages is the engine's. Two rules from
DESIGN 4.8 shape it:

- A malformed request (a negative offset, a topic that can never exist, a
  bad field) is refused with INVALID_ARGUMENT and a message that starts with
  the field's name (``BadRequest``). A read of data that is gone or not yet
  there is OUT_OF_RANGE; a store that is not running is UNAVAILABLE.
- A store-level outcome is a value: ``PutStatus`` and ``GetStatus`` are
  mapped to the proto enums once, in ``PUT_STATUS_TO_PROTO`` and
  ``GET_STATUS_TO_PROTO``. A bad message in an Append batch is a
  MESSAGE_ILLEGAL result for that message, never an error for the call.

Arrivals (WatchArrivals, and ReadCommitLog with ``follow``) come from the
store's dispatcher as ``(topic, queue_id, max_offset)`` on a store thread. Each
stream registers its own listener and removes it when the stream ends; the
listener only records the arrival under a lock and wakes the stream's loop
with ``call_soon_threadsafe`` once per batch, so a fast producer costs a
stream one dictionary entry per queue, never a growing queue.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

import grpc

from boltmq.kernel import telemetry
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from boltmq.wire.pull_answer import (
    PULL_QUEUES_MAX,
    encode_pull,
    encode_pull_queues,
    pull_parts,
)
from boltmq.wire.record import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    CorruptRecord,
    RecordView,
)
from boltmq.wire.record_batch import RecordBatch
from boltmq.wire.topic import (
    InvalidSubscription,
    InvalidTopic,
    parse_subscription,
    validate_topic,
)
from services.store.commitlog import CommitLog
from services.store.config import StoreConfig
from services.store.config_files import (
    ConfigCorrupt,
    ConfigFiles,
    InvalidConfigContent,
    InvalidConfigName,
    TooManyConfigFiles,
    validate_config_name,
)
from services.store.metrics import StoreMetrics
from services.store.role import RoleChangeRefused
from services.store.status import GetResult, GetStatus, PutResult, PutStatus, StoredRun
from services.store.store import MessageStore, StoreNotRunning

log = logging.getLogger(__name__)

APPEND_MESSAGES_MAX: Final = 16_384
"""Messages in one Append at most (a batch of 256 is the SDK's default)."""
APPEND_STREAM_WAITING_MAX: Final = 4_096
"""Appends of one AppendStream waiting for their fsync or replica at once (SYNC_FLUSH,
SYNC_MASTER); the stream reads on when one of them is answered."""
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
HEARTBEAT_MIN_MS: Final = 50
"""Shortest heartbeat interval honoured (a smaller heartbeat_ms is raised to this)."""
FOLLOW_RECHECK_MS: Final = 1_000
"""A following ReadCommitLog re-reads at least this often even without an arrival.

Arrivals wake it at once; the re-check covers bytes that produce none (a
blank marker alone, prepared transaction records) without a busy loop.
"""
REPLICA_ADDRESS_MAX_CHARS: Final = 255
"""Longest replica identity ReportReplicas accepts."""
WATCHING_METADATA: Final = (("boltmq-watching", "1"),)
"""Initial metadata of WatchArrivals, sent once the stream's listener is registered:
a client that waits for it knows every later arrival reaches it."""

PUT_STATUS_TO_PROTO: Final[dict[PutStatus, message_pb2.PutMessageStatus.ValueType]] = {
    PutStatus.PUT_OK: message_pb2.PUT_OK,
    PutStatus.FLUSH_DISK_TIMEOUT: message_pb2.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: message_pb2.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: message_pb2.SLAVE_NOT_AVAILABLE,
    PutStatus.SERVICE_NOT_AVAILABLE: message_pb2.SERVICE_NOT_AVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: message_pb2.CREATE_MAPPED_FILE_FAILED,
    PutStatus.MESSAGE_ILLEGAL: message_pb2.MESSAGE_ILLEGAL,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: message_pb2.PROPERTIES_SIZE_EXCEEDED,
    PutStatus.OS_PAGE_CACHE_BUSY: message_pb2.OS_PAGE_CACHE_BUSY,
    PutStatus.UNKNOWN_ERROR: message_pb2.UNKNOWN_ERROR,
}
"""The one mapping from the engine's PutStatus to the wire enum."""
assert set(PUT_STATUS_TO_PROTO) == set(PutStatus)

GET_STATUS_TO_PROTO: Final[dict[GetStatus, message_pb2.GetMessageStatus.ValueType]] = {
    GetStatus.FOUND: message_pb2.FOUND,
    GetStatus.NO_MATCHED_MESSAGE: message_pb2.NO_MATCHED_MESSAGE,
    GetStatus.MESSAGE_WAS_REMOVING: message_pb2.MESSAGE_WAS_REMOVING,
    GetStatus.OFFSET_FOUND_NULL: message_pb2.OFFSET_FOUND_NULL,
    GetStatus.OFFSET_OVERFLOW_BADLY: message_pb2.OFFSET_OVERFLOW_BADLY,
    GetStatus.OFFSET_OVERFLOW_ONE: message_pb2.OFFSET_OVERFLOW_ONE,
    GetStatus.OFFSET_TOO_SMALL: message_pb2.OFFSET_TOO_SMALL,
    GetStatus.NO_MATCHED_LOGIC_QUEUE: message_pb2.NO_MATCHED_LOGIC_QUEUE,
    GetStatus.NO_MESSAGE_IN_QUEUE: message_pb2.NO_MESSAGE_IN_QUEUE,
}
"""The one mapping from the engine's GetStatus to the wire enum."""
assert set(GET_STATUS_TO_PROTO) == set(GetStatus)


# =================================================================== errors
class BadRequest(ValueError):
    """A malformed request: INVALID_ARGUMENT, the message starting with the field's name."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field


class Rejected(Exception):
    """A request refused with a gRPC status other than INVALID_ARGUMENT."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


_Response = TypeVar("_Response")
_Unary = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Response]]
_Stream = Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[_Response]]


_REFUSALS = (BadRequest, Rejected, StoreNotRunning)
"""What a handler raises to refuse a request (anything else is a server bug)."""


def refusal_status(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """The gRPC code and text a refused request is answered with (one of ``_REFUSALS``)."""
    if isinstance(exc, BadRequest):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, Rejected):
        return exc.code, exc.details
    return grpc.StatusCode.UNAVAILABLE, str(exc)  # StoreNotRunning: stopped meanwhile


def _edge(method: _Unary[_Response]) -> _Unary[_Response]:
    """Map BadRequest, Rejected and StoreNotRunning to gRPC statuses, once, for every unary RPC."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> _Response:
        try:
            return await method(self, request, context)
        except _REFUSALS as exc:
            await context.abort(*refusal_status(exc))
        raise AssertionError("context.abort() always raises")

    return wrapper


def _edge_stream(method: _Stream[_Response]) -> _Stream[_Response]:
    """:func:`_edge` for server-streaming RPCs (async generators)."""

    @functools.wraps(method)
    async def wrapper(
        self: Any, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[_Response]:
        try:
            async for item in method(self, request, context):
                yield item
        except _REFUSALS as exc:
            await context.abort(*refusal_status(exc))

    return wrapper


# =================================================================== validation
def _topic(field: str, topic: str) -> str:
    try:
        return validate_topic(topic)
    except InvalidTopic as exc:
        raise BadRequest(field, str(exc)) from None


def _queue_id(field: str, queue_id: int, max_queue_id: int) -> int:
    if not 0 <= queue_id <= max_queue_id:
        raise BadRequest(field, f"{queue_id} is not a queue id (0..{max_queue_id})")
    return queue_id


def _non_negative(field: str, value: int) -> int:
    if value < 0:
        raise BadRequest(field, f"{value} must not be negative")
    return value


def _limit(field: str, value: int, default: int, maximum: int) -> int:
    """A request's size limit: 0 means ``default``; above ``maximum`` is lowered to it."""
    if value < 0:
        raise BadRequest(field, f"{value} must not be negative (0: the store's default)")
    return min(value or default, maximum)


def parse_host_port(field: str, text: str) -> tuple[str, int]:
    """``(address, port)`` from ``addr:port`` or ``[v6addr]:port``; BadRequest if malformed."""
    host, sep, port_text = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
        port = int(port_text)
    except ValueError:
        raise BadRequest(field, f"{text[:80]!r} is not 'address:port' with an IP address") from None
    if not sep or not 0 <= port <= 65535:
        raise BadRequest(field, f"{text[:80]!r} is not 'address:port' with a port 0..65535")
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


# =================================================================== conversion
def append_response(results: Sequence[PutResult], msg_id_prefix: str) -> store_pb2.AppendResponse:
    """The wire form of a batch's outcome (packed arrays, one entry per message)."""
    to_proto = PUT_STATUS_TO_PROTO
    if isinstance(results, StoredRun):  # raw records: the columns go as they are
        return store_pb2.AppendResponse(
            statuses=[to_proto[results.status]] * len(results),
            commitlog_offsets=results.commitlog_offsets,
            queue_offsets=results.queue_offsets,
            store_timestamp_ms=results.store_timestamp,
            msg_id_prefix=msg_id_prefix,
        )
    stored_ts = max((r.store_timestamp for r in results), default=0)
    return store_pb2.AppendResponse(
        statuses=[to_proto[r.status] for r in results],
        commitlog_offsets=[r.commitlog_offset for r in results],
        queue_offsets=[r.queue_offset for r in results],
        store_timestamp_ms=stored_ts,
        msg_id_prefix=msg_id_prefix,
        errors={i: r.error for i, r in enumerate(results) if r.error},
    )


def message_ext_to_proto(record: RecordView) -> message_pb2.MessageExt:
    """Every field of a stored record; CorruptRecord if its properties do not decode."""
    properties = record.properties
    keys = properties.get(PROPERTY_KEYS)
    return message_pb2.MessageExt(
        topic=record.topic,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
        commitlog_offset=record.commitlog_offset,
        msg_id=record.msg_id,
        body=bytes(record.body),
        tags=properties.get(PROPERTY_TAGS, ""),
        keys=keys.split(KEY_SEPARATOR) if keys else (),
        properties=properties,
        flag=record.flag,
        sys_flag=record.sys_flag,
        born_timestamp_ms=record.born_timestamp,
        born_host=record.born_host,
        store_timestamp_ms=record.store_timestamp,
        store_host=record.store_host,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        body_crc=record.body_crc,
    )


def messages_to_proto(records: Iterable[RecordView]) -> list[message_pb2.MessageExt]:
    """Wire forms of ``records``, leaving out (and logging) any that do not decode.

    The body CRC does not cover properties; a record whose properties are
    damaged is skipped like the engine skips one with a bad CRC, rather than
    failing the whole response and stalling the consumer at that offset.
    """
    result = []
    for record in records:
        try:
            result.append(message_ext_to_proto(record))
        except CorruptRecord as exc:
            log.error("refusing to serve record at %d: %s", record.commitlog_offset, exc)
    return result


# =================================================================== arrivals
class _ArrivalQueue:
    """One WatchArrivals stream's pending arrivals, coalesced per (topic, queue).

    ``offer`` runs on a store thread; ``take`` on the stream's loop. At most
    ``limit`` queues are pending; one more sets ``overflowed`` and the stream
    ends (the client re-subscribes and re-reads queue ranges) rather than
    silently dropping a wake-up a long poll is waiting for.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self._loop = loop
        self._limit = max(1, limit)
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], int] = {}
        self._scheduled = False
        self.event = asyncio.Event()
        self.overflowed = False

    def offer(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Record an arrival (store thread); wakes the loop once per batch taken."""
        key = (topic, queue_id)
        with self._lock:
            pending = self._pending
            if key in pending:
                if max_offset > pending[key]:
                    pending[key] = max_offset
            elif len(pending) < self._limit:
                pending[key] = max_offset
            else:
                self.overflowed = True
            if self._scheduled:
                return
            self._scheduled = True
        _call_soon(self._loop, self.event.set)

    async def take(self) -> dict[tuple[str, int], int] | None:
        """The arrivals since the last take (waits for one); None once overflowed."""
        await self.event.wait()
        with self._lock:
            batch, self._pending = self._pending, {}
            self._scheduled = False
            self.event.clear()
            return None if self.overflowed else batch


class _InterestQueue(_ArrivalQueue):
    """An :class:`_ArrivalQueue` that keeps only arrivals on queues a client waits on.

    :meth:`want` names a queue (loop thread); the next arrival on it is kept
    and the queue forgotten (one arrival per interest). Every other arrival
    returns after one set lookup. The client's re-check closes the race with
    an arrival just before :meth:`want`: the queue is named first, its max
    offset read after, so an arrival is either kept or already visible.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        super().__init__(loop, limit)
        self._wanted: set[tuple[str, int]] = set()

    def want(self, topic: str, queue_id: int) -> None:
        """Keep the next arrival on this queue."""
        self._wanted.add((topic, queue_id))

    def offer(self, topic: str, queue_id: int, max_offset: int) -> None:
        key = (topic, queue_id)
        if key not in self._wanted:
            return
        self._wanted.discard(key)
        super().offer(topic, queue_id, max_offset)


class _Waker:
    """Wakes a following ReadCommitLog on any arrival; offers between waits coalesce."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.event = asyncio.Event()
        self._armed = True

    def offer(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Any arrival (store thread)."""
        # No lock: a lost race only schedules a second, harmless set(), and an
        # offer that sees the flag down came before clear(), so its bytes are
        # already visible to the read that follows clear().
        if self._armed:
            self._armed = False
            _call_soon(self._loop, self.event.set)

    def clear(self) -> None:
        """Re-arm before reading: an arrival after this point ends the next wait."""
        self._armed = True
        self.event.clear()

    async def wait(self, timeout_s: float) -> None:
        """Until an arrival since :meth:`clear`, or ``timeout_s``."""
        try:
            await asyncio.wait_for(self.event.wait(), timeout_s)
        except TimeoutError:
            pass


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:
        pass  # the stream's loop is closed: nobody is waiting any more


# =================================================================== servicer
class StoreServicer(store_pb2_grpc.StoreServiceServicer):
    """Every RPC of ``boltmq.v1.StoreService`` over one MessageStore."""

    def __init__(self, store: MessageStore, config: StoreConfig) -> None:
        self._store = store
        self._config = config
        self._configs = ConfigFiles(config.root_dir)
        self.metrics = StoreMetrics(store)
        # Endless streams' events, set at shutdown so each stream ends by itself
        # (a stream left open would hold the server's whole grace period).
        self._stream_events: set[asyncio.Event] = set()
        self._append_streams: set[asyncio.Task[Any]] = set()  # their handlers' tasks
        self._closing = False

    def close(self) -> None:
        """Nothing to release (kept for the service's stop sequence)."""

    def _running_store(self) -> MessageStore:
        if not self._store.running:
            raise Rejected(
                grpc.StatusCode.UNAVAILABLE,
                "store is not running (recovering or shutting down); retry",
            )
        return self._store

    # ------------------------------------------------------------- writes
    @_edge
    async def Append(
        self, request: store_pb2.AppendRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.AppendResponse:
        """Append a batch in one engine call; per-message results as packed arrays."""
        return await self._append(request, context)

    async def AppendStream(
        self,
        requests: AsyncIterator[store_pb2.AppendStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Appends over one stream, answered by id in completion order (see store.proto).

        An append that cannot wait (ASYNC_FLUSH on an ASYNC_MASTER) is answered
        before the next request is read; one that waits for its fsync or its
        replica runs as its own task, so later appends overtake it and group
        commit still sees many at once. At most ``APPEND_STREAM_WAITING_MAX``
        wait at a time; the stream reads no further until one is answered.
        At shutdown the stream stops reading and ends once its appends are
        answered, so it does not hold the server's grace period.
        """
        writing = asyncio.Lock()
        slots = asyncio.Semaphore(APPEND_STREAM_WAITING_MAX)
        waiting: set[asyncio.Task[None]] = set()

        async def answer(request: store_pb2.AppendStreamRequest) -> bool:
            """Append and answer; False when the answer could not be sent."""
            response = await self._append_outcome(request, context)
            try:
                async with writing:
                    await context.write(response)
            except Exception as exc:  # grpc's error types differ by where the call died
                # The broker went away (killed, or its stream cancelled): the append
                # is done; the broker fails what it waited for as unavailable.
                log.debug("append %d stored, its answer not delivered: %r", request.id, exc)
                return False
            return True

        async def answer_later(request: store_pb2.AppendStreamRequest) -> None:
            try:
                await answer(request)
            finally:
                slots.release()

        handler = asyncio.current_task()
        assert handler is not None
        self._append_streams.add(handler)
        try:
            async for request in requests:
                if not self._store.needs_async_wait:
                    if not await answer(request):
                        return  # nobody reads the answers any more
                    continue
                await slots.acquire()
                task = asyncio.create_task(answer_later(request))
                waiting.add(task)
                task.add_done_callback(waiting.discard)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # Shutdown (end_streams): read no more; the stream ends once the
            # appends already taken are answered, and the broker opens another.
        finally:
            self._append_streams.discard(handler)
            if waiting:
                await asyncio.wait(waiting)

    async def _append_outcome(
        self, request: store_pb2.AppendStreamRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.AppendStreamResponse:
        """A stream request's answer: the AppendResponse, or the code the unary call gets."""
        try:
            appended = await self._append(request.append, context)
        except _REFUSALS as exc:
            code, text = refusal_status(exc)
            return store_pb2.AppendStreamResponse(
                id=request.id, error_code=code.value[0], error=text
            )
        return store_pb2.AppendStreamResponse(id=request.id, append=appended)

    async def _append(
        self, request: store_pb2.AppendRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.AppendResponse:
        """Append a batch in one engine call (both Append RPCs).

        The protobuf messages go to the engine as they arrived (it reads the
        same attribute names), so no per-message object is built on the way;
        raw records (``records``) go as one :class:`RecordBatch` of bytes.
        """
        started = time.perf_counter()
        messages: Sequence[Any] | RecordBatch = request.messages
        count = len(messages)
        if count > APPEND_MESSAGES_MAX:
            raise BadRequest(
                "messages", f"{count} messages, at most {APPEND_MESSAGES_MAX} per call"
            )
        records = request.records  # each access copies the bytes: once only
        if records or request.record_count:
            messages = self._record_batch(request, records)
        if request.born_host:
            born = parse_host_port("born_host", request.born_host)
        else:
            born = peer_host(context.peer())
        store = self._store
        if store.needs_async_wait:
            results = await store.put_messages_async(messages, born)
        else:
            results = store.put_messages(messages, born)
        self.metrics.put(len(results), time.perf_counter() - started)
        first = request.messages[0] if request.messages else request
        telemetry.annotate(first.topic, first.queue_id, len(results), len(records) or None)
        return append_response(results, store.commitlog.msg_id_prefix)

    def _record_batch(self, request: store_pb2.AppendRequest, records: bytes) -> RecordBatch:
        """The raw records of an Append, after checking the request's own fields."""
        if request.messages:
            raise BadRequest("records", "send messages or records, not both")
        count = request.record_count
        if not 0 < count <= APPEND_MESSAGES_MAX:
            raise BadRequest("record_count", f"{count} records; 1..{APPEND_MESSAGES_MAX} per call")
        if not records:
            raise BadRequest("records", f"empty, but record_count is {count}")
        topic = _topic("topic", request.topic)
        queue_id = _queue_id("queue_id", request.queue_id, self._config.max_queue_id)
        return RecordBatch(records, count, topic, queue_id)

    @_edge
    async def AppendRaw(
        self, request: store_pb2.AppendRawRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.AppendRawResponse:
        """Append replicated CommitLog bytes at exactly the store's end (replica stores only).

        A master refuses: its own appends assign queue offsets that raw bytes
        would silently duplicate.
        """
        return await self._append_raw(request)

    async def AppendRawStream(
        self, requests: AsyncIterator[store_pb2.CommitLogChunk], context: grpc.aio.ServicerContext
    ) -> None:
        """AppendRaw over one stream, answered in request order (see store.proto).

        gRPC receives the next chunk while this one is checked and copied, so
        the follower's round trip per chunk no longer stalls the copy. At
        shutdown the stream stops reading like AppendStream; the follower
        reconnects and resumes at what the store really holds.
        """
        handler = asyncio.current_task()
        assert handler is not None
        self._append_streams.add(handler)
        try:
            async for chunk in requests:
                await context.write(await self._append_raw(chunk))
        except _REFUSALS as exc:
            await context.abort(*refusal_status(exc))
        except asyncio.CancelledError:
            if not self._closing:
                raise
        finally:
            self._append_streams.discard(handler)

    async def _append_raw(
        self, request: store_pb2.AppendRawRequest | store_pb2.CommitLogChunk
    ) -> store_pb2.AppendRawResponse:
        offset = _non_negative("offset", request.offset)
        data = request.data
        if not data:
            raise BadRequest("data", "must not be empty")
        store = self._running_store()
        if isinstance(request, store_pb2.CommitLogChunk) and request.end_offset != offset + len(
            data
        ):
            return store_pb2.AppendRawResponse(
                ok=False,
                max_offset=store.commitlog.max_offset,
                error=f"chunk at {offset} says it ends at {request.end_offset}, but its "
                f"{len(data)} bytes end at {offset + len(data)}",
            )
        try:
            end = await asyncio.to_thread(store.append_raw, offset, data)
        except (ValueError, StoreNotRunning, OSError) as exc:  # CorruptRecord, RoleChangeRefused
            return store_pb2.AppendRawResponse(
                ok=False, max_offset=store.commitlog.max_offset, error=str(exc)
            )
        return store_pb2.AppendRawResponse(ok=True, max_offset=end)

    @_edge
    async def Truncate(
        self, request: store_pb2.TruncateRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.TruncateResponse:
        """Cut a replica's CommitLog back to a record boundary (FAILED_PRECONDITION on a master)."""
        offset = _non_negative("offset", request.offset)
        store = self._running_store()
        try:
            cut = await asyncio.to_thread(store.truncate, offset)
        except RoleChangeRefused as exc:
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        except ValueError as exc:
            raise BadRequest("offset", str(exc)) from None
        return store_pb2.TruncateResponse(max_offset=store.commitlog.max_offset, cut_bytes=cut)

    @_edge
    async def SetRole(
        self, request: store_pb2.SetRoleRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.StoreInfo:
        """Promote (MASTER) or demote (REPLICA) the store; the new role is durable."""
        if request.role not in (store_pb2.MASTER, store_pb2.REPLICA):
            raise BadRequest("role", "must be MASTER or REPLICA")
        epoch = _non_negative("epoch", request.epoch)
        if request.broker_id < -1:
            raise BadRequest("broker_id", f"{request.broker_id} must be -1 or more")
        epochs = [(e.epoch, e.start_offset) for e in request.epochs]
        if any(e < 0 or start < 0 for e, start in epochs):
            raise BadRequest("epochs", "epochs and start offsets must not be negative")
        store = self._running_store()
        try:
            if request.role == store_pb2.MASTER:
                if request.broker_id > 0:
                    raise BadRequest("broker_id", "a master registers as broker id 0")
                await asyncio.to_thread(store.promote, epoch, 0)
            else:
                if request.broker_id == 0:
                    raise BadRequest("broker_id", "a replica registers with a broker id > 0")
                await asyncio.to_thread(
                    functools.partial(
                        store.demote,
                        epoch,
                        epochs,
                        request.broker_id,
                        only_if_replica=request.only_if_replica,
                    )
                )
        except RoleChangeRefused as exc:
            raise Rejected(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        return self._store_info(store)

    async def ReportReplicas(
        self,
        request_iterator: AsyncIterator[store_pb2.ReplicaProgress],
        context: grpc.aio.ServicerContext,
    ) -> store_pb2.ReportReplicasResponse:
        """Replicas' acked offsets from the HA service; all of them are forgotten when it ends."""
        store = self._store
        seen: set[str] = set()
        try:
            async for progress in request_iterator:
                address = progress.replica_address
                if not address or len(address) > REPLICA_ADDRESS_MAX_CHARS:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "replica_address: must be 1-255 characters",
                    )
                if progress.acked_offset < 0:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"acked_offset: {progress.acked_offset} is negative",
                    )
                if not store.running or not store.role.is_master:
                    continue  # a stale report from before a demotion
                store.report_replica(address, progress.acked_offset, progress.disconnected)
                if progress.disconnected:
                    seen.discard(address)
                else:
                    seen.add(address)
        finally:
            for address in seen:
                store.report_replica(address, 0, disconnected=True)
        return store_pb2.ReportReplicasResponse()

    # ------------------------------------------------------------- reads
    @_edge
    async def Get(
        self, request: store_pb2.GetRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetResponse:
        """One message by CommitLog offset or offset message id."""
        by = request.WhichOneof("by")
        store = self._running_store()
        if by == "commitlog_offset":
            offset = _non_negative("commitlog_offset", request.commitlog_offset)
            record = store.look_message(offset)
        elif by == "msg_id":
            try:
                record = store.view_message(request.msg_id)
            except ValueError as exc:
                raise BadRequest("msg_id", str(exc)) from None
        else:
            raise BadRequest("by", "set commitlog_offset or msg_id")
        if record is None:
            return store_pb2.GetResponse(found=False)
        messages = messages_to_proto((record,))
        if not messages:
            return store_pb2.GetResponse(found=False)
        return store_pb2.GetResponse(found=True, message=messages[0])

    @_edge
    async def Pull(
        self, request: store_pb2.PullRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Messages of one queue from a queue offset that match the subscription.

        The answer is a PullResponse already encoded (:mod:`boltmq.wire.pull_answer`):
        raw records go from the mapped file into it in one copy.
        """
        max_messages, max_bytes = self._check_pull(request, "")
        head, result = self._get(request, max_messages, max_bytes, raw=request.raw_records)
        if request.raw_records:
            return encode_pull(head, result.raw)
        head.messages.extend(messages_to_proto(result.messages))
        return head.SerializeToString()

    @_edge
    async def PullQueues(
        self, request: store_pb2.PullQueuesRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Raw records of several queues, in the order asked, until max_bytes is reached.

        Every pull is checked before any is read. A pull's own max_bytes (0:
        no limit of its own, not the store's per-pull default) is lowered to
        what is left of the call's; each answered pull returns at least one
        record when its queue has one, so the records may pass max_bytes by one
        record, never more.
        """
        pulls = request.pulls
        if not pulls:
            raise BadRequest("pulls", "must name at least one queue")
        if len(pulls) > PULL_QUEUES_MAX:
            raise BadRequest("pulls", f"{len(pulls)} queues; at most {PULL_QUEUES_MAX} a call")
        limits = []
        seen: dict[tuple[str, int], int] = {}
        for n, pull in enumerate(pulls):
            limits.append(self._check_pull(pull, f"pulls[{n}]."))
            first = seen.setdefault((pull.topic, pull.queue_id), n)
            if first != n:
                raise BadRequest(
                    f"pulls[{n}]", f"queue {pull.topic}:{pull.queue_id} is pulls[{first}] already"
                )
        left = _limit("max_bytes", request.max_bytes, PULL_QUEUES_DEFAULT_BYTES, PULL_BYTES_MAX)
        answers = []
        for n, (pull, (max_messages, max_bytes)) in enumerate(zip(pulls, limits, strict=True)):
            if n and left <= 0:
                break
            own = max_bytes if pull.max_bytes else PULL_BYTES_MAX
            head, result = self._get(pull, max_messages, min(own, max(left, 1)), raw=True)
            left -= sum(len(record) for record in result.raw)
            answers.append(pull_parts(head, result.raw))
        return encode_pull_queues(answers)

    def _check_pull(self, request: store_pb2.PullRequest, prefix: str) -> tuple[int, int]:
        """``(max_messages, max_bytes)`` of a pull whose fields are valid; BadRequest
        naming the field (after ``prefix``) otherwise."""
        _topic(f"{prefix}topic", request.topic)
        _queue_id(f"{prefix}queue_id", request.queue_id, self._config.max_queue_id)
        _non_negative(f"{prefix}queue_offset", request.queue_offset)
        max_messages = _limit(
            f"{prefix}max_messages",
            request.max_messages,
            self._config.max_transfer_count_on_message_in_memory,
            PULL_MESSAGES_MAX,
        )
        max_bytes = _limit(
            f"{prefix}max_bytes",
            request.max_bytes,
            self._config.max_transfer_bytes_on_message_in_memory,
            PULL_BYTES_MAX,
        )
        try:
            parse_subscription(request.subscription)
        except InvalidSubscription as exc:
            raise BadRequest(f"{prefix}subscription", str(exc)) from None
        return max_messages, max_bytes

    def _get(
        self, request: store_pb2.PullRequest, max_messages: int, max_bytes: int, *, raw: bool
    ) -> tuple[store_pb2.PullResponse, GetResult]:
        """A checked pull read: its answer without messages or records, and what was read."""
        result = self._running_store().get_messages(
            request.topic,
            request.queue_id,
            request.queue_offset,
            max_messages,
            request.subscription,
            max_bytes,
            raw=raw,
        )
        head = store_pb2.PullResponse(
            status=GET_STATUS_TO_PROTO[result.status],
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        )
        if raw:
            head.record_count = result.raw_count
        return head, result

    @_edge
    async def QueryByKey(
        self, request: store_pb2.QueryByKeyRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.QueryByKeyResponse:
        """Messages of a topic whose KEYS or UNIQ_KEY equal the key, newest index first."""
        topic = _topic("topic", request.topic)
        if not request.key:
            raise BadRequest("key", "must not be empty")
        max_count = _limit("max_count", request.max_count, QUERY_DEFAULT_MAX_COUNT, QUERY_MAX_COUNT)
        begin_ms = _non_negative("begin_ms", request.begin_ms)
        end_ms = _non_negative("end_ms", request.end_ms)
        if end_ms and end_ms < begin_ms:
            raise BadRequest("end_ms", f"{end_ms} is before begin_ms {begin_ms}")
        records = self._running_store().query_messages(
            topic, request.key, max_count, begin_ms, end_ms or None
        )
        return store_pb2.QueryByKeyResponse(messages=messages_to_proto(records))

    @_edge
    async def OffsetByTime(
        self, request: store_pb2.OffsetByTimeRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.OffsetByTimeResponse:
        """First queue offset stored at or after the time (0 for an unknown queue)."""
        topic = _topic("topic", request.topic)
        queue_id = _queue_id("queue_id", request.queue_id, self._config.max_queue_id)
        timestamp_ms = _non_negative("timestamp_ms", request.timestamp_ms)
        offset = self._running_store().offset_by_time(topic, queue_id, timestamp_ms)
        return store_pb2.OffsetByTimeResponse(queue_offset=offset)

    @_edge
    async def QueueRange(
        self, request: store_pb2.QueueRangeRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.QueueRangeResponse:
        """Min and max offsets of one queue; ``exists`` false for a queue never written."""
        topic = _topic("topic", request.topic)
        queue_id = _queue_id("queue_id", request.queue_id, self._config.max_queue_id)
        cq = self._running_store().queues.get(topic, queue_id)
        if cq is None:
            return store_pb2.QueueRangeResponse(exists=False)
        return store_pb2.QueueRangeResponse(
            min_offset=cq.min_offset(), max_offset=cq.max_offset(), exists=True
        )

    @_edge
    async def ListQueues(
        self, request: store_pb2.ListQueuesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListQueuesResponse:
        """Every consume queue (of one topic, when given), by topic then queue id."""
        topic = _topic("topic", request.topic) if request.topic else None
        queues = sorted(
            (cq for cq in self._running_store().queues if topic is None or cq.topic == topic),
            key=lambda cq: (cq.topic, cq.queue_id),
        )
        return store_pb2.ListQueuesResponse(
            queues=[
                store_pb2.QueueInfo(
                    topic=cq.topic,
                    queue_id=cq.queue_id,
                    min_offset=cq.min_offset(),
                    max_offset=cq.max_offset(),
                )
                for cq in queues
            ]
        )

    @_edge
    async def GetStoreInfo(
        self, request: store_pb2.GetStoreInfoRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.StoreInfo:
        """Offsets, role, epochs, replicas and disk usage."""
        return self._store_info(self._running_store())

    def _store_info(self, store: MessageStore) -> store_pb2.StoreInfo:
        commitlog = store.commitlog
        flushed = store.flusher.flushed_offset if store.flusher else commitlog.flushed_offset
        config, role = self._config, store.role
        max_offset = commitlog.max_offset
        now_ms = time.time_ns() // 1_000_000
        return store_pb2.StoreInfo(
            commitlog_min_offset=commitlog.min_offset,
            commitlog_max_offset=max_offset,
            flushed_offset=flushed,
            dispatched_offset=store.dispatcher.reput_offset,
            role="MASTER" if role.is_master else "REPLICA",
            disk_used_percent=store.cleaner.disk_used_percent,
            disk_full=store.cleaner.disk_full,
            store_host=f"{config.store_host}:{config.store_port}",
            epoch=role.epoch,
            epochs=[store_pb2.EpochStart(epoch=e, start_offset=s) for e, s in role.epochs],
            broker_id=role.broker_id,
            segment_bytes=config.mapped_file_size_commitlog,
            broker_role=role.broker_role,
            replicas=[
                store_pb2.ReplicaState(
                    replica_address=a.address,
                    acked_offset=a.acked_offset,
                    lag_bytes=max(0, max_offset - a.acked_offset),
                    lag_seconds=0.0
                    if a.acked_offset >= max_offset
                    else max(0.0, (now_ms - a.caught_up_at_ms) / 1000),
                    last_report_ms=a.last_report_ms,
                )
                for a in store.replicas.snapshot()
            ],
        )

    # ------------------------------------------------------------- streams
    @_edge_stream
    async def WatchArrivals(
        self, request: store_pb2.WatchArrivalsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.Arrival]:
        """``(topic, queue, max offset)`` after each dispatch, coalesced per queue.

        Initial metadata (``WATCHING_METADATA``) is sent once the listener is
        registered; RESOURCE_EXHAUSTED ends a stream whose client fell more
        than ``arrival_watch_queue_max`` queues behind.
        """
        store = self._running_store()
        arrivals = _ArrivalQueue(asyncio.get_running_loop(), self._config.arrival_watch_queue_max)
        async for arrival in self._arrival_stream(store, arrivals, context, []):
            yield arrival

    async def _arrival_stream(
        self,
        store: MessageStore,
        arrivals: _ArrivalQueue,
        context: grpc.aio.ServicerContext,
        refused: list[Exception],
    ) -> AsyncIterator[store_pb2.Arrival]:
        """What an arrival stream sends: ``arrivals`` listening to ``store`` until the
        client leaves, shutdown, an overflow, or a refusal put in ``refused``."""
        listener = arrivals.offer  # one bound method: removal is by identity
        store.add_arrival_listener(listener)
        self._stream_events.add(arrivals.event)
        try:
            await context.send_initial_metadata(WATCHING_METADATA)
            while True:
                batch = await arrivals.take()
                if refused:
                    raise refused[0]
                if self._closing:
                    return
                if batch is None:
                    raise Rejected(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"more than {self._config.arrival_watch_queue_max} queues "
                        f"with unread arrivals; re-subscribe and re-read queue ranges",
                    )
                for (topic, queue_id), max_offset in batch.items():
                    yield store_pb2.Arrival(topic=topic, queue_id=queue_id, max_offset=max_offset)
        finally:
            self._stream_events.discard(arrivals.event)
            store.remove_arrival_listener(listener)

    @_edge_stream
    async def WatchQueues(
        self, requests: AsyncIterator[store_pb2.QueueInterest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.Arrival]:
        """Arrivals on the queues the client names, one per interest (see store.proto).

        A message names its queue and those in ``more``. A malformed interest
        (a bad topic or queue id, a negative offset, a ``more`` inside ``more``)
        ends the stream with INVALID_ARGUMENT naming the field.
        """
        store = self._running_store()
        arrivals = _InterestQueue(asyncio.get_running_loop(), self._config.arrival_watch_queue_max)
        refused: list[Exception] = []

        async def read_interests() -> None:
            try:
                async for request in requests:
                    for n, interest in enumerate((request, *request.more)):
                        prefix = f"more[{n - 1}]." if n else ""
                        if n and interest.more:
                            raise BadRequest(f"{prefix}more", "must be empty (one level only)")
                        topic = _topic(f"{prefix}topic", interest.topic)
                        queue_id = _queue_id(
                            f"{prefix}queue_id", interest.queue_id, self._config.max_queue_id
                        )
                        after = _non_negative(f"{prefix}after_offset", interest.after_offset)
                        arrivals.want(topic, queue_id)  # named first, then the offset read
                        max_offset = store.max_offset(topic, queue_id)
                        if max_offset > after:
                            arrivals.offer(topic, queue_id, max_offset)
            except _REFUSALS as exc:  # a bad interest, or the store stopping
                refused.append(exc)
                arrivals.event.set()

        reader = asyncio.create_task(read_interests())
        try:
            async for arrival in self._arrival_stream(store, arrivals, context, refused):
                yield arrival
        finally:
            reader.cancel()

    def end_streams(self) -> None:
        """End every endless stream normally (shutdown); clients reconnect."""
        self._closing = True
        for event in list(self._stream_events):
            event.set()
        for handler in list(self._append_streams):
            handler.cancel()  # stops its read; what it already took is still answered

    @_edge_stream
    async def ReadCommitLog(
        self, request: store_pb2.ReadCommitLogRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.CommitLogChunk]:
        """Whole CommitLog records from a record's offset, never crossing a segment per chunk.

        Without ``follow`` the stream ends at the CommitLog's end as of the
        request. With it, the stream waits for new bytes (woken by arrivals)
        and sends an empty chunk after ``heartbeat_ms`` of silence (0: never).
        An offset outside the CommitLog is OUT_OF_RANGE.
        """
        offset = _non_negative("offset", request.offset)
        chunk_bytes = _limit(
            "max_chunk_bytes",
            request.max_chunk_bytes,
            READ_CHUNK_DEFAULT_BYTES,
            READ_CHUNK_MAX_BYTES,
        )
        heartbeat_ms = _non_negative("heartbeat_ms", request.heartbeat_ms)
        store = self._running_store()
        _check_readable(store.commitlog, offset)
        if not store.commitlog.is_record_start(offset):
            raise BadRequest("offset", f"{offset} is not the start of a record")
        if request.follow:
            chunks = self._follow(store, offset, chunk_bytes, heartbeat_ms)
        else:
            chunks = _read_range(store.commitlog, offset, store.commitlog.max_offset, chunk_bytes)
        async for chunk in chunks:
            yield chunk

    async def _follow(
        self, store: MessageStore, offset: int, chunk_bytes: int, heartbeat_ms: int
    ) -> AsyncIterator[store_pb2.CommitLogChunk]:
        commitlog = store.commitlog
        loop = asyncio.get_running_loop()
        waker = _Waker(loop)
        listener = waker.offer
        store.add_arrival_listener(listener)
        heartbeat_s = max(heartbeat_ms, HEARTBEAT_MIN_MS) / 1000 if heartbeat_ms else 0.0
        last_sent = loop.time()
        self._stream_events.add(waker.event)
        try:
            while True:
                waker.clear()
                data = await asyncio.to_thread(commitlog.read_bytes, offset, chunk_bytes)
                if data:
                    yield store_pb2.CommitLogChunk(
                        offset=offset,
                        data=data,
                        end_offset=offset + len(data),
                        master_max_offset=commitlog.max_offset,
                    )
                    offset += len(data)
                    last_sent = loop.time()
                    continue
                _check_readable(commitlog, offset)
                wait_s = FOLLOW_RECHECK_MS / 1000
                if heartbeat_s:
                    due_s = last_sent + heartbeat_s - loop.time()
                    if due_s <= 0:
                        yield store_pb2.CommitLogChunk(
                            offset=offset, end_offset=offset, master_max_offset=commitlog.max_offset
                        )
                        last_sent = loop.time()
                        continue
                    wait_s = min(wait_s, due_s)
                await waker.wait(wait_s)
                if self._closing:
                    return
        finally:
            self._stream_events.discard(waker.event)
            store.remove_arrival_listener(listener)

    # ------------------------------------------------------------- config files
    @_edge
    async def PutConfig(
        self, request: store_pb2.PutConfigRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.PutConfigResponse:
        """Replace ``config/NAME`` atomically, keeping the previous version as NAME.bak."""
        name = _config_name(request.name)
        self._running_store()
        try:
            await asyncio.to_thread(self._configs.put, name, request.content)
        except InvalidConfigContent as exc:
            raise BadRequest("content", str(exc)) from None
        except TooManyConfigFiles as exc:
            raise Rejected(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        except OSError as exc:
            raise Rejected(
                grpc.StatusCode.INTERNAL, f"cannot write config/{name}: {exc.strerror or exc}"
            ) from None
        return store_pb2.PutConfigResponse()

    @_edge
    async def GetConfig(
        self, request: store_pb2.GetConfigRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetConfigResponse:
        """``config/NAME`` (or NAME.bak when NAME is unusable); found false if never put."""
        name = _config_name(request.name)
        self._running_store()
        try:
            content = await asyncio.to_thread(self._configs.get, name)
        except ConfigCorrupt as exc:
            raise Rejected(grpc.StatusCode.DATA_LOSS, str(exc)) from None
        if content is None:
            return store_pb2.GetConfigResponse(found=False)
        return store_pb2.GetConfigResponse(found=True, content=content)


def _config_name(name: str) -> str:
    try:
        return validate_config_name(name)
    except InvalidConfigName as exc:
        raise BadRequest("name", str(exc)) from None


def _check_readable(commitlog: CommitLog, offset: int) -> None:
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


async def _read_range(
    commitlog: CommitLog, offset: int, end: int, chunk_bytes: int
) -> AsyncIterator[store_pb2.CommitLogChunk]:
    """Chunks of ``[offset, end)``; a thread reads each (cold pages fault in from disk)."""
    while offset < end:
        data = await asyncio.to_thread(commitlog.read_bytes, offset, min(chunk_bytes, end - offset))
        if not data:
            _check_readable(commitlog, offset)  # a segment deleted under the reader
            return
        yield store_pb2.CommitLogChunk(
            offset=offset,
            data=data,
            end_offset=offset + len(data),
            master_max_offset=commitlog.max_offset,
        )
        offset += len(data)
