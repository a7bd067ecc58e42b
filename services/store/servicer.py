"""StoreServicer: the gRPC edge of the message store (``boltmq.v1.StoreService``).

The edge turns requests into store calls and results back into protos, and
nothing else: every decision about messages is the engine's. Each RPC is a
few lines here over the modules that do the work:

- :mod:`services.store.request_checks`: every field checked before the store
  sees it; a malformed request is INVALID_ARGUMENT naming the field
  (``BadRequest``), a read of data that is gone or not yet there
  OUT_OF_RANGE, a store that is not running UNAVAILABLE;
- :mod:`services.store.proto_conversion`: results into protos. A store-level
  outcome is a value (``PutStatus``, ``GetStatus``) mapped to its proto enum
  once; a bad message in an Append batch is a MESSAGE_ILLEGAL result for that
  message, never an error for the call;
- :mod:`services.store.queue_runs`: an Append of runs (the records of several
  queues in one request); :mod:`services.store.stream_appends`: the appends one
  AppendStream message carries, taken in one engine call;
- :mod:`services.store.arrival_streams`: WatchArrivals and WatchQueues;
- :mod:`services.store.replication`: ReadCommitLog, AppendRaw(Stream),
  Truncate, SetRole and ReportReplicas;
- :mod:`services.store.open_streams`: the endless streams, ended at shutdown.

A Pull or PullQueues that reads a queue from behind the CommitLog's page-cache
window (a cold read, :meth:`MessageReader.starts_cold`) runs on one of
``cold_read_threads`` threads instead of the event loop, so the hot pulls and
appends the loop serves do not wait while it copies records the kernel reads
back from disk (docs/store-reads.md).

Every RPC but AppendStream (which answers each request with its own code) is
wrapped in :func:`boltmq.kernel.errors.answers_errors`: a store error
(:mod:`services.store.errors`) ends the call with its status and message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import grpc

from boltmq.kernel import telemetry
from boltmq.kernel.errors import ServiceError, answers_errors
from boltmq.v1 import store_pb2, store_pb2_grpc
from boltmq.wire.pull_answer import encode_pull, encode_pull_queues, pull_parts
from boltmq.wire.record_batch import RecordBatch
from services.store.arrival_streams import ArrivalStreams
from services.store.config import StoreConfig
from services.store.config_files import (
    ConfigCorrupt,
    ConfigFiles,
    InvalidConfigContent,
    TooManyConfigFiles,
)
from services.store.errors import BadRequest, Rejected
from services.store.metrics import StoreMetrics
from services.store.open_streams import OpenStreams
from services.store.proto_conversion import (
    append_response,
    messages_to_proto,
    pull_head,
    queue_infos,
    store_info,
)
from services.store.queue_runs import append_runs, check_runs
from services.store.replication import Replication
from services.store.request_checks import (
    PULL_BYTES_MAX,
    check_message_count,
    non_negative,
    parse_host_port,
    peer_host,
    pull_limits,
    pull_queues_limits,
    query_fields,
    record_batch,
    running_store,
    valid_config_name,
    valid_queue_id,
    valid_topic,
)
from services.store.status import GetResult
from services.store.store import MessageStore
from services.store.stream_appends import append_together, no_inner_more, one_message, refused

log = logging.getLogger(__name__)

APPEND_STREAM_WAITING_MAX: Final = 4_096
"""Appends of one AppendStream waiting for their fsync or replica at once (SYNC_FLUSH,
SYNC_MASTER); the stream reads on when one of them is answered."""


class StoreServicer(store_pb2_grpc.StoreServiceServicer):
    """Every RPC of ``boltmq.v1.StoreService`` over one MessageStore."""

    def __init__(self, store: MessageStore, config: StoreConfig) -> None:
        self._store = store
        self._config = config
        self._configs = ConfigFiles(config.root_dir)
        self.metrics = StoreMetrics(store)
        self._streams = OpenStreams()
        self._arrivals = ArrivalStreams(store, config, self._streams)
        self._replication = Replication(store, config, self._streams)
        self._cold_reads = (
            ThreadPoolExecutor(config.cold_read_threads, thread_name_prefix="boltmq-cold-read")
            if config.cold_read_threads
            else None
        )

    def close(self) -> None:
        """End the cold-read threads (the server has drained its calls: none is reading)."""
        if self._cold_reads is not None:
            self._cold_reads.shutdown(wait=True)

    def end_streams(self) -> None:
        """End every endless stream normally (shutdown); clients reconnect."""
        self._streams.end()

    # ------------------------------------------------------------- writes
    @answers_errors
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
        answered, so it does not hold the server's grace period. A stream message's
        ``more`` appends are taken in order after its own; answered at once, they go
        back in one response (its ``more``), else each in its own.
        """
        writing = asyncio.Lock()
        slots = asyncio.Semaphore(APPEND_STREAM_WAITING_MAX)
        waiting: set[asyncio.Task[None]] = set()

        async def write(response: store_pb2.AppendStreamResponse) -> bool:
            """Send answers; False when they could not be sent."""
            try:
                async with writing:
                    await context.write(response)
            except Exception as exc:  # grpc's error types differ by where the call died
                # The broker went away (killed, or its stream cancelled): the appends
                # are done; the broker fails what it waited for as unavailable.
                log.debug("append %d stored, its answer not delivered: %r", response.id, exc)
                return False
            return True

        async def answer_later(request: store_pb2.AppendStreamRequest, inner: bool) -> None:
            try:
                await write(await self._append_outcome(request, context, inner))
            finally:
                slots.release()

        try:
            # At shutdown (end_streams) the loop ends: read no more; the stream ends
            # once the appends already taken are answered, and the broker opens another.
            async for request in self._streams.each(requests):
                appends = [request, *request.more]
                if not self._store.needs_async_wait:
                    answers = await self._answered_at_once(appends, context)
                    if not await write(one_message(answers)):
                        return  # nobody reads the answers any more
                    continue
                for n, append in enumerate(appends):
                    await slots.acquire()
                    task = asyncio.create_task(answer_later(append, n > 0))
                    waiting.add(task)
                    task.add_done_callback(waiting.discard)
        finally:
            if waiting:
                await asyncio.wait(waiting)

    async def _answered_at_once(
        self,
        appends: Sequence[store_pb2.AppendStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> list[store_pb2.AppendStreamResponse]:
        """The answers of appends a store that waits for nothing takes in turn: in one
        engine call when every one is of raw records, else one by one."""
        return append_together(self._store, self._config, self.metrics, appends, context) or [
            await self._append_outcome(a, context, n > 0) for n, a in enumerate(appends)
        ]

    async def _append_outcome(
        self,
        request: store_pb2.AppendStreamRequest,
        context: grpc.aio.ServicerContext,
        inner: bool = False,
    ) -> store_pb2.AppendStreamResponse:
        """A stream request's answer: the AppendResponse, or the code the unary call gets.

        The caller answers a request's ``more`` itself; an append that came in ``more``
        (``inner``) and carries a ``more`` of its own is refused, nothing of it appended."""
        try:
            no_inner_more(request, inner)
            appended = await self._append(request.append, context)
        except ServiceError as exc:
            return refused(request, exc)
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
        check_message_count(request)
        records = request.records  # each access copies the bytes: once only
        if request.runs:  # records of several queues (queue_runs.py)
            check_runs(request, records)
        elif records or request.record_count:
            messages = record_batch(request, records, self._config.max_queue_id)
        if request.born_host:
            born = parse_host_port("born_host", request.born_host)
        else:
            born = peer_host(context.peer())
        store = self._store
        if request.runs:
            answer = await append_runs(store, request, records, born)
            self.metrics.put(request.record_count, time.perf_counter() - started)
            return answer
        if store.needs_async_wait:
            results = await store.put_messages_async(messages, born)
        else:
            results = store.put_messages(messages, born)
        self.metrics.put(len(results), time.perf_counter() - started)
        first = request.messages[0] if request.messages else request
        telemetry.annotate(first.topic, first.queue_id, len(results), len(records) or None)
        return append_response(results, store.commitlog.msg_id_prefix)

    # ------------------------------------------------------------- reads
    @answers_errors
    async def Get(
        self, request: store_pb2.GetRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetResponse:
        """One message by CommitLog offset or offset message id."""
        by = request.WhichOneof("by")
        store = running_store(self._store)
        if by == "commitlog_offset":
            offset = non_negative("commitlog_offset", request.commitlog_offset)
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

    @answers_errors
    async def Pull(
        self, request: store_pb2.PullRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Messages of one queue from a queue offset that match the subscription.

        The answer is a PullResponse already encoded (:mod:`boltmq.wire.pull_answer`):
        raw records go from the mapped file into it in one copy.
        """
        max_messages, max_bytes = pull_limits(request, "", self._config)
        if self._cold((request,)):
            self.metrics.cold_pull()
            return await asyncio.get_running_loop().run_in_executor(
                self._cold_reads, self._pull, request, max_messages, max_bytes
            )
        return self._pull(request, max_messages, max_bytes)

    def _pull(self, request: store_pb2.PullRequest, max_messages: int, max_bytes: int) -> bytes:
        head, result = self._get(request, max_messages, max_bytes, raw=request.raw_records)
        if request.raw_records:
            return encode_pull(head, result.raw)
        head.messages.extend(messages_to_proto(result.messages))
        return head.SerializeToString()

    @answers_errors
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
        limits, left = pull_queues_limits(request, self._config)
        if self._cold(request.pulls):
            self.metrics.cold_pull()
            return await asyncio.get_running_loop().run_in_executor(
                self._cold_reads, self._pull_queues, request.pulls, limits, left
            )
        return self._pull_queues(request.pulls, limits, left)

    def _pull_queues(
        self, pulls: Sequence[store_pb2.PullRequest], limits: list[tuple[int, int]], left: int
    ) -> bytes:
        answers = []
        # What a cold read may take: its even share of the call, up to the setting's cap.
        share = min(left // len(pulls), self._config.max_cold_share_bytes)
        for n, (pull, (max_messages, max_bytes)) in enumerate(zip(pulls, limits, strict=True)):
            if n and left <= 0:
                break
            own = max_bytes if pull.max_bytes else PULL_BYTES_MAX
            head, result = self._get(
                pull, max_messages, min(own, max(left, 1)), raw=True, cold_bytes=share
            )
            left -= sum(len(record) for record in result.raw)
            answers.append(pull_parts(head, result.raw))
        return encode_pull_queues(answers)

    def _cold(self, pulls: Sequence[store_pb2.PullRequest]) -> bool:
        """Whether these pulls go to a cold-read thread: one of them is a cold read."""
        if self._cold_reads is None:
            return False
        reader = running_store(self._store).reader
        return any(reader.starts_cold(p.topic, p.queue_id, p.queue_offset) for p in pulls)

    def _get(
        self,
        request: store_pb2.PullRequest,
        max_messages: int,
        max_bytes: int,
        *,
        raw: bool,
        cold_bytes: int = 0,
    ) -> tuple[store_pb2.PullResponse, GetResult]:
        """A checked pull read: its answer without messages or records, and what was read."""
        result = running_store(self._store).get_messages(
            request.topic,
            request.queue_id,
            request.queue_offset,
            max_messages,
            request.subscription,
            max_bytes,
            raw=raw,
            cold_bytes=cold_bytes,
        )
        return pull_head(result, raw=raw), result

    @answers_errors
    async def QueryByKey(
        self, request: store_pb2.QueryByKeyRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.QueryByKeyResponse:
        """Messages of a topic whose KEYS or UNIQ_KEY equal the key, newest index first."""
        topic, max_count, begin_ms, end_ms = query_fields(request)
        records = running_store(self._store).query_messages(
            topic, request.key, max_count, begin_ms, end_ms or None
        )
        return store_pb2.QueryByKeyResponse(messages=messages_to_proto(records))

    @answers_errors
    async def OffsetByTime(
        self, request: store_pb2.OffsetByTimeRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.OffsetByTimeResponse:
        """First queue offset stored at or after the time (0 for an unknown queue)."""
        topic = valid_topic("topic", request.topic)
        queue_id = valid_queue_id("queue_id", request.queue_id, self._config.max_queue_id)
        timestamp_ms = non_negative("timestamp_ms", request.timestamp_ms)
        offset = running_store(self._store).offset_by_time(topic, queue_id, timestamp_ms)
        return store_pb2.OffsetByTimeResponse(queue_offset=offset)

    @answers_errors
    async def QueueRange(
        self, request: store_pb2.QueueRangeRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.QueueRangeResponse:
        """Min and max offsets of one queue; ``exists`` false for a queue never written."""
        topic = valid_topic("topic", request.topic)
        queue_id = valid_queue_id("queue_id", request.queue_id, self._config.max_queue_id)
        cq = running_store(self._store).queues.get(topic, queue_id)
        if cq is None:
            return store_pb2.QueueRangeResponse(exists=False)
        return store_pb2.QueueRangeResponse(
            min_offset=cq.min_offset(), max_offset=cq.max_offset(), exists=True
        )

    @answers_errors
    async def ListQueues(
        self, request: store_pb2.ListQueuesRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.ListQueuesResponse:
        """Every consume queue (of one topic, when given), by topic then queue id."""
        topic = valid_topic("topic", request.topic) if request.topic else None
        queues = sorted(
            (cq for cq in running_store(self._store).queues if topic is None or cq.topic == topic),
            key=lambda cq: (cq.topic, cq.queue_id),
        )
        return store_pb2.ListQueuesResponse(queues=queue_infos(queues))

    @answers_errors
    async def GetStoreInfo(
        self, request: store_pb2.GetStoreInfoRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.StoreInfo:
        """Offsets, role, epochs, replicas and disk usage."""
        return store_info(running_store(self._store), self._config)

    # ------------------------------------------------------------- arrival streams
    @answers_errors
    async def WatchArrivals(
        self, request: store_pb2.WatchArrivalsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.Arrival]:
        """``(topic, queue, max offset)`` after each dispatch, coalesced per queue."""
        async for arrival in self._arrivals.watch_arrivals(context):
            yield arrival

    @answers_errors
    async def WatchQueues(
        self, requests: AsyncIterator[store_pb2.QueueInterest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.Arrival]:
        """Arrivals on the queues the client names, one per interest (see store.proto)."""
        async for arrival in self._arrivals.watch_queues(requests, context):
            yield arrival

    # ------------------------------------------------------------- replication
    @answers_errors
    async def ReadCommitLog(
        self, request: store_pb2.ReadCommitLogRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[store_pb2.CommitLogChunk]:
        """Whole CommitLog records from a record's offset (following new ones on request)."""
        async for chunk in self._replication.read_commitlog(request):
            yield chunk

    @answers_errors
    async def AppendRaw(
        self, request: store_pb2.AppendRawRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.AppendRawResponse:
        """Append replicated CommitLog bytes at exactly the store's end (replica stores only)."""
        return await self._replication.append_raw(request)

    @answers_errors
    async def AppendRawStream(
        self, requests: AsyncIterator[store_pb2.CommitLogChunk], context: grpc.aio.ServicerContext
    ) -> None:
        """AppendRaw over one stream, answered in request order (see store.proto)."""
        await self._replication.append_raw_stream(requests, context)

    @answers_errors
    async def Truncate(
        self, request: store_pb2.TruncateRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.TruncateResponse:
        """Cut a replica's CommitLog back to a record boundary (FAILED_PRECONDITION on a master)."""
        return await self._replication.truncate(request)

    @answers_errors
    async def SetRole(
        self, request: store_pb2.SetRoleRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.StoreInfo:
        """Promote (MASTER) or demote (REPLICA) the store; the new role is durable."""
        return await self._replication.set_role(request)

    @answers_errors
    async def ReportReplicas(
        self,
        request_iterator: AsyncIterator[store_pb2.ReplicaProgress],
        context: grpc.aio.ServicerContext,
    ) -> store_pb2.ReportReplicasResponse:
        """Replicas' acked offsets from the HA service; all of them are forgotten when it ends."""
        return await self._replication.report_replicas(request_iterator)

    # ------------------------------------------------------------- config files
    @answers_errors
    async def PutConfig(
        self, request: store_pb2.PutConfigRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.PutConfigResponse:
        """Replace ``config/NAME`` atomically, keeping the previous version as NAME.bak."""
        name = valid_config_name(request.name)
        running_store(self._store)
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

    @answers_errors
    async def GetConfig(
        self, request: store_pb2.GetConfigRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetConfigResponse:
        """``config/NAME`` (or NAME.bak when NAME is unusable); found false if never put."""
        name = valid_config_name(request.name)
        running_store(self._store)
        try:
            content = await asyncio.to_thread(self._configs.get, name)
        except ConfigCorrupt as exc:
            raise Rejected(grpc.StatusCode.DATA_LOSS, str(exc)) from None
        if content is None:
            return store_pb2.GetConfigResponse(found=False)
        return store_pb2.GetConfigResponse(found=True, content=content)
