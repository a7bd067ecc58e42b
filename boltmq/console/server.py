"""Running the console: uvicorn serving :class:`boltmq.console.app.Console` on a socket
bound beforehand (:mod:`boltmq.console.listener`), in the foreground (``boltmq
console``) or in a thread (``boltmq dev``, the benchmark).
"""

from __future__ import annotations

import asyncio
import socket
import threading

import uvicorn

from boltmq.console.app import Console
from boltmq.console.listener import bind, url_of

__all__ = ["ConsoleServer", "bind"]
from boltmq.console.sessions import Sessions
from boltmq.kernel.tls import ClientTLS


class ConsoleServer:
    """One console on one socket, for the cluster at ``registry``."""

    def __init__(
        self,
        registry: str,
        sock: socket.socket,
        *,
        tls: ClientTLS | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        watermarks: tuple[int, int] | None = None,
    ) -> None:
        self.sock = sock
        self.sessions = Sessions(registry, tls)
        extra = {"watermarks": watermarks} if watermarks else {}
        self.console = Console(self.sessions, secure_cookies=certfile is not None, **extra)
        config = uvicorn.Config(
            self.console.app,
            log_level="warning",
            ssl_certfile=certfile,
            ssl_keyfile=keyfile,
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self.url = url_of(sock, https=certfile is not None)

    def run(self) -> None:
        """Serve until SIGINT / SIGTERM (uvicorn's handlers), then close the sessions."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.sessions.close()

    def start(self) -> ConsoleServer:
        """Serve in a daemon thread (no signal handlers there)."""
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._serve(),), name="console", daemon=True
        )
        self._thread.start()
        return self

    async def _serve(self) -> None:
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            # A stop waits for no connection (force_exit): a response still in flight,
            # or a TLS close the client never answers, would outlive this loop with its
            # socket open. They are cut before the loop ends.
            for connection in list(self.server.server_state.connections):
                connection.transport.abort()
            await asyncio.sleep(0)  # the aborts close their sockets on this pass

    def stop(self) -> None:
        """Stop serving at once: open connections (a browser's keep-alive) are not awaited,
        they are cut."""
        self.server.should_exit = True
        self.server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sessions.close()
        self.sock.close()
