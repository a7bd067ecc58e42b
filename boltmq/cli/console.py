"""``boltmq console``: the web console for a cluster given by its registries.

Serves :mod:`boltmq.console` on ``--host`` (127.0.0.1) and ``--port`` (8080; 0:
any free port, printed). The console has no account of its own: with the
brokers' ACL on, operators log in with theirs and every call is signed with
it; ``--access-key`` / ``--secret-key`` are refused here for that reason.
``--tls-ca`` / ``--tls-cert`` / ``--tls-key`` are how it reaches TLS clusters
(as every client command), ``--https-cert`` / ``--https-key`` serve the
console itself over TLS (cookies then ``Secure``). docs/console.md.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import click

from boltmq.cli.messages import fail, registry_option
from boltmq.cli.security import client_tls, credentials
from boltmq.kernel.tls import ClientTLS

DEFAULT_PORT = 8080


class BackgroundConsole:
    """A console of ``boltmq dev``: its socket bound (and ``url`` known) at once, the web
    stack loaded and served in a thread, so the cluster's start does not wait for it
    (connections wait in the socket's backlog meanwhile)."""

    def __init__(self, registry: str, host: str, port: int, tls: ClientTLS | None) -> None:
        from boltmq.console.listener import bind, url_of

        try:
            self.sock = bind(host, port)
        except OSError as exc:
            raise fail(f"console: cannot listen on {host}:{port}: {exc}") from None
        self.url = url_of(self.sock, https=False)
        self._server: Any = None
        self._loader = threading.Thread(
            target=self._load, args=(registry, tls), name="console-load", daemon=True
        )
        self._loader.start()

    def _load(self, registry: str, tls: ClientTLS | None) -> None:
        from boltmq.console.server import ConsoleServer

        self._server = ConsoleServer(registry, self.sock, tls=tls).start()

    def stop(self) -> None:
        self._loader.join(timeout=60)
        if self._server is not None:
            self._server.stop()
        self.sock.close()


@click.command()
@registry_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--https-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Serve HTTPS with this certificate (PEM); session cookies become Secure.",
)
@click.option(
    "--https-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The private key of --https-cert (PEM).",
)
@click.option(
    "--clean-watermark",
    default=75,
    show_default=True,
    type=click.IntRange(1, 100),
    help="The stores' disk_max_used_space_ratio, shown beside disk use.",
)
@click.option(
    "--force-clean-watermark",
    default=85,
    show_default=True,
    type=click.IntRange(1, 100),
    help="The stores' disk_space_clean_forcibly_ratio, shown beside disk use.",
)
def console(
    registry: str,
    host: str,
    port: int,
    https_cert: Path | None,
    https_key: Path | None,
    clean_watermark: int,
    force_clean_watermark: int,
) -> None:
    """Serve the web console for the cluster at --registry until Ctrl-C."""
    from boltmq.console.server import ConsoleServer, bind

    if credentials() is not None:
        raise fail(
            "the console has no account of its own: operators log in with theirs "
            "(unset BOLTMQ_ACCESS_KEY / BOLTMQ_SECRET_KEY, drop --access-key / --secret-key)"
        )
    if (https_cert is None) != (https_key is None):
        raise fail("--https-cert and --https-key go together")
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise fail(f"cannot listen on {host}:{port}: {exc}") from None
    server = ConsoleServer(
        registry,
        sock,
        tls=client_tls(),
        certfile=str(https_cert) if https_cert else None,
        keyfile=str(https_key) if https_key else None,
        watermarks=(clean_watermark, force_clean_watermark),
    )
    click.echo(f"console   {server.url}  (cluster at {registry})", err=False)
    server.run()
