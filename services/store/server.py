"""The StoreService gRPC server: one MessageStore behind ``boltmq.v1.StoreService``.

``boltmq serve store`` calls :func:`serve`. The port is bound first (a busy
port fails before a long recovery and before the root is locked), then the
store starts and recovers while health says NOT_SERVING, then it is SERVING
and ``READY store host:port`` is printed (:mod:`boltmq.kernel.runtime`). On SIGTERM
the server drains its RPCs, then the store flushes, writes its checkpoint and
removes its abort file: the next start is a clean one.

:func:`create_server` is the in-process form (tests, an embedded cluster).
"""

from __future__ import annotations

import asyncio
import logging

import grpc

from boltmq.kernel import runtime, tls
from boltmq.kernel.caller_gate import caller_gate
from boltmq.kernel.internal_gate import internal_gate
from boltmq.v1 import store_pb2, store_pb2_grpc
from services.store.config import StoreConfig
from services.store.internal_callers import STORE_CALLERS
from services.store.servicer import StoreServicer
from services.store.store import MessageStore

log = logging.getLogger(__name__)

CONFIG_CLASS = StoreConfig
"""The config dataclass ``boltmq serve store`` loads."""
SERVICE_NAME: str = store_pb2.DESCRIPTOR.services_by_name["StoreService"].full_name
"""``boltmq.v1.StoreService``, for health and reflection."""


class StoreService:
    """The store as a :class:`boltmq.kernel.runtime.Service`: the servicer over one MessageStore.

    With ``store`` given, the caller owns its life (start before, shut down
    after); otherwise the service opens one on ``config.root_dir`` and starts
    and shuts it down itself.
    """

    name: str = "store"
    service_names: tuple[str, ...] = (SERVICE_NAME,)

    def __init__(self, config: StoreConfig, store: MessageStore | None = None) -> None:
        gate = internal_gate(config, SERVICE_NAME, STORE_CALLERS)
        limits = caller_gate(config, SERVICE_NAME, "store", gate)
        self.interceptors = tuple(i for i in (limits, gate) if i is not None)
        """Each caller's rate and in-flight limits, then: only its group's broker and HA
        service may call (under TLS; STORE_CALLERS)."""
        self.config = config
        self.owns_store = store is None
        self.store = store if store is not None else MessageStore(config)
        self.servicer = StoreServicer(self.store, config)

    def add_to(self, server: grpc.aio.Server) -> None:
        """Register the servicer on ``server``; the pulls answer bytes they encoded."""
        store_pb2_grpc.add_StoreServiceServicer_to_server(self.servicer, server)
        runtime.answer_encoded(
            server, SERVICE_NAME, "Pull", self.servicer.Pull, store_pb2.PullRequest.FromString
        )
        runtime.answer_encoded(
            server,
            SERVICE_NAME,
            "PullQueues",
            self.servicer.PullQueues,
            store_pb2.PullQueuesRequest.FromString,
        )

    async def start(self) -> None:
        """Lock the root and recover (in a thread: recovery reads whole segments)."""
        if not self.owns_store or self.store.running:
            return
        report = await asyncio.to_thread(self.store.start)
        log.info(
            "store recovered (%s shutdown before): CommitLog %d..%d, %d note(s); "
            "checked from %d, re-dispatched from %d",
            "clean" if report.clean else "unclean",
            self.store.commitlog.min_offset,
            report.commitlog_max_offset,
            len(report.notes),
            report.start_offset,
            report.reput_offset,
        )

    async def before_stop(self) -> None:
        """End WatchArrivals and following reads: clients reconnect elsewhere or later."""
        self.servicer.end_streams()

    async def stop(self) -> None:
        """Flush, checkpoint, remove the abort file and unlock (after the server stopped)."""
        self.servicer.close()
        if self.owns_store:
            # Shielded, so an event loop that cancels its tasks as it ends (asyncio.run)
            # cannot drop the queued shutdown; closing the default executor then
            # waits for it. A plain to_thread here left the abort file behind.
            loop = asyncio.get_running_loop()
            await asyncio.shield(loop.run_in_executor(None, self.store.shutdown))


async def create_server(
    config: StoreConfig, store: MessageStore | None = None
) -> tuple[grpc.aio.Server, int]:
    """A store server bound to ``listen_host:listen_port``, SERVING, not yet started.

    Without ``store``, one is opened on ``config.root_dir`` and started here,
    and ``server.stop()`` shuts it down too. With ``store``, the caller starts
    it before and shuts it down after the server.
    """
    return await runtime.create_configured(
        StoreService(config, store), config.listen_host, config.listen_port, config
    )


async def serve(config: StoreConfig) -> None:
    """Run one store until SIGTERM/SIGINT (``boltmq serve store``)."""
    server_tls = tls.server_tls(config)  # a bad file fails before the store is opened
    service = StoreService(config)
    try:
        await runtime.serve(
            service,
            config.listen_host,
            config.listen_port,
            grace_s=config.shutdown_grace_ms / 1000,
            tls=server_tls,
            health_port=config.health_port,
            health_host=config.health_host,
            reflection_on=config.reflection,
        )
    finally:
        # runtime.serve stops the service after a signal; this covers the paths
        # where it raises first (shutdown is idempotent).
        await asyncio.to_thread(service.store.shutdown)
