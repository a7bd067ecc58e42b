"""The console's listening socket, bound before anything else of the web stack loads.

:func:`bind` opens it (port 0: any free one), so the address printed is the one
served; ``boltmq dev`` binds and prints at once and loads the console in a thread,
connections waiting in the socket's backlog meanwhile.
"""

from __future__ import annotations

import socket

BACKLOG = 128


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``; OSError when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket, *, https: bool) -> str:
    """``http(s)://host:port`` of a bound socket (an IPv6 host in brackets)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if https else 'http'}://{shown}:{port}"
