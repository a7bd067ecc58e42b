"""StoreChannel: the part every client of the StoreService shares.

The broker and the HA service each talk to their store with deadlines and
their own named errors; the channel, the stub and the call wrapper are the
same, so they live here once. A subclass says how a failed call becomes one
of its errors (:meth:`StoreChannel.translate`).
"""

from __future__ import annotations

from typing import Any

import grpc

from boltmq.kernel.channels import channel
from boltmq.kernel.in_process import InProcessChannel
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import store_pb2_grpc


class StoreChannel:
    """Typed, deadline-bound calls to the StoreService at ``address``."""

    def __init__(self, address: str, timeout_ms: int, tls: ClientTLS | None = None) -> None:
        self.address = address
        self._timeout_s = timeout_ms / 1000
        self._channel = channel(address, tls)
        self.in_process = isinstance(self._channel, InProcessChannel)
        """The store is served by this process (:mod:`boltmq.kernel.in_process`)."""
        self._stub = store_pb2_grpc.StoreServiceStub(self._channel)

    async def close(self) -> None:
        """Close the channel (pending calls fail)."""
        await self._channel.close()

    def translate(self, method: str, exc: grpc.aio.AioRpcError) -> Exception:
        """The caller's named error for a failed store call."""
        raise NotImplementedError

    async def _call(self, method: str, request: Any, *, wait_for_ready: bool = False) -> Any:
        return await self._call_on(
            getattr(self._stub, method), method, request, wait_for_ready=wait_for_ready
        )

    async def _call_on(
        self,
        call: grpc.aio.UnaryUnaryMultiCallable,
        method: str,
        request: Any,
        *,
        wait_for_ready: bool = False,
    ) -> Any:
        """``call(request)`` with the deadline; a failure becomes the caller's error."""
        try:
            return await call(request, timeout=self._timeout_s, wait_for_ready=wait_for_ready)
        except grpc.aio.AioRpcError as exc:
            raise self.translate(method, exc) from None
