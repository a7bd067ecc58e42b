"""Health and lifecycle of real service processes: readiness, liveness, SIGTERM under load.

- ``liveness`` is SERVING while the process runs; ``""`` (ready) only once a
  broker's registry took it; both turn NOT_SERVING when shutdown begins.
- SIGTERM while producers send: the broker answers its parked pull, persists
  the committed offsets and unregisters; the store flushes and exits cleanly;
  every acknowledged message is there after both restart.
- ``boltmq serve`` writes the log format its config names.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from boltmq import (
    Message,
    Producer,
    ProducerOptions,
    PullConsumer,
    PullError,
    PullResult,
    PullStatus,
    SendStatus,
)
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.registry_client import RegistryClient
from boltmq.kernel.runtime import LIVENESS_SERVICE
from tests.integration.conftest import CLUSTER_STORE_SETTINGS
from tests.integration.procs import REPO_ROOT, ServiceProcess
from tests.integration.test_metrics import free_port, scrape, value
from tests.waiting import wait_until

T = TypeVar("T")
DEADLINE_S = 30.0
"""Bound for anything asynchronous to show; tests pass as soon as it does."""
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
BROKER_SERVICE = "boltmq.v1.BrokerService"
TOPIC = "Lifecycle"
BROKER_SETTINGS = ("register_interval_ms=300", "offset_persist_interval_ms=600000")
"""Offsets are persisted only at shutdown here: a restarted broker knowing them proves it."""


def health(address: str, service: str) -> int:
    """The health status of ``service`` (UNKNOWN when the server cannot be reached)."""
    with sync_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            return int(
                stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
            )
        except grpc.RpcError:
            return int(health_pb2.HealthCheckResponse.UNKNOWN)


def answered(call: Callable[[], T]) -> T:
    """``call()``'s first answer: a channel reconnecting to a restarted peer fails fast first."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            return call()
        except PullError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def registered_brokers(registry: str) -> list[str]:
    with RegistryClient([registry]) as client:
        return [broker.address for broker in client.cluster_info().brokers]


# ------------------------------------------------------------------ readiness vs liveness
@pytest.fixture
def logs(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def unready_broker(
    tmp_path: Path, spawn: Callable[..., ServiceProcess], logs: Path
) -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    """A broker process pointed at a registry port nothing listens on yet (not waited for)."""
    store = spawn("store", f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS)
    port, registry_port = free_port(), free_port()
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    with (logs / "unready-broker.log").open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "boltmq.cli",
                "serve",
                "broker",
                "--port",
                str(port),
                "--set",
                f"store_address={store.address}",
                "--set",
                f"registry_addresses=127.0.0.1:{registry_port}",
                *(arg for setting in BROKER_SETTINGS for arg in ("--set", setting)),
            ],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            start_new_session=True,
        )
    yield proc, f"127.0.0.1:{port}", registry_port
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def test_a_broker_is_alive_at_once_but_ready_only_once_a_registry_took_it(
    unready_broker: tuple[subprocess.Popen[str], str, int], logs: Path
) -> None:
    proc, address, registry_port = unready_broker
    wait_until(lambda: health(address, LIVENESS_SERVICE) == SERVING, "liveness")
    assert health(address, "") == NOT_SERVING
    assert health(address, BROKER_SERVICE) == NOT_SERVING

    registry = ServiceProcess("registry", logs, port=registry_port).start()
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(f"READY broker 127.0.0.1:{address.split(':')[1]}")
        assert health(address, "") == SERVING and health(address, BROKER_SERVICE) == SERVING
        assert registered_brokers(registry.address) == [address]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(DEADLINE_S) == 0
        assert registered_brokers(registry.address) == []
    finally:
        registry.stop()


def test_sigterm_before_ready_still_stops_cleanly(
    unready_broker: tuple[subprocess.Popen[str], str, int],
) -> None:
    proc, address, _ = unready_broker
    wait_until(lambda: health(address, LIVENESS_SERVICE) == SERVING, "liveness")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(DEADLINE_S) == 0
    assert proc.stdout is not None and "READY" not in proc.stdout.read()


def test_health_watchers_see_not_serving_when_shutdown_begins(
    tmp_path: Path, spawn: Callable[..., ServiceProcess]
) -> None:
    store = spawn("store", f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS)
    seen: dict[str, list[int]] = {LIVENESS_SERVICE: [], "": []}
    channel = sync_channel(store.address)
    streams = [
        health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=name), timeout=DEADLINE_S
        )
        for name in seen
    ]

    ended: dict[str, object] = {}

    def follow(name: str, stream: grpc.Future) -> None:
        try:
            for answer in stream:
                seen[name].append(int(answer.status))
            ended[name] = stream.code()
        except grpc.RpcError as exc:
            ended[name] = exc  # the stream held the server's grace period and was cut

    threads = [
        threading.Thread(target=follow, args=(name, stream))
        for name, stream in zip(seen, streams, strict=True)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: all(seen.values()), "the first health answers")
    assert store.stop() == 0
    for thread in threads:
        thread.join(DEADLINE_S)
    channel.close()
    assert seen == {LIVENESS_SERVICE: [SERVING, NOT_SERVING], "": [SERVING, NOT_SERVING]}
    # Each watch was ended by the server once it had said NOT_SERVING: none held the
    # shutdown's grace period (boltmq/kernel/health_watches.py).
    assert ended == {LIVENESS_SERVICE: grpc.StatusCode.OK, "": grpc.StatusCode.OK}


