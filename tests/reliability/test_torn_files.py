"""Torn and garbled files: damage a stopped store, start it, check what it serves.

A template store (4 queues, keyed messages over several 64 KiB CommitLog
segments) is written once and shut down cleanly; each round copies it,
damages one file at a seeded random position (printed, and named in every
assertion message, so a failure reruns with the same bytes), optionally leaves
the ``abort`` file of a crash behind, and starts a store on the copy.

What is compared is the template's records as the independent reader
(:mod:`tests.reliability.files`) decoded them before the damage: a served
record must be byte-identical to a record written there (so a bad CRC or a
stale entry is never served), and every record the damage did not touch must
still be served. Rounds: ``BOLTMQ_RELIABILITY_ROUNDS``.
"""

from __future__ import annotations

import random
import shutil
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.store import GetStatus, MessageStore, PutStatus, StoreMessage
from services.store.recovery import RecoveryReport
from tests.conftest import quiet_disk, small_config
from tests.reliability.files import StoredRecord, scan_commitlog, segment_paths
from tests.reliability.scale import ROUNDS

TOPIC = "Torn"
QUEUES = 4
MESSAGES = 600
SEED_BASE = 8_000
READ_BATCH = 32


@dataclass(frozen=True)
class Template:
    """The undamaged store and its records as the independent reader saw them."""

    root: Path
    records: list[StoredRecord]

    def at(self, commitlog_offset: int) -> StoredRecord | None:
        for r in self.records:
            if r.commitlog_offset == commitlog_offset:
                return r
        return None


@dataclass(frozen=True)
class Damage:
    """What a round did to which file."""

    path: Path
    kind: str
    position: int
    length: int
    crashed: bool

    def __str__(self) -> str:
        what = (
            f"cut to {self.position} bytes"
            if self.kind == "truncate"
            else f"{self.length} random bytes at {self.position}"
        )
        return f"{self.path.name} {what}{' (abort file left)' if self.crashed else ''}"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    root = tmp_path_factory.mktemp("torn") / "store"
    rng = random.Random(SEED_BASE)
    with MessageStore(small_config(root), disk_usage=quiet_disk) as store:
        for n in range(MESSAGES):
            body = f"message-{n}-".encode() + rng.randbytes(rng.randrange(50, 400))
            result = store.put_message(
                StoreMessage(TOPIC, body, queue_id=n % QUEUES, keys=[f"key-{n}"])
            )
            assert result.status is PutStatus.PUT_OK, result
    scan = scan_commitlog(root)
    assert not scan.damage and len(scan.records) == MESSAGES
    assert len(segment_paths(root)) >= 3, "the template should span several segments"
    return Template(root, scan.records)


def rounds(name: str) -> Iterator[random.Random]:
    """One seeded generator per round; the seed is printed (pytest shows it on failure)."""
    for round_number in range(ROUNDS):
        seed = SEED_BASE + zlib.crc32(name.encode()) % 1000 * 1000 + round_number
        print(f"{name}: round {round_number} seed {seed}")
        yield random.Random(seed)


def damage(path: Path, rng: random.Random, *, crashed: bool) -> Damage:
    """Truncate ``path`` or overwrite 1-64 bytes of it, at a random position."""
    data = bytearray(path.read_bytes())
    if rng.random() < 0.5:
        cut = rng.randrange(len(data))
        path.write_bytes(bytes(data[:cut]))
        return Damage(path, "truncate", cut, len(data) - cut, crashed)
    length = rng.randrange(1, 65)
    position = rng.randrange(len(data) - length)
    data[position : position + length] = rng.randbytes(length)
    path.write_bytes(bytes(data))
    return Damage(path, "garble", position, length, crashed)


def damaged_copy(
    template: Template, tmp_path: Path, rng: random.Random, pick: str
) -> tuple[Path, Damage]:
    """A copy of the template with one file of kind ``pick`` damaged."""
    root = tmp_path / f"store-{rng.random():.12f}"
    shutil.copytree(template.root, root)
    files = {
        "commitlog": segment_paths(root),
        "consumequeue": sorted(p for p in (root / "consumequeue").rglob("*") if p.is_file()),
        "index": sorted((root / "index").iterdir()),
        "checkpoint": [root / "checkpoint"],
    }[pick]
    crashed = rng.random() < 0.5
    if crashed:
        (root / "abort").touch()
    return root, damage(rng.choice(files), rng, crashed=crashed)


