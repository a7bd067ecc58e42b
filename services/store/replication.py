"""Replication: the StoreService RPCs the HA service uses beside a master or a replica store.

- ReadCommitLog (master side): whole CommitLog records from a record's
  offset, in chunks that never cross a segment; with ``follow`` the stream
  waits for new bytes (woken by arrivals,
  :class:`~services.store.arrival_streams.Waker`) and sends an empty chunk
  after ``heartbeat_ms`` of silence.
- AppendRaw and AppendRawStream (replica side): the master's bytes appended
  at exactly the replica's end. A refused chunk is an answer (``ok`` false,
  with the store's end), not an error: the follower re-reads from there.
- Truncate (replica side): the CommitLog cut back to a record boundary.
- SetRole: promotion to master or demotion to replica, durable.
- ReportReplicas (master side): the replicas' acked offsets, which SYNC_MASTER
  appends wait for; all of them are forgotten when the stream ends.

See ``docs/ha.md`` for the protocol these serve.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Final

import grpc

from boltmq.kernel.errors import FailedPrecondition
from boltmq.v1 import store_pb2
from services.store.arrival_streams import Waker
from services.store.config import StoreConfig
from services.store.errors import BadRequest, StoreNotRunning
from services.store.open_streams import OpenStreams
from services.store.proto_conversion import store_info
from services.store.request_checks import (
    READ_CHUNK_DEFAULT_BYTES,
    READ_CHUNK_MAX_BYTES,
    check_readable,
    non_negative,
    replica_progress,
    role_broker_id,
    role_fields,
    running_store,
    size_limit,
)
from services.store.role import RoleChangeRefused
from services.store.store import MessageStore

HEARTBEAT_MIN_MS: Final = 50
"""Shortest heartbeat interval honoured (a smaller heartbeat_ms is raised to this)."""
FOLLOW_RECHECK_MS: Final = 1_000
"""A following ReadCommitLog re-reads at least this often even without an arrival.

