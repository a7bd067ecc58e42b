"""The replica side of replication: follow the master's HA service into the own store.

One session: read the own store's end and epoch, find the master, open
Replicate and report; apply the handshake (refuse a different segment size,
truncate a diverged tail and log what was cut, record the master's epoch with
SetRole); then append every chunk at exactly the store's end over one
AppendRawStream, a few chunks in flight. A report goes out after each append
and at least every heartbeat interval.
Anything the two sides disagree on (an offset, a refused chunk) closes the
stream; the follower reconnects with exponential backoff and jitter
(tenacity), starting again from what its store really holds. A session that
made progress before it broke reconnects at once: the backoff only grows over
attempts that get nowhere (a garbled chunk sent again and again).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from dataclasses import dataclass

import grpc
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    wait_exponential_jitter,
)

from boltmq.kernel import channels, runtime
from boltmq.kernel.malformed_requests import MalformedRequest, tolerant
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import ha_pb2, store_pb2
from services.ha.config import HAConfig
from services.ha.errors import (
    ChunkRefused,
    HAError,
    HandshakeRefused,
    OffsetMismatch,
    ReplicationBroken,
    StreamSilent,
)
from services.ha.master_locator import MasterLocator
from services.ha.store_client import HAStoreClient, RawAppends

log = logging.getLogger(__name__)

REPLICATE = "/boltmq.v1.HAService/Replicate"
"""Opened by path: the master's chunks are parsed tolerantly (garbled bytes end the
session as a disagreement, not as a traceback in grpc's own log)."""
APPENDS_IN_FLIGHT = 4
"""Chunks sent to the store and not yet answered (4 x the 4 MiB default chunk at most)."""


class MasterUnreachable(HAError):
    """The master's HA service could not be reached, or ended the stream with an error."""


class _Progressed(Exception):
    """A session that appended data ended: reconnect at once, with a fresh backoff."""


@dataclass
class FollowerStatus:
    """What Status shows on the replica side."""

    master_address: str = ""
    connected: bool = False
    master_max_offset: int = 0
    store_max_offset: int = 0


