"""A store on a small tmpfs filled past its watermarks, with the real disk probe.

The store's root is a 16 MiB tmpfs mounted for the test (``mount -t tmpfs
-o size=16m``; root only). A ballast file fills it:

- past ``disk_space_warning_level_ratio``: the store refuses every write with
  SERVICE_NOT_AVAILABLE and a reason naming the disk, the producer gets a
  SendError saying so, and writes resume once the ballast is deleted;
- to the last byte with the watermarks off: the next segment cannot be
  created, sends fail with a status (never a crash), and writes resume after
  cleanup.

Either way every message acknowledged before, during and after is in the
CommitLog files exactly once (the independent reader) and
``boltmq store verify`` passes.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from boltmq import Message, Producer, ProducerOptions, SendError
from boltmq.message import SendResult, SendStatus
from tests.reliability.conftest import FaultCluster, check_files
from tests.reliability.load import WAIT_S, Ack
from tests.waiting import wait_until

TMPFS_BYTES = 16 * 1024 * 1024
SEGMENT_BYTES = 1024 * 1024
WARNING_RATIO = 80
TOPIC = "DiskFull"
BODY = b"x" * 2000
SMALL_STORE = (
    f"mapped_file_size_commitlog={SEGMENT_BYTES}",
    "clean_resource_interval_ms=100",
    "warm_mapped_file_ahead_bytes=0",
)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A mounted 16 MiB tmpfs, unmounted at the end."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path, to_percent: float) -> Path:
    """A ballast file that brings ``disk`` to ``to_percent`` used (100: every free byte)."""
    usage = shutil.disk_usage(disk)
    wanted = usage.total * to_percent / 100 - (usage.total - usage.free)
    ballast = disk / "ballast"
    with ballast.open("wb") as out:
        chunk = b"\xff" * (1 << 20)
        left = int(wanted)
        try:
            while left > 0:
                left -= out.write(chunk[: min(left, len(chunk))])
            out.flush()
        except OSError:  # ENOSPC: full is what was asked for
            pass
    return ballast


class Sender:
    """A producer that records acknowledgements and the last refusal."""

    def __init__(self, registry: str) -> None:
        self.producer = Producer(
            registry, "disk-full", options=ProducerOptions(retry_times=0)
        ).start()
        self.acked: dict[bytes, Ack] = {}
        self.refusals: list[str] = []
        self.sent = 0

    def send(self) -> SendResult | None:
        body = BODY + str(self.sent).encode()
        self.sent += 1
        try:
            result = self.producer.send(Message(TOPIC, body))
        except SendError as exc:
            self.refusals.append(str(exc))
            return None
        if result.status is SendStatus.SEND_OK:
            self.acked[body] = Ack(
                result.queue.queue_id, result.queue_offset, result.commitlog_offset
            )
        return result

    def send_until(self, accepted: bool, what: str) -> None:
        wait_until(lambda: (self.send() is not None) == accepted, what, WAIT_S)


@pytest.fixture
def on_disk(
    fault_cluster: Callable[..., FaultCluster], small_disk: Path
) -> Callable[..., FaultCluster]:
    """``on_disk(*store settings)``: a cluster whose store lives on the small tmpfs."""

    def factory(*settings: str) -> FaultCluster:
        return fault_cluster(
            flush="SYNC_FLUSH",
            root_dir=small_disk / "store",
            store_settings=(*SMALL_STORE, *settings),
        )

    return factory


def test_disk_past_the_warning_level_refuses_writes_clearly_loses_nothing_and_resumes(
    on_disk: Callable[..., FaultCluster], small_disk: Path
) -> None:
    # Deleting old segments would be data loss of its own: only refusing is tested here.
    cluster = on_disk(
        f"disk_space_warning_level_ratio={WARNING_RATIO}",
        "disk_max_used_space_ratio=100",
        "disk_space_clean_forcibly_ratio=100",
    )
    sender = Sender(cluster.registry.address)
    try:
        for _ in range(50):
            assert sender.send() is not None
        ballast = fill(small_disk, WARNING_RATIO + 8)
        sender.send_until(False, "the store refuses writes on a disk past the warning level")
        refusal = sender.refusals[-1]
        assert f"disk above {WARNING_RATIO}%" in refusal, refusal
        for _ in range(20):  # every send while full is refused, none half-stored
            assert sender.send() is None
        ballast.unlink()
        sender.send_until(True, "writes resume after the ballast is deleted")
        for _ in range(50):
            assert sender.send() is not None
    finally:
        sender.producer.shutdown()
    print(
        f"{len(sender.acked)} acknowledged, {len(sender.refusals)} refused: {sender.refusals[-1]}"
    )
    cluster.broker.stop()
    cluster.stop_store()
    check_files(cluster.root_dir, sender.acked)
    assert cluster.tracebacks() == []


def test_disk_full_to_the_last_byte_fails_sends_with_a_status_loses_nothing_and_resumes(
    on_disk: Callable[..., FaultCluster], small_disk: Path
) -> None:
    cluster = on_disk(
        "disk_space_warning_level_ratio=100",
        "disk_max_used_space_ratio=100",
        "disk_space_clean_forcibly_ratio=100",
    )
    sender = Sender(cluster.registry.address)
    try:
        for _ in range(20):
            assert sender.send() is not None
        ballast = fill(small_disk, 100)
        # The allocated segments take appends until they are used up; the next cannot be made.
        wait_until(
            lambda: sender.send() is None and sender.send() is None,
            "sends fail on a full disk",
            timeout_s=120,
            interval_s=0,  # each try sends: ~1,000 sends fill the segments
        )
        print(f"full disk: {sender.refusals[-1]}")
        assert cluster.store.alive() and cluster.broker.alive()
        ballast.unlink()
        sender.send_until(True, "writes resume after the ballast is deleted")
        for _ in range(50):
            assert sender.send() is not None
    finally:
        sender.producer.shutdown()
    cluster.broker.stop()
    cluster.stop_store()
    check_files(cluster.root_dir, sender.acked)
    assert cluster.tracebacks() == []