Arrivals wake it at once; the re-check covers bytes that produce none (a
blank marker alone, prepared transaction records) without a busy loop.
"""


class Replication:
    """The replication RPCs over one store (the servicer delegates each)."""

    def __init__(self, store: MessageStore, config: StoreConfig, streams: OpenStreams) -> None:
        self._store = store
        self._config = config
        self._streams = streams

    # ------------------------------------------------------------- replica side
    async def append_raw(
        self, request: store_pb2.AppendRawRequest | store_pb2.CommitLogChunk
    ) -> store_pb2.AppendRawResponse:
        """Append replicated CommitLog bytes at exactly the store's end (replica stores only).

        A master refuses: its own appends assign queue offsets that raw bytes
        would silently duplicate.
        """
        offset = non_negative("offset", request.offset)
        data = request.data
        if not data:
            raise BadRequest("data", "must not be empty")
        store = running_store(self._store)
        if isinstance(request, store_pb2.CommitLogChunk):
            refusal = _chunk_refusal(store, request)
            if refusal:
                return store_pb2.AppendRawResponse(
                    ok=False, max_offset=store.commitlog.max_offset, error=refusal
                )
        try:
            end = await asyncio.to_thread(store.append_raw, offset, data)
        except (ValueError, StoreNotRunning, OSError) as exc:  # CorruptRecord, RoleChangeRefused
            return store_pb2.AppendRawResponse(
                ok=False, max_offset=store.commitlog.max_offset, error=str(exc)
            )
        return store_pb2.AppendRawResponse(ok=True, max_offset=end)

    async def append_raw_stream(
        self, requests: AsyncIterator[store_pb2.CommitLogChunk], context: grpc.aio.ServicerContext
    ) -> None:
        """AppendRaw over one stream, answered in request order (see store.proto).

        gRPC receives the next chunk while this one is checked and copied, so
        the follower's round trip per chunk no longer stalls the copy. At
        shutdown the stream stops reading like AppendStream; the follower
        reconnects and resumes at what the store really holds.
        """
        try:
            with self._streams.reading():
                async for chunk in requests:
                    await context.write(await self.append_raw(chunk))
        except asyncio.CancelledError:
            if not self._streams.closing:
                raise

    async def truncate(self, request: store_pb2.TruncateRequest) -> store_pb2.TruncateResponse:
        """Cut a replica's CommitLog back to a record boundary (FAILED_PRECONDITION on a master)."""
        offset = non_negative("offset", request.offset)
        store = running_store(self._store)
        try:
            cut = await asyncio.to_thread(store.truncate, offset)
        except RoleChangeRefused as exc:
            raise FailedPrecondition(str(exc)) from None
        except ValueError as exc:
            raise BadRequest("offset", str(exc)) from None
        return store_pb2.TruncateResponse(max_offset=store.commitlog.max_offset, cut_bytes=cut)

    # ------------------------------------------------------------- roles
    async def set_role(self, request: store_pb2.SetRoleRequest) -> store_pb2.StoreInfo:
        """Promote (MASTER) or demote (REPLICA) the store; the new role is durable."""
        epoch, epochs = role_fields(request)
        store = running_store(self._store)
        try:
            role_broker_id(request)
            if request.role == store_pb2.MASTER:
                await asyncio.to_thread(store.promote, epoch, 0)
            else:
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
            raise FailedPrecondition(str(exc)) from None
        return store_info(store, self._config)

    # ------------------------------------------------------------- master side
    async def report_replicas(
        self, requests: AsyncIterator[store_pb2.ReplicaProgress]
    ) -> store_pb2.ReportReplicasResponse:
        """Replicas' acked offsets from the HA service; all of them are forgotten when it ends."""
        store = self._store
        seen: set[str] = set()
        try:
            async for progress in requests:
                replica_progress(progress)
                if not store.running or not store.role.is_master:
                    continue  # a stale report from before a demotion
                address = progress.replica_address
                store.report_replica(address, progress.acked_offset, progress.disconnected)
                if progress.disconnected:
                    seen.discard(address)
                else:
                    seen.add(address)
        finally:
            for address in seen:
                store.report_replica(address, 0, disconnected=True)
        return store_pb2.ReportReplicasResponse()

    async def read_commitlog(
        self, request: store_pb2.ReadCommitLogRequest
    ) -> AsyncIterator[store_pb2.CommitLogChunk]:
        """Whole CommitLog records from a record's offset, never crossing a segment per chunk.

        Without ``follow`` the stream ends at the CommitLog's end as of the
        request. With it, the stream waits for new bytes (woken by arrivals)
        and sends an empty chunk after ``heartbeat_ms`` of silence (0: never).
        An offset outside the CommitLog is OUT_OF_RANGE.
        """
        offset = non_negative("offset", request.offset)
        chunk_bytes = size_limit(
            "max_chunk_bytes",
            request.max_chunk_bytes,
            READ_CHUNK_DEFAULT_BYTES,
            READ_CHUNK_MAX_BYTES,
        )
        heartbeat_ms = non_negative("heartbeat_ms", request.heartbeat_ms)
        store = running_store(self._store)
        check_readable(store.commitlog, offset)
        if not store.commitlog.is_record_start(offset):
            raise BadRequest("offset", f"{offset} is not the start of a record")
        if request.follow:
            chunks = self._follow(store, offset, chunk_bytes, heartbeat_ms)
        else:
            chunks = _read_range(store, offset, store.commitlog.max_offset, chunk_bytes)
        async for chunk in chunks:
            yield chunk

    async def _follow(
        self, store: MessageStore, offset: int, chunk_bytes: int, heartbeat_ms: int
    ) -> AsyncIterator[store_pb2.CommitLogChunk]:
        commitlog = store.commitlog
        loop = asyncio.get_running_loop()
        waker = Waker(loop)
        listener = waker.offer
        store.add_arrival_listener(listener)
        # Woken by the append itself too: past the confirm offset dispatch waits for
        # the replica, which waits for this stream.
        appended = functools.partial(waker.offer, "", 0, 0)
        dispatcher = store.dispatcher
        dispatcher.append_listeners = [*dispatcher.append_listeners, appended]
        heartbeat_s = max(heartbeat_ms, HEARTBEAT_MIN_MS) / 1000 if heartbeat_ms else 0.0
        last_sent = loop.time()
        try:
            with self._streams.waking(waker.event):
                while True:
                    waker.clear()
                    data = await asyncio.to_thread(commitlog.read_bytes, offset, chunk_bytes)
                    if data:
                        yield _chunk(store, offset, data)
                        offset += len(data)
                        last_sent = loop.time()
                        continue
                    check_readable(commitlog, offset)
                    wait_s = FOLLOW_RECHECK_MS / 1000
                    if heartbeat_s:
                        due_s = last_sent + heartbeat_s - loop.time()
                        if due_s <= 0:
                            yield _chunk(store, offset, b"")
                            last_sent = loop.time()
                            continue
                        wait_s = min(wait_s, due_s)
                    await waker.wait(wait_s)
                    if self._streams.closing:
                        return
        finally:
            store.remove_arrival_listener(listener)
            listeners = dispatcher.append_listeners
            dispatcher.append_listeners = [k for k in listeners if k is not appended]


def _chunk_refusal(store: MessageStore, chunk: store_pb2.CommitLogChunk) -> str:
    """Why a replica store refuses a chunk of its HA stream ("" when it does not)."""
    offset, size = chunk.offset, len(chunk.data)
    if chunk.end_offset != offset + size:
        return (
            f"chunk at {offset} says it ends at {chunk.end_offset}, but its "
            f"{size} bytes end at {offset + size}"
        )
    epoch = store.role.epoch
    if chunk.master_epoch < epoch:
        return (
            f"chunk at {offset} comes from a master of epoch {chunk.master_epoch}, older "
            f"than this store's epoch {epoch}: a deposed master"
        )
    return ""


def _chunk(store: MessageStore, offset: int, data: bytes) -> store_pb2.CommitLogChunk:
    """``data`` read at ``offset`` (empty: a heartbeat), with the CommitLog's end and the
    store's epoch now."""
    return store_pb2.CommitLogChunk(
        offset=offset,
        data=data,
        end_offset=offset + len(data),
        master_max_offset=store.commitlog.max_offset,
        master_epoch=store.role.epoch,
    )


async def _read_range(
    store: MessageStore, offset: int, end: int, chunk_bytes: int
) -> AsyncIterator[store_pb2.CommitLogChunk]:
    """Chunks of ``[offset, end)``; a thread reads each (cold pages fault in from disk)."""
    commitlog = store.commitlog
    while offset < end:
        data = await asyncio.to_thread(commitlog.read_bytes, offset, min(chunk_bytes, end - offset))
        if not data:
            check_readable(commitlog, offset)  # a segment deleted under the reader
            return
        yield _chunk(store, offset, data)
        offset += len(data)
