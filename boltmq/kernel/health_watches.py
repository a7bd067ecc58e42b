"""The standard gRPC health service, whose Watch streams end when the server stops.

grpcio-health-checking's asyncio ``HealthServicer`` keeps every ``Watch`` stream
open until the client leaves: at shutdown it sends NOT_SERVING
(``enter_graceful_shutdown``) and the stream stays, so ``server.stop(grace)``
waits out the whole grace period for it. gRPC clients watch health themselves
(client-side health checking), so every process with such a client connected
took the full grace period to stop.

:class:`EndingHealthServicer` is that servicer with one addition:
:meth:`~EndingHealthServicer.end_watches`, called once shutdown began, waits
until each open watch has written its service's NOT_SERVING (a watch of a
service the server does not know, whose SERVICE_UNKNOWN never changes: its
first word), at most ``LAST_WORD_S``, and then ends it: the client reads
NOT_SERVING, then the end of the stream with status OK. A watch opened after
that ends after its first word. Check, Watch and the statuses are the
library's own.
"""

from __future__ import annotations

import asyncio
from typing import Any

from grpc_health.v1 import health, health_pb2

LAST_WORD_S = 1.0
"""How long a watch is given to write NOT_SERVING before it is ended."""
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class _Watch:
    """One open Watch: its task and the last status it wrote."""

    def __init__(self, service: str, context: Any) -> None:
        self.service = service
        self._context = context
        self.last_status: int | None = None
        self.wrote = asyncio.Event()
        self.task: asyncio.Future[None] | None = None

    async def write(self, response: health_pb2.HealthCheckResponse) -> None:
        await self._context.write(response)
        self.last_status = response.status
        self.wrote.set()

    def __getattr__(self, name: str) -> Any:  # the rest of the servicer context
        return getattr(self._context, name)


class EndingHealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
    """The library's health servicer; its watches end after NOT_SERVING (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._watches: set[_Watch] = set()
        self._ending = False
        self._known = {""}
        """Services with a status (the library starts with "")."""

    async def set(self, service: str, status: int) -> None:
        self._known.add(service)
        await super().set(service, status)

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:  # noqa: N802
        watch = _Watch(request.service, context)
        watch.task = asyncio.ensure_future(super().Watch(request, watch))
        self._watches.add(watch)
        ending = asyncio.ensure_future(self._end(watch)) if self._ending else None
        try:
            await watch.task
        except asyncio.CancelledError:
            if not (self._ending and watch.task.cancelled()):
                raise  # the call itself was cancelled (the client left)
        finally:
            self._watches.discard(watch)
            if ending is not None:
                await ending

    async def end_watches(self) -> None:
        """End every open watch once it said its last word (after
        ``enter_graceful_shutdown``); a watch opened from now on ends after its first."""
        self._ending = True
        await asyncio.gather(*(self._end(watch) for watch in list(self._watches)))

    async def _end(self, watch: _Watch) -> None:
        """End ``watch`` once it wrote NOT_SERVING (a service the server knows) or any
        status (another), or after :data:`LAST_WORD_S`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LAST_WORD_S
        known = watch.service in self._known
        while (watch.last_status != NOT_SERVING if known else watch.last_status is None) and (
            left := deadline - loop.time()
        ) > 0:
            watch.wrote.clear()
            try:
                async with asyncio.timeout(left):
                    await watch.wrote.wait()
            except TimeoutError:
                break
        if watch.task is not None:
            watch.task.cancel()
