"""What every system in the comparison provides, and how its server is run.

A :class:`Peer` starts its server on loopback in a temporary directory, makes
the topics of one round, and hands out clients: one :class:`ProducerClient`
per producer thread (or one that many sender threads share) and one
:class:`ConsumerClient` per consumer. The
workload (:mod:`bench.compare.workload`) only talks to these interfaces, so
every system runs exactly the same loop.

Servers are outside programs found on ``PATH``; a missing one is a
:class:`PeerUnavailable` naming the Debian package, which ``--install`` installs
with ``apt-get`` (root only).
"""

from __future__ import annotations

import importlib
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


class PeerUnavailable(RuntimeError):
    """A peer's server or client library is not installed (the message says how to get it)."""


class PeerFailed(RuntimeError):
    """A peer's server did not start or a client call failed."""


class ProducerClient(Protocol):
    """One producer's connection; every call returns once the server acknowledged."""

    def send_batch(self, topic: str, bodies: Sequence[bytes]) -> int:
        """Send ``bodies`` to ``topic`` in one batched/pipelined round; how many were acked."""

    def send_one(self, topic: str, body: bytes) -> int:
        """Send one body and wait for its acknowledgement; 1 if acked."""

    def close(self) -> None: ...


class ConsumerClient(Protocol):
    """One consumer of a fresh group over every topic of a round."""

    def poll(self) -> list[bytes]:
        """Bodies delivered since the last call (waits up to ~100 ms when there are none);
        delivered messages are acknowledged/committed as the system does it in batches."""

    def close(self) -> None: ...


class Peer(Protocol):
    """A system under test (see the module docstring)."""

    name: str
    durability: str
    """The durability setting used, as stated in the results."""
    topic_unit: str
    """What one topic is in this system (stream, subject, topic)."""

    def start(self, workdir: Path) -> None: ...

    def stop(self) -> None: ...

    def create_topics(self, round_name: str, count: int) -> list[str]:
        """Make ``count`` topics for one round (each holds one warm-up message); their names."""

    def producer(self, topics: Sequence[str]) -> ProducerClient:
        """A producer that will send to ``topics``, ready before the timed run starts
        (BoltMQ's fetches their routes in one registry call; the others connect)."""

    def shared_producer(self, topics: Sequence[str]) -> ProducerClient:
        """A producer whose ``send_one`` many threads call at once (the
        ``concurrent-sends`` run), made as :meth:`producer`."""

    def consumer(self, topics: Sequence[str], from_start: bool) -> ConsumerClient:
        """A consumer of a new group: from the first message, or only new ones."""


def require_binary(program: str, package: str, install: bool) -> str:
    """The path of ``program``; with ``install``, apt-get installs ``package`` first."""
    found = shutil.which(program)
    if found is None and install:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", package], check=False, stdout=subprocess.DEVNULL
        )
        found = shutil.which(program)
    if found is None:
        raise PeerUnavailable(
            f"{program} not found: apt-get install -y {package} (or run with --install as root)"
        )
    return found


def client_library(module: str, package: str) -> Any:
    """Import a peer's client ``module``; PeerUnavailable naming the pip ``package``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise PeerUnavailable(f"{package} is missing: pip install -e '.[bench]'") from None


def start_server(args: Sequence[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """Start a server whose output goes to ``log``; return once ``port`` accepts."""
    proc = subprocess.Popen(list(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(proc, port, log)
    return proc


def free_port() -> int:
    """A port nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(
    proc: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float = START_TIMEOUT_S
) -> None:
    """Return once ``port`` accepts connections; PeerFailed if the process exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    stop_process(proc)
    tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
    raise PeerFailed(f"server on port {port} did not start: {' / '.join(tail) or 'no output'}")


def stop_process(proc: subprocess.Popen[bytes] | None) -> int | None:
    """SIGTERM, then SIGKILL after ``STOP_TIMEOUT_S``; the exit code."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