class Follower:
    """Runs sessions against the master until stopped (the store was promoted)."""

    def __init__(
        self,
        config: HAConfig,
        store: HAStoreClient,
        locator: MasterLocator,
        own_address: str,
        tls: ClientTLS | None = None,
    ) -> None:
        self._config = config
        self._tls = tls
        self._store = store
        self._locator = locator
        self._own_address = own_address
        self.status = FollowerStatus()
        self._task: asyncio.Task[None] | None = None
        self._report_due = asyncio.Event()
        self._epoch = 0
        self._group_epoch = 0
        """The newest master epoch the controller saw elected: older masters are refused."""
        self._appended = False  # this session appended something
        # One session's appends: free slots, chunks sent whose answer is not yet awaited,
        # and (offset, end) of every chunk sent and not yet answered.
        self._window = asyncio.Semaphore(APPENDS_IN_FLIGHT)
        self._sent = asyncio.Semaphore(0)
        self._in_flight: collections.deque[tuple[int, int]] = collections.deque()

    def note_group_epoch(self, epoch: int) -> None:
        """The controller saw a master of ``epoch`` elected (never lowers it)."""
        self._group_epoch = max(self._group_epoch, epoch)

    @property
    def running(self) -> bool:
        """True between start() and stop()."""
        return self._task is not None

    def start(self) -> None:
        """Start following in the background (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ha-follower")

    async def stop(self) -> None:
        """Stop at once: the stream is cancelled, nothing more is appended."""
        task, self._task = self._task, None
        await runtime.cancel_and_wait(task)
        self.status.connected = False

    async def _run(self) -> None:
        config = self._config
        while True:
            retrying = AsyncRetrying(
                wait=wait_exponential_jitter(
                    multiplier=config.reconnect_min_ms / 1000,
                    max=config.reconnect_max_ms / 1000,
                    jitter=config.reconnect_min_ms / 1000,
                ),
                # Any failure is retried (a bug in one session must not end replication
                # for good); cancellation (the store was promoted) is not an Exception.
                retry=(
                    retry_if_exception_type(Exception) & retry_if_not_exception_type(_Progressed)
                ),
                before_sleep=self._log_retry,
                reraise=True,
            )
            with contextlib.suppress(_Progressed):
                await retrying(self._guarded_session)

    async def _guarded_session(self) -> None:
        """:meth:`_session`, where a CancelledError from below (a gRPC call cancelled
        under it, not this task) fails the session like any error: it is retried, and
        following goes on."""
        try:
            await self._session()
        except asyncio.CancelledError:
            if not runtime.cancelled_from_below():
                raise
            raise ReplicationBroken("a call of the session was cancelled under it") from None

    @staticmethod
    def _log_retry(state: object) -> None:
        outcome = getattr(state, "outcome", None)
        sleep = getattr(getattr(state, "next_action", None), "sleep", 0.0)
        error = outcome.exception() if outcome is not None else None
        text = str(error) if isinstance(error, HAError) else repr(error)
        log.warning("replication stopped: %s; reconnecting in %.2f s", text, sleep)

    async def _session(self) -> None:
        """One connection to the master; raises why it ended."""
        info = await self._store.store_info()
        if info.role != "REPLICA":
            raise HandshakeRefused(f"the store is {info.role}, not a replica; not following")
        master_address = await self._locator.locate(self._own_address)
        self.status.master_address = master_address
        self._epoch = info.epoch
        self.status.store_max_offset = info.commitlog_max_offset
        chan = channels.channel(master_address, self._tls)
        call = chan.stream_stream(
            REPLICATE,
            request_serializer=ha_pb2.ReplicaReport.SerializeToString,
            response_deserializer=tolerant(store_pb2.CommitLogChunk.FromString),
        )()
        progressed = False
        try:
            try:
                await call.write(self._report(info.commitlog_max_offset))
            except grpc.aio.AioRpcError as exc:
                raise MasterUnreachable(
                    f"master {master_address}: {exc.code().name}: {exc.details()}"
                ) from None
            handshake = await self._read(call, master_address)
            if handshake is None:
                raise MasterUnreachable(f"master {master_address} ended the stream at once")
            expected = await self._apply_handshake(handshake, info, master_address)
            self.status.connected = True
            log.info("following master %s from offset %d", master_address, expected)
            progressed = await self._follow(call, master_address, expected)
        finally:
            self.status.connected = False
            call.cancel()
            await chan.close()
        if progressed:
            raise _Progressed()
        raise MasterUnreachable(f"master {master_address} ended the stream")

    def _report(self, max_offset: int) -> ha_pb2.ReplicaReport:
        return ha_pb2.ReplicaReport(
            max_offset=max_offset, replica_address=self._own_address, epoch=self._epoch
        )

    async def _read(
        self, call: grpc.aio.StreamStreamCall, master_address: str
    ) -> store_pb2.CommitLogChunk | None:
        """The next message from the master; None at the end of the stream."""
        silence_s = self._config.housekeeping_interval_ms / 1000
        try:
            async with asyncio.timeout(silence_s):
                message = await call.read()
        except TimeoutError:
            raise StreamSilent(
                f"nothing from master {master_address} for {silence_s:g} s"
            ) from None
        except grpc.aio.AioRpcError as exc:
            raise MasterUnreachable(
                f"master {master_address}: {exc.code().name}: {exc.details()}"
            ) from None
        if message is grpc.aio.EOF:
            return None
        if isinstance(message, MalformedRequest):
            raise ReplicationBroken(f"master {master_address} sent bytes that are no chunk")
        assert isinstance(message, store_pb2.CommitLogChunk)
        return message

    async def _apply_handshake(
        self, handshake: store_pb2.CommitLogChunk, info: store_pb2.StoreInfo, master_address: str
    ) -> int:
        """Check and apply the master's handshake; the offset the first chunk must have."""
        if not handshake.handshake:
            raise HandshakeRefused(f"master {master_address} sent data before its handshake")
        if handshake.master_epoch < self._group_epoch:
            raise HandshakeRefused(
                f"master {master_address} is of epoch {handshake.master_epoch}, but a master "
                f"of epoch {self._group_epoch} was elected: a deposed master"
            )
        if handshake.segment_bytes != info.segment_bytes:
            log.error(
                "refusing master %s: its segments are %d bytes, this store's %d; both "
                "must use the same mapped_file_size_commitlog",
                master_address,
                handshake.segment_bytes,
                info.segment_bytes,
            )
            raise HandshakeRefused(
                f"segment size {handshake.segment_bytes} != {info.segment_bytes}"
            )
        end = info.commitlog_max_offset
        if handshake.truncate_to >= 0:
            cut = await self._store.truncate(handshake.truncate_to)
            log.warning(
                "truncated the CommitLog from %d to %d (%d bytes cut): master %s "
                "(epoch %d) does not have them",
                end,
                cut.max_offset,
                cut.cut_bytes,
                master_address,
                handshake.master_epoch,
            )
            end = cut.max_offset
        current = await self._store.store_info()
        if current.role != "REPLICA":  # promoted meanwhile: never demote it back
            raise HandshakeRefused(f"the store became {current.role}; not following")
        await self._store.set_role(store_pb2.REPLICA, handshake.master_epoch, -1, handshake.epochs)
        self._epoch = handshake.master_epoch
        self.status.master_max_offset = handshake.master_max_offset
        self.status.store_max_offset = end
        if end == 0:
            return handshake.offset  # an empty store starts where the master says
        if handshake.offset != end:
            raise OffsetMismatch(
                f"master {master_address} resumes at {handshake.offset}, "
                f"but this store ends at {end}"
            )
        return end

    async def _follow(
        self, call: grpc.aio.StreamStreamCall, master_address: str, expected: int
    ) -> bool:
        """Append chunks until a stream ends; True when anything was appended.

        The chunks go to the store over one AppendRawStream, up to
        ``APPENDS_IN_FLIGHT`` unanswered: the store copies one chunk while the
        next is on its way, instead of waiting a round trip per chunk.
        """
        appends = self._store.raw_appends()
        self._window = asyncio.Semaphore(APPENDS_IN_FLIGHT)
        self._sent = asyncio.Semaphore(0)
        self._in_flight.clear()
        self._appended = False
        reporter = asyncio.create_task(self._report_loop(call), name="ha-reports")
        sender = asyncio.create_task(
            self._send_chunks(call, appends, master_address, expected), name="ha-send"
        )
        answers = asyncio.create_task(
            self._take_answers(appends, master_address), name="ha-answers"
        )
        self._report_due.set()  # the state after the handshake, at once
        try:
            done, _ = await asyncio.wait((sender, answers), return_when=asyncio.FIRST_COMPLETED)
            for task in (answers, sender):  # a refusal by the store says most
                if task in done:
                    task.result()  # raises why the session ended
            return self._appended
        finally:
            try:
                await runtime.cancel_and_wait(sender, answers, reporter)
            finally:
                appends.cancel()

    async def _send_chunks(
        self,
        call: grpc.aio.StreamStreamCall,
        appends: RawAppends,
        master_address: str,
        expected: int,
    ) -> None:
        """Pass every chunk from the master on to the store until the master's stream ends.

        A chunk from a master of an older epoch than the store's (a deposed master
        still streaming) ends the session; the store would refuse it too.
        """
        while True:
            try:
                chunk = await self._read(call, master_address)
            except MasterUnreachable:
                await self._answered()  # the store's verdict on what was sent comes first
                raise
            if chunk is None:
                await self._answered()
                return
            self.status.master_max_offset = chunk.master_max_offset
            # Passed on as it came: chunk.data is never read here (each read is a copy).
            if chunk.offset != expected or chunk.end_offset < chunk.offset:
                raise OffsetMismatch(
                    f"master {master_address} sent a chunk at "
                    f"[{chunk.offset}, {chunk.end_offset}), but this store "
                    f"ends at {expected}"
                )
            newest = max(self._epoch, self._group_epoch)
            if chunk.master_epoch < newest:
                raise ChunkRefused(
                    f"master {master_address} sent a chunk of epoch {chunk.master_epoch}, "
                    f"but epoch {newest} is the newest known: a deposed master"
                )
            if chunk.end_offset == chunk.offset:
                continue  # a heartbeat
            await self._window.acquire()
            self._in_flight.append((chunk.offset, chunk.end_offset))
            await appends.send(chunk)
            self._sent.release()
            expected = chunk.end_offset

    async def _answered(self) -> None:
        """Until every chunk sent is answered (a refusal ends the session first)."""
        for _ in range(APPENDS_IN_FLIGHT):
            await self._window.acquire()

    async def _take_answers(self, appends: RawAppends, master_address: str) -> None:
        """Read the store's answers in order; the first refusal ends the session."""
        while True:
            await self._sent.acquire()  # the answer's deadline runs only for a chunk sent
            result = await appends.answer()
            offset, end = self._in_flight.popleft()
            self._window.release()
            if not result.ok:
                log.error(
                    "store refused %d bytes at %d from master %s: %s",
                    end - offset,
                    offset,
                    master_address,
                    result.error,
                )
                raise ChunkRefused(f"chunk at {offset} refused: {result.error}")
            self._appended = True
            if result.max_offset != end:  # the store took data of another size than the chunk said
                raise OffsetMismatch(
                    f"chunk [{offset}, {end}) from master {master_address} "
                    f"left this store ending at {result.max_offset}"
                )
            self.status.store_max_offset = result.max_offset
            self._report_due.set()

    async def _report_loop(self, call: grpc.aio.StreamStreamCall) -> None:
        """Report the store's end after each append (coalesced) and every heartbeat."""
        heartbeat_s = self._config.heartbeat_interval_ms / 1000
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(heartbeat_s):
                        await self._report_due.wait()
                self._report_due.clear()
                await call.write(self._report(self.status.store_max_offset))
