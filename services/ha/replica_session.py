"""One replica's Replicate stream on the master: chunks out, reports in.

A :class:`ReplicaSession` passes on the store's following CommitLog read from
the resume offset and reads the replica's reports concurrently. Each report
must name an offset the replica can really have (:class:`AckWindow`: its end
before the stream, the resume offset, or the end of a chunk already sent);
anything else means the two sides disagree and the stream is closed. Every
valid report goes to :class:`~services.ha.replicas.ConnectedReplicas` and on to
the store (SYNC_MASTER waits on it). A replica silent for the housekeeping
interval is dropped. At most ``unacked_chunks_max`` chunks are in flight:
beyond that the session waits for acks, so a stuck replica costs a bounded
amount of memory.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncGenerator, AsyncIterator

from boltmq.kernel import runtime
from boltmq.kernel.errors import ServiceError
from boltmq.v1 import ha_pb2, store_pb2
from services.ha.config import HAConfig
from services.ha.errors import OffsetMismatch, StreamSilent
from services.ha.progress import ProgressForwarder
from services.ha.replicas import ConnectedReplicas
from services.ha.resume import ResumePlan
from services.ha.store_client import HAStoreClient

log = logging.getLogger(__name__)


class AckWindow:
    """The offsets a replica may report: what it had, then the end of every chunk sent.

    Offsets are strictly increasing, so a report pops every point up to its
    own; a report equal to the last ack is a heartbeat.
    """

    def __init__(self, acked_offset: int, start_offset: int) -> None:
        self.acked_offset = acked_offset
        self._points: collections.deque[int] = collections.deque()
        if start_offset != acked_offset:
            self._points.append(start_offset)
        self.sent_end = start_offset

    def __len__(self) -> int:
        return len(self._points)

    def sent(self, end_offset: int) -> None:
        """A chunk ending at ``end_offset`` went out."""
        self._points.append(end_offset)
        self.sent_end = end_offset

    def ack(self, offset: int) -> bool:
        """Apply a report; True when it moved the ack. OffsetMismatch when impossible."""
        if offset == self.acked_offset:
            return False
        if offset not in self._points:
            raise OffsetMismatch(
                f"replica reports its CommitLog end at {offset}, but it can only be at "
                f"{self.acked_offset} or the end of a chunk sent (up to {self.sent_end})"
            )
        while self._points.popleft() != offset:
            pass
        self.acked_offset = offset
        return True


class ReplicaSession:
    """One replica's stream: chunks out, reports in."""

    def __init__(
        self,
        config: HAConfig,
        store: HAStoreClient,
        replicas: ConnectedReplicas,
        forwarder: ProgressForwarder,
        address: str,
        reported_offset: int,
        plan: ResumePlan,
    ) -> None:
        self._config = config
        self._store = store
        self._replicas = replicas
        self._forwarder = forwarder
        self.address = address
        self.plan = plan
        # What the replica has once it applied the handshake: the cut, or what it reported.
        acked = plan.truncate_to if plan.truncate_to >= 0 else reported_offset
        self._window = AckWindow(acked, plan.start_offset)
        self._acks = asyncio.Event()
        self._ended: asyncio.Future[ServiceError | None] = (
            asyncio.get_running_loop().create_future()
        )
        self._session = replicas.open(address, acked)
        forwarder.acked(address, acked)

    def close(self, reason: str) -> None:
        """End the stream from outside (role change, shutdown)."""
        self._end(None)
        log.info("closing replication stream to %s: %s", self.address, reason)

    def finish(self) -> None:
        """The stream is over: forget the replica (unless it already reconnected)."""
        if self._replicas.close(self.address, self._session):
            self._forwarder.disconnected(self.address)
        log.info("replica %s disconnected at %d", self.address, self._window.acked_offset)

    def _end(self, error: ServiceError | None) -> None:
        if not self._ended.done():
            self._ended.set_result(error)

    async def stream(
        self, reports: AsyncIterator[ha_pb2.ReplicaReport]
    ) -> AsyncIterator[store_pb2.CommitLogChunk]:
        """The store's chunks from the resume offset until the stream ends or breaks."""
        reader = asyncio.create_task(self._read_reports(reports), name=f"ha-reports-{self.address}")
        chunks = self._store.read_commitlog(
            self.plan.start_offset, self._config.max_chunk_bytes, self._config.heartbeat_interval_ms
        )
        try:
            while True:
                if not await self._window_open():
                    break
                chunk = await self._next_or_end(chunks)
                if chunk is None:
                    break
                if chunk.end_offset > chunk.offset:  # data (never read here: a copy)
                    self._window.sent(chunk.end_offset)
                self._replicas.note_master_max(chunk.master_max_offset)
                yield chunk
        finally:
            await runtime.cancel_and_wait(reader)
            await chunks.aclose()
        error = self._ended.result() if self._ended.done() else None
        if error is not None:
            raise error

    async def _window_open(self) -> bool:
        """Wait while too many chunks are unacked; False when the stream ended meanwhile."""
        while len(self._window) >= self._config.unacked_chunks_max:
            self._acks.clear()
            acked: asyncio.Future[object] = asyncio.ensure_future(self._acks.wait())
            ended: asyncio.Future[object] = self._ended  # type: ignore[assignment]
            await asyncio.wait({acked, ended}, return_when=asyncio.FIRST_COMPLETED)
            acked.cancel()
            if self._ended.done():
                return False
        return not self._ended.done()

    async def _next_or_end(
        self, chunks: AsyncGenerator[store_pb2.CommitLogChunk, None]
    ) -> store_pb2.CommitLogChunk | None:
        """The store's next chunk, or None when the stream ended (either side)."""
        read: asyncio.Future[object] = asyncio.ensure_future(anext(chunks))
        ended: asyncio.Future[object] = self._ended  # type: ignore[assignment]
        try:
            await asyncio.wait({read, ended}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            # Also when this stream is cancelled: the generator must not be left running
            # in the read, or closing it afterwards fails.
            if not read.done():
                await runtime.cancel_and_wait(read)
        if read.cancelled():
            return None
        try:
            chunk = read.result()
        except StopAsyncIteration:
            return None  # the store ended the read (it is shutting down): the replica reconnects
        assert isinstance(chunk, store_pb2.CommitLogChunk)
        return chunk

    async def _read_reports(self, reports: AsyncIterator[ha_pb2.ReplicaReport]) -> None:
        silence_s = self._config.housekeeping_interval_ms / 1000
        try:
            while True:
                try:
                    async with asyncio.timeout(silence_s):
                        report = await anext(reports)
                except StopAsyncIteration:
                    self._end(None)
                    return
                except TimeoutError:
                    raise StreamSilent(
                        f"replica {self.address} sent no report for {silence_s:g} s"
                    ) from None
                if self._window.ack(report.max_offset):
                    self._replicas.report(self.address, self._session, report.max_offset)
                    self._forwarder.acked(self.address, report.max_offset)
                    self._acks.set()
                else:
                    self._replicas.report(self.address, self._session, report.max_offset)
        except ServiceError as exc:  # an HAError, or a report that does not parse
            log.warning("closing replication stream to %s: %s", self.address, exc)
            self._end(exc)
        except Exception as exc:  # the transport failed under the read: the stream is over
            log.warning("replication stream to %s: reading reports failed: %r", self.address, exc)
        finally:
            self._end(None)
