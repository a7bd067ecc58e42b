"""The HA service's connection to its own store: deadlines and named errors.

The HA service touches store data only through these calls (see docs/ha.md): a
following CommitLog read on a master, raw appends, truncation and role
changes on a replica, and one client stream of replica progress. gRPC
failures become :class:`~services.ha.errors.StoreUnavailable` (unreachable,
too slow) or :class:`~services.ha.errors.StoreCallFailed` (any other status, with
the store's own text), here and nowhere else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable

import grpc

from boltmq.kernel.store_channel import StoreChannel
from boltmq.v1 import store_pb2
from services.ha.errors import HAError, StoreCallFailed, StoreUnavailable

_UNREACHABLE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
)


class RawAppends:
    """One AppendRawStream: send chunks without waiting, read the answers in order.

    The stream itself has no deadline (it lives as long as the follower's
    session), but each step does: a chunk gRPC does not take, or an answer
    that does not come, within the store call timeout is a
    :class:`StoreUnavailable` (a store that went away mid-stream can leave a
    call that never fails on its own). Failures of the call are a
    :class:`StoreUnavailable` or :class:`StoreCallFailed`.
    """

    def __init__(
        self, client: HAStoreClient, call: grpc.aio.StreamStreamCall, timeout_s: float
    ) -> None:
        self._client = client
        self._call = call
        self._timeout_s = timeout_s

    async def send(self, chunk: store_pb2.CommitLogChunk) -> None:
        """Queue the append of a chunk from the master, as it came (returns once gRPC took it)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._call.write(chunk)
        except TimeoutError:
            raise StoreUnavailable(
                f"store at {self._client.address} took no append for {self._timeout_s:g} s"
            ) from None
        except grpc.aio.AioRpcError as exc:
            raise self._client.translate("AppendRawStream", exc) from None

    async def answer(self) -> store_pb2.AppendRawResponse:
        """The answer to the oldest unanswered append (call only with one in flight)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._call.read()
        except TimeoutError:
            raise StoreUnavailable(
                f"store at {self._client.address} did not answer an append "
                f"for {self._timeout_s:g} s"
            ) from None
        except grpc.aio.AioRpcError as exc:
            raise self._client.translate("AppendRawStream", exc) from None
        if response is grpc.aio.EOF:
            raise StoreUnavailable(f"store at {self._client.address} ended the append stream")
        assert isinstance(response, store_pb2.AppendRawResponse)
        return response

    def cancel(self) -> None:
        """End the stream (appends the store already took still complete there)."""
        self._call.cancel()


class HAStoreClient(StoreChannel):
    """Typed, deadline-bound calls to the StoreService at ``address``."""

    def translate(self, method: str, exc: grpc.aio.AioRpcError) -> HAError:
        """The HA error for a failed store call."""
        code, details = exc.code(), exc.details() or ""
        if code in _UNREACHABLE:
            return StoreUnavailable(
                f"store at {self.address} is unavailable ({method}: {code.name.lower()}: {details})"
            )
        return StoreCallFailed(f"store {method} failed: {code.name}: {details}", code)

    async def store_info(self, *, wait_for_ready: bool = False) -> store_pb2.StoreInfo:
        """Offsets, role, epochs and segment size of the store."""
        info: store_pb2.StoreInfo = await self._call(
            "GetStoreInfo", store_pb2.GetStoreInfoRequest(), wait_for_ready=wait_for_ready
        )
        return info

    def raw_appends(self) -> RawAppends:
        """Open one AppendRawStream: raw appends answered in order (the follower's path)."""
        return RawAppends(self, self._stub.AppendRawStream(), self._timeout_s)

    async def truncate(self, offset: int) -> store_pb2.TruncateResponse:
        """Cut the replica store's CommitLog (and what derives from it) back to ``offset``."""
        response: store_pb2.TruncateResponse = await self._call(
            "Truncate", store_pb2.TruncateRequest(offset=offset)
        )
        return response

    async def set_role(
        self,
        role: store_pb2.StoreRole.ValueType,
        epoch: int,
        broker_id: int,
        epochs: Iterable[store_pb2.EpochStart] = (),
    ) -> store_pb2.StoreInfo:
        """Change the store's role and epoch (durable in the store).

        A replica passes its master's ``epochs``: the history it adopts, so a
        later promotion or rejoin compares against the same epoch starts. The
        store refuses if it is a master by then (``only_if_replica``): a
        promotion between the follower's role check and this call stands.
        """
        info: store_pb2.StoreInfo = await self._call(
            "SetRole",
            store_pb2.SetRoleRequest(
                role=role,
                epoch=epoch,
                broker_id=broker_id,
                epochs=list(epochs),
                only_if_replica=True,
            ),
        )
        return info

    async def promote(self, epoch: int) -> store_pb2.StoreInfo:
        """Make the store the master of ``epoch`` (the controller's election; it must be a
        replica: a master is refused)."""
        info: store_pb2.StoreInfo = await self._call(
            "SetRole", store_pb2.SetRoleRequest(role=store_pb2.MASTER, epoch=epoch, broker_id=0)
        )
        return info

    async def fence(self) -> store_pb2.StoreInfo:
        """Make the store a replica now, keeping its epoch, history and id: it refuses client
        writes, and SYNC_MASTER appends still waiting for a replica give up."""
        info: store_pb2.StoreInfo = await self._call(
            "SetRole", store_pb2.SetRoleRequest(role=store_pb2.REPLICA, epoch=0, broker_id=-1)
        )
        return info

    async def read_commitlog(
        self, offset: int, max_chunk_bytes: int, heartbeat_ms: int
    ) -> AsyncGenerator[store_pb2.CommitLogChunk, None]:
        """Follow the CommitLog from ``offset``: whole records, then heartbeats while idle.

        No deadline: the stream lives as long as the replica it feeds. The call
        is cancelled when the caller stops iterating.
        """
        call = self._stub.ReadCommitLog(
            store_pb2.ReadCommitLogRequest(
                offset=offset,
                max_chunk_bytes=max_chunk_bytes,
                follow=True,
                heartbeat_ms=heartbeat_ms,
            )
        )
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            raise self.translate("ReadCommitLog", exc) from None
        finally:
            call.cancel()

    async def report_replicas(self, progress: AsyncIterator[store_pb2.ReplicaProgress]) -> None:
        """Stream replica progress to the store until ``progress`` ends or the call fails."""
        try:
            await self._stub.ReportReplicas(progress)
        except grpc.aio.AioRpcError as exc:
            raise self.translate("ReportReplicas", exc) from None
