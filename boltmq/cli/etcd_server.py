"""A local etcd for tests and benchmarks: Debian's ``etcd-server`` (``/usr/bin/etcd``)
on free loopback ports.

:class:`EtcdServer` starts one single-member etcd with its data in a temporary
directory, waits until it answers ``/health``, and stops it (SIGTERM, then
SIGKILL). ``stop`` and ``start`` again keep the data, so a test can take etcd
away from the services that use it and give it back. The HA controller's tests
use the ``etcd`` fixture of ``tests/conftest.py`` and ``python -m bench.failover``
starts one; ``make test`` installs the package when ``etcd`` is missing (``make etcd``).
``BOLTMQ_ETCD_BINARY`` names another binary. :meth:`EtcdServer.enable_auth` turns
etcd's authentication on, with one user allowed under one key prefix (the HA
controller's ``controller_username`` / ``controller_password_file``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

ETCD_BINARY = os.environ.get("BOLTMQ_ETCD_BINARY", "etcd")
START_WAIT_S = 20.0
STOP_WAIT_S = 10.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class EtcdServer:
    """One etcd process; ``endpoint`` is its ``host:port`` for clients."""

    def __init__(self, data_dir: Path) -> None:
        binary = shutil.which(ETCD_BINARY)
        if binary is None:
            raise RuntimeError(f"{ETCD_BINARY!r} not found: install Debian's etcd-server")
        self._binary = binary
        self._data_dir = data_dir
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self.endpoint = f"127.0.0.1:{self.client_port}"
        self._log = data_dir.with_suffix(".log")
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EtcdServer:
        """Start (or restart, with the same ports and data) and wait until it is healthy."""
        client_url = f"http://{self.endpoint}"
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        self._data_dir.parent.mkdir(parents=True, exist_ok=True)
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    self._binary,
                    "--name=test",
                    f"--data-dir={self._data_dir}",
                    f"--listen-client-urls={client_url}",
                    f"--advertise-client-urls={client_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=test={peer_url}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_WAIT_S
        while not self._healthy():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"etcd did not start; see {self._log}")
            time.sleep(0.05)
        return self

    def enable_auth(self, user: str, password: str, prefix: str) -> list[str]:
        """Turn authentication on as ``boltmq etcd-auth`` does (:mod:`boltmq.cli.etcd_auth`):
        ``user`` (with ``password``) may read and write the keys under ``prefix + "/"``
        and nothing else; ``root`` gets a random password nobody keeps. The changes made."""
        from boltmq.cli.etcd_auth import AuthSpec, turn_on

        spec = AuthSpec(secrets.token_urlsafe(24), user, password, prefix)
        return turn_on((self.endpoint,), spec)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as answer:
                return b'"true"' in answer.read()
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        """Stop the process (the data stays for a later ``start``)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
