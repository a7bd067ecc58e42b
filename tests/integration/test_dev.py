"""``boltmq dev``: the local cluster a developer starts with ``make run``.

The command runs as a real process on free ports (``--*-port 0``); the test
reads the endpoints it prints, produces and consumes through them, and stops
it with a signal the way a terminal or a supervisor would.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import mqtt5
import pytest

from boltmq import (
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    PushConsumerOptions,
    ReceivedMessage,
)
from tests.integration.procs import REPO_ROOT

START_DEADLINE_S = 60.0
"""Bound on the three services coming up; the test goes on as soon as they do."""
STOP_TIMEOUT_S = 60.0
DEADLINE_S = 30.0
READY_LINE = "press Ctrl-C to stop"


class Dev:
    """One ``python -m boltmq.cli dev`` process and the endpoints it printed."""

    def __init__(self, data_dir: Path, *flags: str) -> None:
        self.data_dir = data_dir
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "boltmq.cli",
                "dev",
                "--data-dir",
                str(data_dir),
                "--registry-port",
                "0",
                "--store-port",
                "0",
                "--broker-port",
                "0",
                "--console-port",
                "0",
                "--mqtt-port",
                "0",
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.banner: list[str] = []
        self.groups: dict[str, dict[str, str]] = {}
        """Each group's master endpoints (store, broker, ha) as the banner printed them."""

    def wait_ready(self) -> dict[str, str]:
        """Read the banner up to READY_LINE; the endpoints by service name."""
        assert self.proc.stdout is not None
        # A thread reads, since select() cannot see lines already in the text buffer.
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(
            target=_read_lines, args=(self.proc.stdout, lines, READY_LINE), daemon=True
        ).start()
        deadline = time.monotonic() + START_DEADLINE_S
        while READY_LINE not in self.banner:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"dev never became ready: {self.banner}") from None
            assert line is not None, f"dev exited: {self.banner} {self.proc.stderr.read()}"  # type: ignore
            self.banner.append(line)
        self.groups = {
            m.group(1): dict(re.findall(r"(store|broker|ha) (\S+:\d+)", line))
            for line in self.banner
            if (m := re.match(r"(broker-[a-z])\s+master\s", line))
        }
        registry = next(line.split()[1] for line in self.banner if line.startswith("registry "))
        first = self.groups["broker-a"]
        return {"registry": registry, "store": first["store"], "broker": first["broker"]}

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        """Send ``sig``; the exit code and the rest of stdout and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=STOP_TIMEOUT_S)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        """Clean-up after a failed test: SIGTERM (dev stops its services), then SIGKILL.

        Not SIGKILL first: the services run in sessions of their own, so killing
        dev's process group would leave them running.
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


def _read_lines(stream: IO[str], into: queue.Queue[str | None], last: str) -> None:
    """Banner lines up to ``last`` (the rest stays for communicate()); None at EOF."""
    for raw in iter(stream.readline, ""):
        line = raw.rstrip("\n")
        into.put(line)
        if line == last:
            return
    into.put(None)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    started = Dev(tmp_path / "data")
    yield started
    started.kill()  # only if a failed test left it running


def refuses_connections(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
    except OSError:
        return True
    return False


def consume(registry: str, topic: str, group: str, count: int) -> list[bytes]:
    got: list[bytes] = []

    def listener(messages: list[ReceivedMessage]) -> ConsumeResult:
        got.extend(bytes(m.body) for m in messages)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        registry,
        group,
        {topic: "*"},
        listener,
        options=PushConsumerOptions(
            rebalance_interval_ms=300, long_poll_ms=1_000, commit_interval_ms=200
        ),
    )
    consumer.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < count:
            assert time.monotonic() < deadline, f"consumed only {got}"
            time.sleep(0.05)
    finally:
        consumer.shutdown()
    return got


