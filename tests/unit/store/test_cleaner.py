"""The cleaner (services.store.cleaner) on a real CommitLog and real consume queues in tmp_path.

Messages go straight through ``CommitLog.encode/append`` and their dispatch
requests into the consume queues, so no MessageStore is involved. Disk usage,
the wall clock and the pause between deletions are injected: no test depends
on the real time or the real disk.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from services.store import mapped_file as mapped_file_module
from services.store.cleaner import Cleaner, CleanReport, disk_usage_percent, last_modified_ms
from services.store.commitlog import CommitLog, DispatchRequest
from services.store.config import StoreConfig
from services.store.consume_queue import ENTRY_SIZE, ConsumeQueue, ConsumeQueueTable
from services.store.mapped_file import file_name
from services.store.message import StoreMessage

SEGMENT_BYTES = 64 * 1024
BODY = b"x" * (8 * 1024)  # 7 records per 64 KiB segment
CQ_ENTRIES = 10  # entries per consume-queue file: one file spans about 1.5 segments
HOUR_MS = 3_600_000


def local_time(hour: int) -> float:
    """A POSIX time whose local hour is ``hour`` (a January day: no DST switch)."""
    return time.mktime((2024, 1, 10, hour, 30, 0, 0, 0, -1))


NOW = local_time(12)  # not a delete hour
DELETE_HOUR = local_time(4)
OLD_MS = int(DELETE_HOUR * 1000) - 100 * HOUR_MS  # older than 72 h at either time
YOUNG_MS = int(DELETE_HOUR * 1000) - 1 * HOUR_MS


class Rig:
    """A CommitLog, its consume queues, and the knobs the cleaner reads."""

    def __init__(self, root: Path, **overrides: Any) -> None:
        values: dict[str, Any] = dict(
            root_dir=root,
            mapped_file_size_commitlog=SEGMENT_BYTES,
            mapped_file_size_consume_queue=CQ_ENTRIES * ENTRY_SIZE,
            max_hash_slot_num=64,
            max_index_num=11,  # entry 0 is unused: 10 entries per index file
        )
        values.update(overrides)
        self.config = StoreConfig(**values)
        self.commitlog = CommitLog(self.config)
        self.queues = ConsumeQueueTable(root / "consumequeue", self.config.consume_queue_file_size)
        self.index: Any = None
        self.requests: list[DispatchRequest] = []
        self.usage = 50.0
        self.now = NOW
        self.sleeps: list[float] = []
        self.probed: list[Path] = []

    def probe(self, path: Path) -> float:
        self.probed.append(path)
        return self.usage

    def cleaner(self, index: Any = None) -> Cleaner:
        return Cleaner(
            self.config,
            self.commitlog,
            self.queues,
            index,
            disk_usage=self.probe,
            clock=lambda: self.now,
            sleep=self.sleeps.append,
        )

    def append(self, now_ms: int, queue_id: int = 0, key: str | None = None) -> DispatchRequest:
        cl = self.commitlog
        msg = StoreMessage("Topic", BODY, queue_id, keys=[key] if key else None)
        results, batch = cl.append([cl.encode(msg, now_ms)], now_ms)
        assert results[0].status.name == "PUT_OK"
        request = DispatchRequest(*batch.requests[0])
        self.queues.get_or_create(request.topic, request.queue_id).put(
            request.queue_offset,
            request.commitlog_offset,
            request.size,
            request.tags_code,
            request.store_timestamp,
        )
        if self.index is not None:
            self.index.build_index(
                request.topic, request.index_keys, request.commitlog_offset, request.store_timestamp
            )
        self.requests.append(request)
        return request

    def grow(self, segments: int, now_ms: int) -> None:
        """Append until the CommitLog has ``segments`` files (the last holds one record)."""
        while len(self.segments()) < segments:
            self.append(now_ms, key=f"k{len(self.requests)}")

    def segments(self) -> list[str]:
        return [mf.path.name for mf in self.commitlog.files.files]

    def segment_names_on_disk(self) -> list[str]:
        return sorted(
            p.name
            for p in (self.config.root_dir / "commitlog").iterdir()
            if not p.name.endswith(".tmp")
        )

    def close(self) -> None:
        self.commitlog.close()
        self.queues.close()
        if self.index is not None:
            self.index.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path / "store")
    yield r
    r.close()


@pytest.fixture
def make_rig(tmp_path: Path) -> Iterator[Any]:
    rigs: list[Rig] = []

    def make(**overrides: Any) -> Rig:
        r = Rig(tmp_path / f"store{len(rigs)}", **overrides)
        rigs.append(r)
        return r

    yield make
    for r in rigs:
        r.close()


def names(*starts: int) -> list[str]:
    return [file_name(s * SEGMENT_BYTES) for s in starts]


def mapped(path: Path) -> bool:
    """Whether this process still maps ``path`` (Linux keeps an unlinked file's mapping)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("needs /proc/self/maps")
    return str(path) in maps.read_text()


# --------------------------------------------------------------------------- age rules


def test_young_segments_stay_at_the_delete_hour_and_above_75(rig: Rig) -> None:
    rig.grow(4, YOUNG_MS)
    rig.now, rig.usage = DELETE_HOUR, 80.0
    report = rig.cleaner().run_once()
    assert report == CleanReport(0, 0, 0, 80.0, False, "")
    assert rig.segments() == names(0, 1, 2, 3) == rig.segment_names_on_disk()
    assert rig.commitlog.min_offset == 0


def test_expired_segments_go_only_at_the_delete_hour(rig: Rig) -> None:
    rig.grow(4, OLD_MS)
    cleaner = rig.cleaner()
    report = cleaner.run_once()  # 12:30, disk at 50 %
    assert report.commitlog_files_deleted == 0 and report.reason == ""
    assert rig.segments() == names(0, 1, 2, 3)

    rig.now = DELETE_HOUR
    report = cleaner.run_once()
    assert report.commitlog_files_deleted == 3
    assert report.reason == "expired at delete hour"
    assert rig.segments() == names(3) == rig.segment_names_on_disk()
    assert rig.commitlog.min_offset == 3 * SEGMENT_BYTES
    last = rig.requests[-1]
    record = rig.commitlog.read_record(last.commitlog_offset)
    assert record is not None and bytes(record.body) == BODY


def test_every_hour_listed_in_delete_when_counts(make_rig: Any) -> None:
    rig = make_rig(delete_when="04;16")
    rig.grow(3, OLD_MS)
    cleaner = rig.cleaner()
    rig.now = local_time(15)
    assert cleaner.run_once().commitlog_files_deleted == 0
    rig.now = local_time(16)
    assert cleaner.run_once().commitlog_files_deleted == 2
    assert rig.segments() == names(2)


def test_expired_segments_go_at_any_hour_above_75_percent(rig: Rig) -> None:
    rig.grow(3, OLD_MS)
    cleaner = rig.cleaner()
    rig.usage = 75.0  # not above
    assert cleaner.run_once().commitlog_files_deleted == 0
    rig.usage = 75.5
    report = cleaner.run_once()
    assert (report.commitlog_files_deleted, report.reason) == (2, "disk above 75%")
    assert rig.segments() == names(2)


def test_reserved_time_is_measured_from_the_last_write(make_rig: Any) -> None:
    rig = make_rig(file_reserved_time_h=10)
    rig.grow(3, int(DELETE_HOUR * 1000) - 10 * HOUR_MS + 1)  # 1 ms short of 10 h
    rig.now = DELETE_HOUR
    cleaner = rig.cleaner()
    assert cleaner.run_once().commitlog_files_deleted == 0
    rig.now = DELETE_HOUR + 0.001
    assert cleaner.run_once().commitlog_files_deleted == 2


def test_deletion_stops_at_the_first_young_segment(rig: Rig) -> None:
    rig.grow(3, OLD_MS)  # 0, 1 old
    rig.grow(4, YOUNG_MS)  # 2 young
    rig.grow(5, OLD_MS)  # 3 old again (its last write), 4 is the last
    rig.usage = 80.0
    report = rig.cleaner().run_once()
    assert report.commitlog_files_deleted == 2
    # Segment 3 is expired but lies behind a young one: deletion stays contiguous.
    assert rig.segments() == names(2, 3, 4)
    assert rig.commitlog.min_offset == 2 * SEGMENT_BYTES


def test_segments_loaded_from_disk_age_by_their_mtime(rig: Rig, tmp_path: Path) -> None:
    rig.grow(3, OLD_MS)
    rig.commitlog.close()
    # A restarted CommitLog knows no store timestamps: only the files' mtimes.
    rig.commitlog = CommitLog(rig.config)
    rig.commitlog.files.load()
    first = rig.commitlog.files.files[0]
    assert first.store_timestamp == 0
    rig.now = DELETE_HOUR
    cleaner = rig.cleaner()
    # The files were written just now in real time, long after the fake clock.
    assert cleaner.run_once().commitlog_files_deleted == 0
    old_s = DELETE_HOUR - 73 * 3600
    for mf in rig.commitlog.files.files[:2]:
        os.utime(mf.path, (old_s, old_s))
    assert last_modified_ms(first) == int(old_s * 1000)
    assert cleaner.run_once().commitlog_files_deleted == 2
    assert rig.segments() == names(2)


# --------------------------------------------------------------------------- disk pressure


def test_above_85_percent_young_segments_are_deleted_but_never_the_last(rig: Rig) -> None:
    rig.grow(4, YOUNG_MS)
    rig.usage = 86.0
    cleaner = rig.cleaner()
    report = cleaner.run_once()
    assert report.commitlog_files_deleted == 3
    assert report.reason == "disk above 85%: forced"
    assert rig.segments() == names(3) == rig.segment_names_on_disk()
    rig.usage = 100.0
    assert cleaner.run_once().commitlog_files_deleted == 0
    assert rig.segments() == names(3)
    assert rig.commitlog.read_record(rig.requests[-1].commitlog_offset) is not None


def test_at_most_a_batch_per_run_with_a_pause_between_deletions(make_rig: Any) -> None:
    rig = make_rig(delete_files_batch_max=2, delete_commitlog_files_interval_ms=250)
    rig.grow(6, OLD_MS)
    rig.usage = 80.0
    cleaner = rig.cleaner()
    assert cleaner.run_once().commitlog_files_deleted == 2
    assert rig.segments() == names(2, 3, 4, 5)
    assert rig.sleeps == [0.25]  # between the two, not after the last
    assert cleaner.run_once().commitlog_files_deleted == 2
    assert rig.sleeps == [0.25, 0.25]
    assert cleaner.run_once().commitlog_files_deleted == 1
    assert rig.sleeps == [0.25, 0.25]
    assert cleaner.run_once().commitlog_files_deleted == 0
    assert rig.segments() == names(5)


def test_disk_full_above_90_percent_until_usage_falls(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.grow(2, YOUNG_MS)
    cleaner = rig.cleaner()
    assert cleaner.disk_full is False
    rig.usage = 90.0
    assert cleaner.run_once().disk_full is False
    rig.usage = 91.0
    with caplog.at_level(logging.WARNING, logger="services.store.cleaner"):
        report = cleaner.run_once()
        cleaner.run_once()
    assert report.disk_full and cleaner.disk_full
    assert report.disk_used_percent == 91.0
    flips = [r for r in caplog.records if "refusing writes" in r.getMessage()]
    assert len(flips) == 1  # logged when it flips, not on every run
    rig.usage = 60.0
    report = cleaner.run_once()
    assert not report.disk_full and not cleaner.disk_full


def test_a_failing_probe_keeps_the_last_state(rig: Rig) -> None:
    rig.usage = 95.0
    cleaner = rig.cleaner()
    cleaner.run_once()

    def broken(path: Path) -> float:
        raise OSError("stat failed")

    cleaner._disk_usage = broken
    report = cleaner.run_once()
    assert cleaner.disk_full and report.disk_used_percent == 95.0


def test_usage_is_measured_on_the_commitlog_directory_once_it_exists(rig: Rig) -> None:
    cleaner = rig.cleaner()
    cleaner.run_once()
    assert rig.probed[-1] == rig.config.root_dir
    rig.append(YOUNG_MS)
    cleaner.run_once()
    assert rig.probed[-1] == rig.config.root_dir / "commitlog"


def test_disk_usage_percent_reports_what_this_process_cannot_write(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    expected = (st.f_blocks - st.f_bavail) * 100.0 / st.f_blocks
    assert 0.0 <= disk_usage_percent(tmp_path) <= 100.0
    # Other processes may write meanwhile; a tenth of a percent is far below any threshold gap.
    assert disk_usage_percent(tmp_path) == pytest.approx(expected, abs=0.1)
    missing = tmp_path / "not" / "yet"
    assert disk_usage_percent(missing) == pytest.approx(expected, abs=0.1)


# --------------------------------------------------------------------------- queues and index


def test_consume_queue_files_below_the_commitlog_go_and_min_offsets_move(rig: Rig) -> None:
    rig.grow(4, OLD_MS)
    rig.append(YOUNG_MS, queue_id=1)  # a queue living only in the last segment
    main = rig.queues.get("Topic", 0)
    other = rig.queues.get("Topic", 1)
    assert main is not None and other is not None
    files_before = len(main.files.files)
    rig.now = DELETE_HOUR
    report = rig.cleaner().run_once()
    assert report.commitlog_files_deleted == 3
    floor = rig.commitlog.min_offset
    main_requests = [r for r in rig.requests if r.queue_id == 0]
    first_kept = min(r.queue_offset for r in main_requests if r.commitlog_offset >= floor)
    # Files whose every entry is below the floor: full files ending at or before first_kept.
    expected_gone = first_kept // CQ_ENTRIES
    assert expected_gone >= 1
    assert report.consume_queue_files_deleted == expected_gone
    assert len(main.files.files) == files_before - expected_gone
    on_disk = sorted(p.name for p in main.files.directory.iterdir())
    assert on_disk == [mf.path.name for mf in main.files.files]
    assert main.files.min_offset == expected_gone * CQ_ENTRIES * ENTRY_SIZE
    assert main.min_offset() == first_kept
    entry = main.entry(first_kept)
    assert entry is not None and entry[0] == main_requests[first_kept].commitlog_offset
    assert rig.commitlog.read_record(entry[0]) is not None
    assert other.min_offset() == 0 and other.max_offset() == 1


def test_consume_queue_min_offset_corrected_even_without_a_file_to_delete(rig: Rig) -> None:
    rig.grow(2, OLD_MS)
    rig.append(OLD_MS)
    cq = rig.queues.get("Topic", 0)
    assert cq is not None and len(cq.files.files) == 1  # fewer than CQ_ENTRIES entries
    rig.usage = 80.0
    report = rig.cleaner().run_once()
    assert report.commitlog_files_deleted == 1 and report.consume_queue_files_deleted == 0
    first_kept = min(
        r.queue_offset for r in rig.requests if r.commitlog_offset >= rig.commitlog.min_offset
    )
    assert first_kept > 0
    assert cq.min_offset() == first_kept


def test_the_queues_are_walked_only_when_the_commitlog_minimum_moved(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig.grow(4, OLD_MS)
    rig.append(YOUNG_MS, queue_id=1)
    walked: list[int] = []
    delete_files_below = ConsumeQueue.delete_files_below

    def spied(cq: ConsumeQueue, commitlog_min_offset: int, force_after_s: float) -> int:
        walked.append(cq.queue_id)
        return delete_files_below(cq, commitlog_min_offset, force_after_s)

    monkeypatch.setattr(ConsumeQueue, "delete_files_below", spied)
    cleaner = rig.cleaner()
    assert cleaner.run_once().commitlog_files_deleted == 0  # not the delete hour
    assert sorted(walked) == [0, 1]  # the first run walks every queue
    walked.clear()
    assert cleaner.run_once().consume_queue_files_deleted == 0 and walked == []
    rig.now = DELETE_HOUR
    report = cleaner.run_once()
    assert report.commitlog_files_deleted == 3 and report.consume_queue_files_deleted >= 1
    assert sorted(walked) == [0, 1]  # the minimum rose: every queue again
    main = rig.queues.get("Topic", 0)
    assert main is not None and main.min_offset() > 0
    walked.clear()
    assert cleaner.run_once().consume_queue_files_deleted == 0 and walked == []


class RecordingIndex:
    def __init__(self, deleted: int) -> None:
        self.calls: list[tuple[int, float]] = []
        self.deleted = deleted

    def delete_files_below(self, min_commitlog_offset: int, force_after_s: float = 120.0) -> int:
        self.calls.append((min_commitlog_offset, force_after_s))
        return self.deleted


def test_the_index_is_cleaned_below_the_new_commitlog_minimum(make_rig: Any) -> None:
    rig = make_rig(destroy_mapped_file_forcibly_interval_ms=30_000)
    rig.grow(3, OLD_MS)
    index = RecordingIndex(deleted=4)
    rig.now = DELETE_HOUR
    report = rig.cleaner(index=index).run_once()
    assert report.index_files_deleted == 4
    assert index.calls == [(2 * SEGMENT_BYTES, 30.0)]


def test_real_index_files_below_the_commitlog_are_deleted(tmp_path: Path) -> None:
    index_module = pytest.importorskip("services.store.index_service")
    rig = Rig(tmp_path / "store")
    try:
        rig.index = index_module.IndexService(
            rig.config.root_dir / "index", rig.config.max_hash_slot_num, rig.config.max_index_num
        )
        rig.index.load(True, 0)
        rig.grow(5, OLD_MS)
        files_before = len(rig.index.files)
        assert files_before > 2  # 10 entries per index file, 7 messages per segment
        rig.now = DELETE_HOUR
        report = rig.cleaner(index=rig.index).run_once()
        assert report.commitlog_files_deleted == 4
        assert report.index_files_deleted > 0
        assert len(rig.index.files) == files_before - report.index_files_deleted
        last = rig.requests[-1]
        found = list(rig.index.query("Topic", last.index_keys[0], 16, 0, 1 << 62))
        assert last.commitlog_offset in found
    finally:
        rig.close()


# --------------------------------------------------------------------------- readers


def test_a_held_segment_stays_readable_and_is_unmapped_when_released(rig: Rig) -> None:
    rig.grow(3, OLD_MS)
    first = rig.commitlog.files.files[0]
    path = first.path
    assert first.hold()
    rig.usage = 86.0
    cleaner = rig.cleaner()
    report = cleaner.run_once()
    assert report.commitlog_files_deleted == 2
    assert not path.exists()
    # The reader's mapping survives the unlink: it still reads the record.
    assert not first.closed and mapped(path)
    assert cleaner.pending_destroy == (first,)
    record = rig.requests[0]
    assert int.from_bytes(first.view[0:4], "big") == record.size
    first.release()
    assert first.closed and not mapped(path)
    cleaner.run_once()
    assert cleaner.pending_destroy == ()


def test_a_view_taken_before_deletion_outlives_the_file(rig: Rig) -> None:
    rig.grow(3, OLD_MS)
    first = rig.commitlog.files.files[0]
    path = first.path
    assert first.hold()
    view = first.view[0 : rig.requests[0].size]
    expected = bytes(view)
    rig.usage = 86.0
    cleaner = rig.cleaner()
    cleaner.run_once()
    assert not path.exists()
    first.release()
    assert first.closed
    assert bytes(view) == expected and BODY in expected
    cleaner.run_once()
    assert cleaner.pending_destroy == ()
    del view, first
    gc.collect()
    assert not mapped(path)


def test_a_reader_that_never_lets_go_is_unmapped_after_the_grace_period(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monotonic = [1000.0]
    monkeypatch.setattr(mapped_file_module, "time", SimpleNamespace(monotonic=lambda: monotonic[0]))
    rig.grow(2, OLD_MS)
    first = rig.commitlog.files.files[0]
    path = first.path
    assert first.hold()
    rig.now = DELETE_HOUR
    cleaner = rig.cleaner()
    assert cleaner.run_once().commitlog_files_deleted == 1
    assert cleaner.pending_destroy == (first,) and mapped(path)
    monotonic[0] += 119.0
    cleaner.run_once()
    assert cleaner.pending_destroy == (first,) and not first.closed
    monotonic[0] += 1.0  # 120 s: destroy_mapped_file_forcibly_interval_ms
    cleaner.run_once()
    assert cleaner.pending_destroy == ()
    assert first.closed and first.ref_count == 1 and not mapped(path)


def test_held_consume_queue_files_are_retried_too(rig: Rig) -> None:
    rig.grow(4, OLD_MS)
    cq = rig.queues.get("Topic", 0)
    assert cq is not None
    oldest = cq.files.files[0]
    assert oldest.hold()
    rig.now = DELETE_HOUR
    cleaner = rig.cleaner()
    assert cleaner.run_once().consume_queue_files_deleted >= 1
    assert oldest in cleaner.pending_destroy and not oldest.path.exists()
    oldest.release()
    cleaner.run_once()
    assert cleaner.pending_destroy == () and oldest.closed


# --------------------------------------------------------------------------- background


def test_background_thread_runs_until_stopped(make_rig: Any) -> None:
    rig = make_rig(clean_resource_interval_ms=1)
    rig.grow(3, YOUNG_MS)
    rig.usage = 95.0
    runs = threading.Semaphore(0)

    def probe(path: Path) -> float:
        runs.release()
        return rig.usage

    cleaner = Cleaner(
        rig.config,
        rig.commitlog,
        rig.queues,
        None,
        disk_usage=probe,
        clock=lambda: rig.now,
        sleep=rig.sleeps.append,
    )
    cleaner.start()
    try:
        # start() measures before returning: a full disk refuses the first write.
        assert cleaner.disk_full
        with pytest.raises(RuntimeError):
            cleaner.start()
        for _ in range(3):  # the start-up probe, then two runs of the thread
            assert runs.acquire(timeout=30)
    finally:
        cleaner.stop()
    assert not any(t.name == "boltmq-cleaner" for t in threading.enumerate())
    assert rig.segments() == names(2)  # forced at 95 %, by the thread
    cleaner.stop()  # idempotent
    rig.usage = 10.0
    assert not cleaner.run_once().disk_full  # still usable by hand after stop