# ------------------------------------------------------------------ SIGTERM under load
class Load:
    """A producer thread sending numbered batches until stopped; remembers what was acked."""

    def __init__(self, registry: str) -> None:
        self.producer = Producer(
            registry, options=ProducerOptions(send_timeout_ms=2_000, retry_times=1)
        ).start()
        self.acked: set[bytes] = set()
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load")
        self._next = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            bodies = [b"m-%d" % (self._next + i) for i in range(16)]
            self._next += len(bodies)
            try:
                results = self.producer.send_batch([Message(TOPIC, b) for b in bodies])
            except Exception:
                self.failures += 1  # the broker or store is going away: not acknowledged
                time.sleep(0.05)
                continue
            self.acked.update(
                b for b, r in zip(bodies, results, strict=True) if r.status is SendStatus.SEND_OK
            )

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(DEADLINE_S)
        self.producer.shutdown()

    def wait_for_more(self, count: int) -> None:
        goal = len(self.acked) + count
        wait_until(lambda: len(self.acked) >= goal, f"{count} more acknowledged messages")


def park_a_pull(registry: str, metrics_port: int) -> list[PullResult]:
    """A pull parked at the end of a queue nobody writes to; its answer lands in the list."""
    with Producer(registry) as producer:
        queue = producer.send(Message("Idle", b"only")).queue
    parked_before = value(scrape(metrics_port), "boltmq_broker_long_polls_parked")
    answers: list[PullResult] = []
    consumer = PullConsumer(registry, "idle-group")

    def pull() -> None:
        try:
            answers.append(consumer.pull(queue, 1, wait_ms=int(DEADLINE_S * 1000)))
        finally:
            consumer.shutdown()

    threading.Thread(target=pull, daemon=True).start()
    wait_until(
        lambda: value(scrape(metrics_port), "boltmq_broker_long_polls_parked") == parked_before + 1,
        "the pull to park",
    )
    return answers


def everything_stored(registry: str) -> set[bytes]:
    bodies: set[bytes] = set()
    with PullConsumer(registry, "reader") as reader:
        for queue in reader.queues(TOPIC):
            offset = 0
            while True:
                result = answered(functools.partial(reader.pull, queue, offset, 512))
                if result.status is not PullStatus.FOUND:
                    break
                bodies.update(m.body_bytes() for m in result.messages)
                offset = result.next_begin_offset
    return bodies


def test_sigterm_under_load_loses_nothing_acknowledged_and_unregisters(
    tmp_path: Path, logs: Path
) -> None:
    started: list[ServiceProcess] = []

    def launch(service: str, *settings: str, port: int = 0) -> ServiceProcess:
        proc = ServiceProcess(service, logs, *settings, port=port).start()
        started.append(proc)
        return proc

    registry = launch("registry")
    store = launch("store", f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS)
    metrics_port = free_port()
    broker_settings = (
        f"store_address={store.address}",
        f"registry_addresses={registry.address}",
        *BROKER_SETTINGS,
    )
    broker = launch("broker", *broker_settings, f"metrics_port={metrics_port}")
    try:
        with Load(registry.address) as load:
            load.wait_for_more(200)
            with PullConsumer(registry.address, "kept") as consumer:
                queue = consumer.queues(TOPIC)[0]
                consumer.commit(queue, 7)
                answers = park_a_pull(registry.address, metrics_port)
                assert broker.stop() == 0, broker.last_error()
                # The long poll in flight at SIGTERM was answered, not cut off.
                wait_until(lambda: answers, "the parked pull's answer")
                assert answers[0].status is PullStatus.NO_NEW_MSG
            assert registered_brokers(registry.address) == []  # gone before any expiry
            broker = launch("broker", *broker_settings, port=broker.port)
            with PullConsumer(registry.address, "kept") as consumer:
                # Answered once the client's channel has reconnected to the new broker.
                assert answered(lambda: consumer.committed(queue)) == 7  # persisted at stop

            load.wait_for_more(200)
            assert store.stop() == 0, store.last_error()
            assert not (tmp_path / "store" / "abort").exists()  # flushed, clean shutdown
            store = launch(
                "store", f"root_dir={tmp_path / 'store'}", *CLUSTER_STORE_SETTINGS, port=store.port
            )
            load.wait_for_more(200)
        assert "(clean shutdown before)" in store.log()
        missing = load.acked - everything_stored(registry.address)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {min(missing)!r}"
    finally:
        for proc in reversed(started):
            proc.stop()


# ------------------------------------------------------------------ logs
def test_serve_writes_the_log_format_its_config_names(spawn: Callable[..., ServiceProcess]) -> None:
    registry = spawn("registry", "log_format=json")
    registry.stop()
    records = [json.loads(line) for line in registry.log().splitlines()]
    assert {"timestamp", "level", "logger", "message"} <= set(records[0])
    assert any(r["message"].startswith("registry serving on") for r in records)
    assert any(r["message"] == "registry stopped" for r in records)
