"""``boltmq store inspect|verify`` and ``boltmq dev`` on real store directories.

Stores are built with the ``make_store`` fixture (64 KiB segments), written
to, shut down, and then looked at through the CLI: in-process with click's
CliRunner, and as real ``python -m boltmq.cli`` subprocesses.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import boltmq.cli.inspect_store as inspect_store
from boltmq.cli.inspect_store import inspect_directory
from boltmq.cli.main import main
from services.store import MessageStore, PutStatus, StoreMessage
from services.store.consume_queue import ENTRY_COMMITLOG_OFFSET_OFFSET, ENTRY_SIZE

REPO_ROOT = Path(__file__).resolve().parents[3]
BODY_BYTES = 2000  # about 30 records per 64 KiB segment
TOPIC_A_QUEUES = 3
TOPIC_A_MESSAGES = 90
TOPIC_B_MESSAGES = 20
SUBPROCESS_TIMEOUT_S = 60
DEV_READY_TIMEOUT_S = 30


@dataclass
class Written:
    """What a test wrote, in CommitLog order."""

    root: Path
    # (topic, queue_id, body, commitlog_offset, size) per message
    messages: list[tuple[str, int, bytes, int, int]]

    @property
    def end_offset(self) -> int:
        _, _, _, offset, size = self.messages[-1]
        return offset + size


def _body(i: int) -> bytes:
    return f"msg-{i:04d}|".encode() + bytes([65 + i % 26]) * (BODY_BYTES - 9)


def _fill(store: MessageStore) -> list[tuple[str, int, bytes, int, int]]:
    written = []
    for i in range(TOPIC_A_MESSAGES + TOPIC_B_MESSAGES):
        if i < TOPIC_A_MESSAGES:
            topic, queue_id = "TopicA", i % TOPIC_A_QUEUES
        else:
            topic, queue_id = "TopicB", 0
        body = _body(i)
        result = store.put_message(
            StoreMessage(topic, body, queue_id=queue_id, tags=f"tag{i % 2}", keys=[f"key-{i}"])
        )
        assert result.status == PutStatus.PUT_OK, result
        written.append((topic, queue_id, body, result.commitlog_offset, result.wrote_bytes))
    return written


@pytest.fixture
def written(make_store: Callable[..., MessageStore], tmp_path: Path) -> Written:
    """A shut-down store with several segments, four queues and keyed messages."""
    root = tmp_path / "store"
    store = make_store(root)
    messages = _fill(store)
    store.shutdown()
    return Written(root, messages)


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOLTMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "boltmq.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )


def _assert_one_line_error(exit_code: int, stdout: str, stderr: str, *fragments: str) -> None:
    """A non-zero exit, nothing on stdout, and a single clear ``Error:`` line."""
    assert exit_code != 0
    assert "Traceback" not in stdout + stderr
    assert stdout == ""
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, stderr
    for fragment in fragments:
        assert fragment in errors[0], stderr


def _snapshot(root: Path) -> dict[str, bytes]:
    # Pre-allocated ``.tmp`` segments are left out: loading a segment list
    # (MappedFileQueue.load, used by open_offline) deletes them.
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".tmp")
    }


# ------------------------------------------------------------------ inspect
def test_inspect_shows_segments_queues_and_index(written: Written) -> None:
    result = _invoke("store", "inspect", str(written.root))

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"store {written.root.resolve()}"
    segment_count = written.end_offset // (64 * 1024) + 1
    assert segment_count >= 3
    assert (
        f"commitlog: {segment_count} segments of 65536 bytes, min offset 0, "
        f"max offset {written.end_offset}"
    ) in lines
    segment_lines = [line for line in lines if line.startswith("  segment ")]
    assert len(segment_lines) == segment_count
    assert segment_lines[0] == "  segment 00000000000000000000: 65536 data bytes"
    last_start = (segment_count - 1) * 64 * 1024
    assert segment_lines[-1] == (
        f"  segment {last_start:020d}: {written.end_offset - last_start} data bytes"
    )
    assert "abort file: absent (clean shutdown)" in lines
    checkpoint = next(line for line in lines if line.startswith("checkpoint:"))
    assert "missing" not in checkpoint and "corrupt" not in checkpoint
    assert "physic 20" in checkpoint  # an ISO timestamp of this century, not "none"

    assert "consume queues: 4" in lines
    per_queue = TOPIC_A_MESSAGES // TOPIC_A_QUEUES
    for queue_id in range(TOPIC_A_QUEUES):
        assert (
            f"  TopicA/{queue_id}: queue offsets 0..{per_queue} ({per_queue} entries), 1 files"
        ) in lines
    assert (
        f"  TopicB/0: queue offsets 0..{TOPIC_B_MESSAGES} ({TOPIC_B_MESSAGES} entries), 1 files"
    ) in lines

    assert "index files: 1" in lines
    index_line = lines[lines.index("index files: 1") + 1]
    assert f"physical offsets 0..{written.messages[-1][3]}" in index_line
    # index_count starts at 1 (entry 0 is invalid); one key per message.
    assert index_line.endswith(f"index_count {1 + len(written.messages)}")
    assert not any(line.startswith("records from") for line in lines)


def test_inspect_decodes_requested_records(written: Written) -> None:
    result = _invoke("store", "inspect", str(written.root), "--records", "3")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("records from offset 0:")
    decoded = lines[start + 1 :]
    assert len(decoded) == 3
    for i, (line, message) in enumerate(zip(decoded, written.messages[:3], strict=True)):
        topic, queue_id, body, offset, size = message
        assert line.startswith(f"  {offset}: size {size}, topic {topic}, queue {queue_id}@0, ")
        assert f"tags tag{i % 2}, keys key-{i}, " in line
        assert f"body {BODY_BYTES} bytes {body[:32]!r}..." in line


def test_inspect_from_offset_crosses_a_blank_marker(written: Written) -> None:
    # The last record of the first segment, then the blank marker, then the first of the next.
    first_of_second = next(i for i, m in enumerate(written.messages) if m[3] >= 64 * 1024)
    last_of_first = written.messages[first_of_second - 1]
    blank_at = last_of_first[3] + last_of_first[4]

    result = _invoke(
        "store",
        "inspect",
        str(written.root),
        "--records",
        "2",
        "--from-offset",
        str(last_of_first[3]),
    )

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    decoded = lines[lines.index(f"records from offset {last_of_first[3]}:") + 1 :]
    assert len(decoded) == 3
    assert decoded[0].startswith(f"  {last_of_first[3]}: size {last_of_first[4]}, ")
    assert decoded[1] == f"  {blank_at}: blank (end of segment)"
    assert decoded[2].startswith(f"  {64 * 1024}: ")
    assert repr(written.messages[first_of_second][2][:32]) in decoded[2]


def test_inspect_stops_at_a_corrupt_record(written: Written) -> None:
    _, _, _, offset, _ = written.messages[1]
    segment = written.root / "commitlog" / f"{0:020d}"
    with segment.open("r+b") as f:  # flip a body byte: the CRC no longer matches
        f.seek(offset + 100)
        byte = f.read(1)
        f.seek(offset + 100)
        f.write(bytes([byte[0] ^ 0xFF]))

    result = _invoke("store", "inspect", str(written.root), "--records", "5")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    decoded = lines[lines.index("records from offset 0:") + 1 :]
    assert len(decoded) == 2
    assert decoded[0].startswith("  0: size ")
    assert (
        decoded[1] == f"  corrupt record: CommitLog offset {offset}: body CRC mismatch at {offset}"
    )


def test_inspect_reports_end_of_data_before_the_count(written: Written) -> None:
    topic, _, _, offset, _ = written.messages[-1]

    result = _invoke(
        "store", "inspect", str(written.root), "--records", "10", "--from-offset", str(offset)
    )

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[-2].startswith(f"  {offset}: size ") and f"topic {topic}," in lines[-2]
    assert lines[-1] == f"  end of data at {written.end_offset} (1 records shown)"


def test_inspect_rejects_an_offset_outside_the_commitlog(written: Written) -> None:
    result = _invoke(
        "store",
        "inspect",
        str(written.root),
        "--records",
        "1",
        "--from-offset",
        str(written.end_offset + 1),
    )

    assert result.exit_code == 1
    _assert_one_line_error(
        result.exit_code,
        result.stdout,
        result.stderr,
        f"--from-offset {written.end_offset + 1} is outside the CommitLog",
    )


def test_inspect_subprocess_prints_records(written: Written) -> None:
    proc = _run("store", "inspect", str(written.root), "--records", "3")

    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    decoded = lines[lines.index("records from offset 0:") + 1 :]
    assert [line.split(", topic ")[1].split(",")[0] for line in decoded] == ["TopicA"] * 3
    for line, message in zip(decoded, written.messages[:3], strict=True):
        assert repr(message[2][:32]) in line


def test_inspect_and_verify_change_nothing_and_close_every_mapping(
    written: Written, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _snapshot(written.root)
    opened = []

    real_open = inspect_store.open_offline

    def recording_open(root, config):  # type: ignore[no-untyped-def]
        parts = real_open(root, config)
        opened.append(parts)
        return parts

    monkeypatch.setattr(inspect_store, "open_offline", recording_open)

    lines = list(inspect_directory(written.root, 5, None))
    assert _invoke("store", "verify", str(written.root)).exit_code == 0

    assert len(lines) > 10
    assert _snapshot(written.root) == before
    ((commitlog, queues, index),) = opened
    mapped = [*commitlog.files.files, *(mf for cq in queues for mf in cq.files.files)]
    assert len(mapped) == len(commitlog.files.files) + 4
    assert all(mf.closed and mf.mm.closed for mf in mapped)
    assert (
        all(f.closed for f in index.files)
        if hasattr(next(iter(index.files), None), "closed")
        else True
    )


def test_inspect_rejects_negative_records(written: Written) -> None:
    result = _invoke("store", "inspect", str(written.root), "--records", "-1")

    assert result.exit_code == 2
    assert "Invalid value for '--records'" in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------------ verify
def test_verify_sound_store(written: Written) -> None:
    result = _invoke("store", "verify", str(written.root))

    assert result.exit_code == 0, result.output
    assert result.stdout == f"{written.root}: no inconsistencies\n"


def test_verify_subprocess_reports_a_garbled_consume_queue(written: Written) -> None:
    # Point TopicA/1's entry 2 at the record of TopicA/0@2 instead of its own.
    queue_messages = [m for m in written.messages if m[:2] == ("TopicA", 1)]
    other = [m for m in written.messages if m[:2] == ("TopicA", 0)][2]
    queue_file = written.root / "consumequeue" / "TopicA" / "1" / f"{0:020d}"
    with queue_file.open("r+b") as f:
        f.seek(2 * ENTRY_SIZE + ENTRY_COMMITLOG_OFFSET_OFFSET)
        assert struct.unpack(">q", f.read(8))[0] == queue_messages[2][3]
        f.seek(2 * ENTRY_SIZE + ENTRY_COMMITLOG_OFFSET_OFFSET)
        f.write(struct.pack(">q", other[3]))

    proc = _run("store", "verify", str(written.root))

    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    problems = proc.stdout.splitlines()
    assert problems
    assert all(line.startswith("consume queue TopicA/1@2") for line in problems), problems
    assert any(f"entry ({other[3]}, " in line for line in problems), problems
    assert any("points at a record of TopicA/0@2" in line for line in problems), problems
    assert "no inconsistencies" not in proc.stdout


# ------------------------------------------------------------------ user mistakes
@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_missing_directory_is_one_clear_line(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope"

    result = _invoke("store", command, str(missing))

    _assert_one_line_error(
        result.exit_code, result.stdout, result.stderr, str(missing), "does not exist"
    )


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_directory_that_is_not_a_store_is_one_clear_line(tmp_path: Path, command: str) -> None:
    (tmp_path / "notes.txt").write_text("not a store")

    result = _invoke("store", command, str(tmp_path))

    assert result.exit_code == 1
    _assert_one_line_error(
        result.exit_code,
        result.stdout,
        result.stderr,
        f"{tmp_path} has no commitlog/ directory: not a BoltMQ store",
    )


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_store_held_by_a_running_store_is_one_clear_line(
    make_store: Callable[..., MessageStore], tmp_path: Path, command: str
) -> None:
    root = tmp_path / "store"
    store = make_store(root)
    store.put_message(StoreMessage("TopicA", b"hello"))

    result = _invoke("store", command, str(root))
    proc = _run("store", command, str(root))

    assert result.exit_code == 1
    _assert_one_line_error(
        result.exit_code, result.stdout, result.stderr, f"{root} is in use by a running store"
    )
    assert proc.returncode == 1
    _assert_one_line_error(
        proc.returncode, proc.stdout, proc.stderr, f"{root} is in use by a running store"
    )
    assert (root / "abort").exists()  # the running store was left alone