def test_dev_runs_a_cluster_and_stops_it_cleanly(dev: Dev) -> None:
    endpoints = dev.wait_ready()
    assert set(endpoints) == {"registry", "store", "broker"}
    assert any(line.startswith("logs ") for line in dev.banner)
    registry = endpoints["registry"]
    assert (dev.data_dir / "store" / "abort").exists()  # a running store marks its directory

    with Producer(registry, "dev-pg") as producer:
        sent = [
            producer.send(Message(topic="DevTopic", body=f"m{i}".encode(), tags="A"))
            for i in range(10)
        ]
    assert len({r.msg_id for r in sent}) == 10
    mqtt_host, mqtt_port = next(
        line.split()[1] for line in dev.banner if line.startswith("mqtt ")
    ).rsplit(":", 1)
    with socket.create_connection((mqtt_host, int(mqtt_port)), timeout=DEADLINE_S) as device:
        device.sendall(mqtt5.ConnectPacket("dev-device").write())
        connack, _ = mqtt5.read(memoryview(device.recv(4096)))  # the gateway answers
        assert isinstance(connack, mqtt5.ConnAckPacket) and int(connack.reason_code) == 0
    assert sorted(consume(registry, "DevTopic", "dev-cg", 10)) == sorted(
        f"m{i}".encode() for i in range(10)
    )
    # The web console beside it: the ACL is off, so its pages need no login.
    console = console_url(dev)
    topics_page = urllib.request.urlopen(f"{console}/topics", timeout=30).read().decode()
    assert 'href="/topics/DevTopic"' in topics_page
    group_page = urllib.request.urlopen(f"{console}/groups/dev-cg", timeout=30).read().decode()
    assert "DevTopic" in group_page and 'id="reset"' in group_page

    # A second cluster on the same data directory is refused while the first runs.
    second = Dev(dev.data_dir)
    try:
        out, err = second.proc.communicate(timeout=START_DEADLINE_S)
    finally:
        second.kill()  # only if it wrongly kept running
    code = second.proc.returncode
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and READY_LINE not in out
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "in use" in lines[0] and lines[0].count("Error") == 1 and "Traceback" not in err
    assert dev.proc.poll() is None, "the first cluster died"

    code, out, err = dev.stop(signal.SIGTERM)
    assert code == 0, err
    assert out.strip().splitlines()[-1] == "cluster stopped cleanly"
    assert not (dev.data_dir / "store" / "abort").exists(), "the store did not shut down cleanly"
    assert all(refuses_connections(address) for address in endpoints.values())
    assert refuses_connections(console.removeprefix("http://"))

    # Ctrl-C on a restarted cluster: the data of the first run is still there.
    again = Dev(dev.data_dir)
    try:
        registry = again.wait_ready()["registry"]
        assert sorted(consume(registry, "DevTopic", "dev-later", 10)) == sorted(
            f"m{i}".encode() for i in range(10)
        )
        code, out, err = again.stop(signal.SIGINT)
        assert code == 0 and "cluster stopped cleanly" in out, err
    finally:
        again.kill()
    assert not (dev.data_dir / "store" / "abort").exists()


def console_url(dev: Dev) -> str:
    """The web console's address from dev's banner."""
    return next(line.split()[1] for line in dev.banner if line.startswith("console "))


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "boltmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_dev_with_tls_and_acl_runs_the_way_production_does(tmp_path: Path) -> None:
    """``--tls --acl``: mutual TLS everywhere and a broker that refuses unsigned calls; the
    banner says where the application's certificate and the admin's secret are, and never
    prints the secret."""
    dev = Dev(tmp_path / "data", "--tls", "--acl")
    try:
        registry = dev.wait_ready()["registry"]
        secret_file = dev.data_dir / "acl" / "admin.secret"
        secret = secret_file.read_text().strip()
        assert secret_file.stat().st_mode & 0o077 == 0
        assert (dev.data_dir / "acl" / "plain_acl.json").stat().st_mode & 0o077 == 0
        assert not [line for line in dev.banner if secret in line]
        acl_line = next(line for line in dev.banner if line.startswith("ACL on: "))
        # the console reaches the TLS cluster and, the ACL being on, asks for a login
        with urllib.request.urlopen(f"{console_url(dev)}/topics", timeout=30) as answer:
            assert answer.url.endswith("/login") and b'name="secret_key"' in answer.read()
        assert f"BOLTMQ_SECRET_KEY=$(cat {secret_file})" in acl_line
        try_line = next(line for line in dev.banner if line.startswith("try: "))
        tls = re.findall(r"(--tls-(?:ca|cert|key)) (\S+)", try_line)
        assert [flag for flag, _ in tls] == ["--tls-ca", "--tls-cert", "--tls-key"]
        flags = [part for pair in tls for part in pair]
        produce = ["produce", "--registry", registry, *flags, "--topic", "Secured", "--body", "x"]
        base = {k: v for k, v in os.environ.items() if not k.startswith("BOLTMQ_")}
        base.update(PYTHONPATH=str(REPO_ROOT))

        signed = _cli(
            *produce, env=dict(base, BOLTMQ_ACCESS_KEY="dev-admin", BOLTMQ_SECRET_KEY=secret)
        )
        assert signed.returncode == 0, signed.stderr
        unsigned = _cli(*produce, env=base)
        assert unsigned.returncode != 0
        assert "UNAUTHENTICATED" in unsigned.stderr + unsigned.stdout
        plaintext = _cli(
            "produce", "--registry", registry, "--topic", "Secured", "--body", "x", env=base
        )
        assert plaintext.returncode != 0 and "Traceback" not in plaintext.stderr

        code, _, err = dev.stop(signal.SIGTERM)
        assert code == 0, err
    finally:
        dev.kill()