def served(store: MessageStore, template: Template, what: Damage) -> list[StoredRecord]:
    """Every record the store serves from every queue, each checked against the template."""
    out: list[StoredRecord] = []
    for queue_id in range(QUEUES):
        offset = store.min_offset(TOPIC, queue_id)
        while offset < store.max_offset(TOPIC, queue_id):
            result = store.get_messages(TOPIC, queue_id, offset, READ_BATCH)
            assert result.next_begin_offset > offset or result.status is not GetStatus.FOUND, (
                f"{what}: a get that does not advance"
            )
            for view in result.messages:
                written = template.at(view.commitlog_offset)
                assert (
                    written is not None
                    and written.body == view.body_bytes()
                    and (written.topic, written.queue_id, written.queue_offset)
                    == (view.topic, view.queue_id, view.queue_offset)
                ), f"{what}: served {view!r}, which is not a record written there"
                out.append(written)
            offset = max(result.next_begin_offset, offset + 1)
    return out


def start(root: Path) -> tuple[MessageStore, RecoveryReport]:
    store = MessageStore(small_config(root), disk_usage=quiet_disk)
    return store, store.start()


def check_round(
    template: Template, root: Path, what: Damage, kept: list[StoredRecord]
) -> tuple[MessageStore, list[StoredRecord], list[str]]:
    """Start on the damaged copy: every served record is genuine, ``kept`` are all served,
    and a record no longer served is named by recovery or by ``verify()``.

    Returns the started store, what it serves and what it reported (notes + verify).
    """
    store, report = start(root)
    try:
        got = served(store, template, what)
        missing = sorted({r.commitlog_offset for r in kept} - {r.commitlog_offset for r in got})
        assert not missing, (
            f"{what}: records at {missing[:5]}... no longer served (recovery notes: {report.notes})"
        )
        reported = report.notes + store.verify()
        lost = len(template.records) - len(got)
        print(
            f"  {what}: serves {len(got)} of {len(template.records)}, cut "
            f"{report.truncated_bytes} bytes, reported {reported[:3]}"
        )
        assert not lost or reported, f"{what}: {lost} records lost and nothing reported"
    except BaseException:
        store.shutdown()
        raise
    return store, got, reported


# ------------------------------------------------------------------ CommitLog
def test_damaged_commitlog_serves_only_written_records_and_every_record_before_the_damage(
    template: Template, tmp_path: Path
) -> None:
    for rng in rounds("commitlog"):
        root, what = damaged_copy(template, tmp_path, rng, "commitlog")
        first_bad = int(what.path.name) + what.position
        kept = [r for r in template.records if r.end <= first_bad]
        store, _, _ = check_round(template, root, what, kept)
        store.shutdown()


# ------------------------------------------------------------------ derived files
def untouched(template: Template, what: Damage) -> list[StoredRecord]:
    """Records a garbled consume-queue or index file need not have kept on a clean start.

    A clean start trusts derived files (RocketMQ's choice: checking every entry
    against the CommitLog is ``verify()``'s job); a torn file or a crash rebuilds
    them. Garbled consume-queue entries lose their records until then.
    """
    if what.kind == "truncate" or what.crashed or what.path.parent.parent.name != TOPIC:
        return template.records
    queue_id = int(what.path.parent.name)
    first = (int(what.path.name) + what.position) // 20
    last = (int(what.path.name) + what.position + what.length - 1) // 20
    return [
        r for r in template.records if r.queue_id != queue_id or not first <= r.queue_offset <= last
    ]


@pytest.mark.parametrize("pick", ["consumequeue", "index", "checkpoint"])
def test_damaged_derived_file_serves_every_untouched_record_and_only_genuine_keys(
    template: Template, tmp_path: Path, pick: str
) -> None:
    for rng in rounds(pick):
        root, what = damaged_copy(template, tmp_path, rng, pick)
        store, got, reported = check_round(template, root, what, untouched(template, what))
        try:
            assert len(got) == len(template.records) or reported, what
            for r in rng.sample(template.records, 20):
                n = int(r.body.split(b"-")[1])
                found = [v.commitlog_offset for v in store.query_messages(TOPIC, f"key-{n}")]
                assert found in ([r.commitlog_offset], []), f"{what}: key-{n} found {found}"
                assert found or any("index" in line for line in reported), (
                    f"{what}: key-{n} lost from the index and nothing reported"
                )
        finally:
            store.shutdown()
