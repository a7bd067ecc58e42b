"""The console served over HTTPS (``--https-cert``): its cookie is ``Secure``, every
answer carries the security headers, and a change without the CSRF token is refused.
The login form needs no cluster, so none is started: the registry address is unused."""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from boltmq.cli.dev import certificates
from boltmq.console.app import SECURITY_HEADERS
from boltmq.console.server import ConsoleServer, bind


@pytest.fixture
def https_console(tmp_path: Path) -> Iterator[tuple[ConsoleServer, ssl.SSLContext]]:
    files = certificates.generate(tmp_path / "tls", hosts=("127.0.0.1",))
    cert, key = files.component_files("registry")
    server = ConsoleServer(
        "127.0.0.1:1", bind("127.0.0.1", 0), certfile=str(cert), keyfile=str(key)
    ).start()
    trust = ssl.create_default_context(cafile=str(files.ca_file))
    try:
        yield server, trust
    finally:
        server.stop()


def test_https_sets_a_secure_strict_cookie_and_the_security_headers(
    https_console: tuple[ConsoleServer, ssl.SSLContext],
) -> None:
    server, trust = https_console
    assert server.url.startswith("https://127.0.0.1:")
    with urllib.request.urlopen(f"{server.url}/login", context=trust, timeout=30) as answer:
        assert answer.status == 200
        cookie = answer.headers["set-cookie"].lower()
        for name, value in SECURITY_HEADERS.items():
            assert answer.headers[name] == value
    assert cookie.startswith("boltmq_console=")
    assert "; secure" in cookie and "samesite=strict" in cookie and "httponly" in cookie
    forged = urllib.request.Request(
        f"{server.url}/login", data=b"access_key=a&secret_key=b&csrf=forged", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(forged, context=trust, timeout=30)
    assert refused.value.code == 403
    refused.value.close()  # the error holds the answer's connection
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP there
        urllib.request.urlopen(server.url.replace("https://", "http://") + "/login", timeout=30)


def test_a_stop_cuts_a_connection_whose_client_never_answers_the_tls_close(
    https_console: tuple[ConsoleServer, ssl.SSLContext],
) -> None:
    server, trust = https_console
    host, port = server.sock.getsockname()[:2]
    client = http.client.HTTPSConnection(host, port, context=trust, timeout=30)
    try:
        client.request("GET", "/login")
        assert client.getresponse().read()  # answered; the client keeps the connection idle
        assert client.sock is not None
        client_port = client.sock.getsockname()[1]

        def served() -> list[object]:
            return [
                c
                for c in psutil.Process().net_connections(kind="tcp")
                if c.laddr and c.laddr.port == port and c.raddr and c.raddr.port == client_port
            ]

        assert served()  # the console's end of it, in this process
        server.stop()
        assert served() == []  # closed with the console, not left to the garbage collector
    finally:
        client.close()
