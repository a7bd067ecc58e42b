"""The HAService gRPC servicer: the edge where HA errors become gRPC statuses.

Replication failures are statuses on the stream, once, here: every
:class:`~services.ha.errors.HAError` carries its own ``code``
(:mod:`services.ha.errors` lists them). A replica that cannot be served (its
data was deleted on the master, or this store is not a master) gets
FAILED_PRECONDITION with a message saying what to do; a report the master
cannot reconcile gets ABORTED; a silent replica DEADLINE_EXCEEDED; a store that
is down UNAVAILABLE; a report that does not parse INVALID_ARGUMENT (the kernel's
``MalformedStreamMessage``, handled as every other service error). The follower
logs the status and reconnects. The unary Status goes through the kernel's
:func:`~boltmq.kernel.errors.answers_errors`; the bidirectional Replicate writes
its chunks itself (see its docstring), so it ends the stream with the error's
code by hand.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import grpc

from boltmq.kernel.errors import ServiceError, answers_errors
from boltmq.v1 import ha_pb2, ha_pb2_grpc
from services.ha.node import HANode

log = logging.getLogger(__name__)


class HAServicer(ha_pb2_grpc.HAServiceServicer):
    """Replicate (master side) and Status (either side) over one HANode."""

    def __init__(self, node: HANode) -> None:
        self._node = node

    async def Replicate(
        self,
        request_iterator: AsyncIterator[ha_pb2.ReplicaReport],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Handshake, then the master's CommitLog from where the replica resumes.

        Chunks are written with ``context.write`` rather than yielded, so a
        replica that vanished under a write ends the stream quietly here
        instead of as an error inside gRPC's own loop.
        """
        chunks = self._node.master.replicate(request_iterator, context.peer())
        try:
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    try:
                        await context.write(chunk)
                    except Exception as exc:  # gRPC's core error when the peer is gone
                        log.info("replica at %s went away: %r", context.peer(), exc)
                        return
        except ServiceError as exc:  # an HAError, or a report that does not parse
            await context.abort(exc.code, str(exc))

    @answers_errors
    async def Status(
        self, request: ha_pb2.HAStatusRequest, context: grpc.aio.ServicerContext
    ) -> ha_pb2.HAStatus:
        """Role, offsets and replication state of this HA service."""
        return await self._node.status()
