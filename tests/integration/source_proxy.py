"""SourceProxy: a TCP forwarder whose connections leave from another loopback address.

A test's clients all connect from 127.0.0.1, so a server that keys callers by
IP address sees one caller. gRPC's Python channels cannot pick their source
address; this forwarder listens on 127.0.0.1 and opens each upstream
connection from ``source`` (e.g. ``127.0.0.2``: Linux routes all of 127/8 to
the loopback interface), so a client dialing ``proxy.address`` reaches the
real server as a second machine would. Bytes pass unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class SourceProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (``host:port``) from ``source``."""

    def __init__(self, target: str, source: str = "127.0.0.2") -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._source = source
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        """What clients dial instead of ``target``."""
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.socket()
            upstream.bind((self._source, 0))
            try:
                upstream.connect(self._target)
            except OSError:
                downstream.close()
                upstream.close()
                continue
            with self._lock:
                self._sockets += [downstream, upstream]
            for a, b in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(reader: socket.socket, writer: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := reader.recv(65536):
                writer.sendall(data)
        with contextlib.suppress(OSError):
            writer.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Stop listening and drop every forwarded connection."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def __enter__(self) -> SourceProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
