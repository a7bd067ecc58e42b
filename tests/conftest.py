"""Shared fixtures: small real stores in tmp_path."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from boltmq.cli.etcd_server import EtcdServer
from boltmq.kernel.config import ENV_PREFIX
from services.store import GetStatus, MessageStore, StoreConfig

READ_BATCH = 32

DISK_RATIOS_OFF: dict[str, int] = dict(
    disk_max_used_space_ratio=100,
    disk_space_clean_forcibly_ratio=100,
    disk_space_warning_level_ratio=100,
)
"""Disk watermarks no usage can pass. How full the test machine's disk is (a shared
disk may sit above 85 % before the suite writes a byte) must not decide a test that
is not about the disk: above the forced ratio the cleaner deletes segments the test
wrote, above the warning ratio every write is refused. Tests of the watermarks set
their own ratios and a probe."""
DISK_RATIOS_OFF_SETTINGS: tuple[str, ...] = tuple(f"{k}={v}" for k, v in DISK_RATIOS_OFF.items())
"""The same, as ``key=value`` settings for a spawned store process."""


@pytest.fixture(autouse=True, scope="session")
def disk_ratios_off_in_spawned_stores() -> Iterator[None]:
    """Every store process a test starts (``boltmq serve store``, ``boltmq dev``) reads
    :data:`DISK_RATIOS_OFF` from its ``BOLTMQ_*`` environment; a ``--set`` on its
    command line still wins, so the watermark tests choose their own."""
    names = [ENV_PREFIX + name.upper() for name in DISK_RATIOS_OFF]
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({ENV_PREFIX + k.upper(): str(v) for k, v in DISK_RATIOS_OFF.items()})
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def small_config(root: Path, **overrides: object) -> StoreConfig:
    """The small test geometry: 64 KiB segments, 1000-entry queues, tiny index, no disk
    watermarks (:data:`DISK_RATIOS_OFF`)."""
    values: dict[str, object] = dict(
        **DISK_RATIOS_OFF,
        root_dir=root,
        mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=1000 * 20,
        max_hash_slot_num=1000,
        max_index_num=4000,
        flush_disk_type="ASYNC_FLUSH",
        max_message_size_bytes=48 * 1024,
    )
    values.update(overrides)
    return StoreConfig(**values)  # type: ignore[arg-type]


def quiet_disk(path: Path) -> float:
    """A disk-usage probe for tests that are not about the disk: always 10 %."""
    return 10.0


def read_queue(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int, bytes]]:
    """``(queue_offset, commitlog_offset, body)`` of every message the queue serves, in order."""
    out: list[tuple[int, int, bytes]] = []
    offset = store.min_offset(topic, queue_id)
    while True:
        got = store.get_messages(topic, queue_id, offset, READ_BATCH)
        if got.status != GetStatus.FOUND:
            break
        out.extend((m.queue_offset, m.commitlog_offset, bytes(m.body)) for m in got.messages)
        offset = got.next_begin_offset
    return out


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """Factory of started stores on ``tmp_path/store``; all are shut down at the end."""
    stores: list[MessageStore] = []

    def factory(root: Path | None = None, **overrides: object) -> MessageStore:
        # The machine's real disk usage must not decide a test's outcome: on a
        # disk above 75 % the cleaner would delete segments the test wrote.
        store = MessageStore(
            small_config(root or tmp_path / "store", **overrides), disk_usage=quiet_disk
        )
        store.start()
        stores.append(store)
        return store

    yield factory
    for store in stores:
        store.shutdown()


@pytest.fixture
def span_exporter() -> Iterator[InMemorySpanExporter]:
    """This process traced into memory: a global SDK tracer provider for the test only.

    The API lets a process set its provider once; the test puts the API's
    globals back afterwards (the same two names OpenTelemetry's own test
    utilities reset), so later tests run untraced, as a user's process would.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.util._once import Once

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real single-member etcd on free loopback ports, its data in ``tmp_path``."""
    server = EtcdServer(tmp_path / "etcd").start()
    try:
        yield server
    finally:
        server.stop()


LOG_TAIL_LINES = 80
"""How much of each service log a failing test's report shows."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """A failing test's report ends with the tail of every service log in its ``tmp_path``.

    Integration tests start real services whose stderr goes to ``*.log`` files there;
    when a CI run fails on another machine those files are gone, and the report is
    all that explains a timeout ("the replica to catch up") from the services' side.
    """
    report = yield
    funcargs = getattr(item, "funcargs", {})
    tmp_path = funcargs.get("tmp_path")
    if report.failed and report.when == "call" and isinstance(tmp_path, Path):
        for log_file in sorted(tmp_path.rglob("*.log")):
            lines = log_file.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            if lines:
                name = log_file.relative_to(tmp_path)
                report.sections.append((f"service log {name}", "\n".join(lines)))
    return report
