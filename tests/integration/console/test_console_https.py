"""The console served over HTTPS (``--https-cert``): its cookie is ``Secure``, every
answer carries the security headers, and a change without the CSRF token is refused.
The login form needs no cluster, so none is started: the registry address is unused."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

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
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP there
        urllib.request.urlopen(server.url.replace("https://", "http://") + "/login", timeout=30)
