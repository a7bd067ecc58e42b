"""``python -m bench backlog``: a store holding a large backlog, and what it does with it.

One store service process (``boltmq serve store``, the real service) in a fresh
directory under ``--data-dir``. Everything goes through its gRPC API from this
process (and one reader process), as a broker's calls would:

1. ``produce-empty``: batched raw appends for ``probe_s`` into the empty store.
2. ``fill``: ``messages`` messages of ``body_bytes`` over ``queues`` queues,
   batches of ``batch`` raw records (:class:`bench.backlog_load.Writer`: the
   broker's own form of append, the fastest path through the service; the
   embedded ``MessageStore`` would skip gRPC but then the backlog would not be
   the service's, and the restarts below need the service). Rate per tenth.
3. ``produce-backlog``: step 1 again with the backlog in place.
4. ``head``: a paced producer and a consumer at the head for ``probe_s``
   (:class:`bench.backlog_load.HeadProbe`): send-to-delivery latency alone.
5. ``old-reader``: a second process reads every queue from offset 0 to the end
   (rate per tenth of the backlog) while the head probe keeps running: the
   head's latency with the old reader.
6. ``lookup``: ``lookups`` each of QueryByKey, Get by message id and
   OffsetByTime, at random points of the backlog (latency; each must answer).
7. ``clean-restart``: SIGTERM, start again; time to READY and the CommitLog
   range recovery checked (from the service's log line).
8. ``crash-restart``: kill -9 while the head producer writes, start again;
   time to READY, and the bytes recovery re-read (from its start offset to the
   end) against what the checkpoint did not cover: the segment holding the
   checkpoint's point plus what was written after it.
9. ``retention``: restart with the forced-clean watermark below the disk's
   current use (so the cleaner deletes the oldest segments, at most
   ``delete_files_batch_max`` a run every ``CLEAN_INTERVAL_MS``) while the head
   probe produces and consumes, for ``retention_s``; segments and bytes
   deleted, head produce rate and latency meanwhile.

The RSS of every process (store, this process, the reader) is sampled all along
(:class:`bench.backlog_load.RssSampler`) and reported per phase. The report is
printed; ``--json`` writes it as JSON (the :class:`Report` fields).
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.backlog_load import (
    TOPIC,
    HeadProbe,
    Progress,
    RssSampler,
    Writer,
    mapped_rss,
    stub_for,
    tenth_rates,
)
from bench.report import nearest_rank
from boltmq.cli.dev.launcher import REPO_ROOT, ServiceProcess
from boltmq.v1 import store_pb2
from boltmq.wire.record import store_timestamp_of
from services.store.checkpoint import decode_checkpoint
from services.store.cleaner import disk_usage_percent
from services.store.page_cache import SWEEP_INTERVAL_S
from services.store.recovery import CRASH_RECOVERY_MARGIN_MS

CLEAN_INTERVAL_MS = 1000
INDEX_SETTLE_S = 2.5
"""After the fill: two rounds of the consume-queue flusher, which flushes and releases
the index (its default interval is 1 s)."""
RESTART_TIMEOUT_S = 1800.0
"""How long a start may take until READY: a restart on 100,000,000 messages loads GiBs of
consume queues and checks up to 3 GiB of CommitLog first."""
HEAD_BYTES = 256
"""Enough of a segment's first record to read its store timestamp."""
RECOVERED = re.compile(
    r"store recovered \((?P<kind>clean|unclean) shutdown before\): CommitLog "
    r"(?P<min>\d+)\.\.(?P<max>\d+), \d+ note\(s\); checked from (?P<start>\d+), "
    r"re-dispatched from (?P<reput>\d+)"
)


@dataclass(frozen=True)
class Settings:
    """What one run does (the command's options)."""

    messages: int = 100_000_000
    body_bytes: int = 100
    queues: int = 64
    batch: int = 1024
    segment_mb: int = 1024
    window_mb: int = 1024
    probe_s: float = 5.0
    retention_s: float = 15.0
    lookups: int = 200
    key_every_message: bool = False
    index_window_mb: int = 4


@dataclass
class Report:
    """Everything measured (``--json`` writes this)."""

    settings: dict[str, Any]
    store_dir: str = ""
    rates: dict[str, float] = field(default_factory=dict)
    """msg/s: produce-empty, produce-backlog, fill, old-reader."""
    fill_tenths: list[float] = field(default_factory=list)
    reader_tenths: list[float] = field(default_factory=list)
    head_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    """Latency percentiles of the head consumer: alone, with-old-reader, retention."""
    lookup_ms: dict[str, dict[str, float | None]] = field(default_factory=dict)
    restarts: dict[str, dict[str, float]] = field(default_factory=dict)
    retention: dict[str, float] = field(default_factory=dict)
    rss_mib: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per phase, each process's largest RSS."""
    store_file_rss_mib: dict[str, float] = field(default_factory=dict)
    """Per phase, the largest file-backed part of the store's RSS (mapped CommitLog and
    consume-queue pages, each released behind its page-cache window)."""
    reader_disk_read_bytes: int = 0
    """What the store process read from disk while the old reader ran (its I/O counters)."""
    fill_store_rss_mib: list[float] = field(default_factory=list)
    """The store's largest RSS in each tenth of the fill."""
    reader_store_rss_mib: list[float] = field(default_factory=list)
    fill_index_rss_mib: float = 0.0
    """The store's resident index pages (its mappings of ``index/``) after the fill,
    ``INDEX_SETTLE_S`` later: released behind ``index_page_cache_window_bytes``."""
    """The store's largest RSS in each tenth of the old reader's read."""
    store_rss_bound_mib: float = 0.0
    """What the page-cache window lets the store map: its RSS before the fill, the window,
    and what the old reader brings back between two sweeps of the released range
    (``SWEEP_INTERVAL_S`` at the reader's MB/s of CommitLog)."""
    commitlog_bytes: int = 0
    messages_stored: int = 0
    """Every message in the store before retention (the backlog, the probes' and the head's)."""
    disk_bytes: int = 0
    """Blocks the store's files take on disk (pre-allocated, unwritten parts excluded)."""


def _mib(values: list[int]) -> list[float]:
    return [round(v / 2**20, 1) for v in values]


def percentiles_ms(samples_ns: list[int]) -> dict[str, float | None]:
    if not samples_ns:
        return {"count": 0, "p50": None, "p99": None, "p999": None, "max": None}
    ordered = sorted(samples_ns)
    return {
        "count": len(ordered),
        "p50": round(nearest_rank(ordered, 0.50) / 1e6, 3),
        "p99": round(nearest_rank(ordered, 0.99) / 1e6, 3),
        "p999": round(nearest_rank(ordered, 0.999) / 1e6, 3),
        "max": round(ordered[-1] / 1e6, 3),
    }


class Run:
    """One benchmark run (see the module docstring); :meth:`execute` returns the report."""

    def __init__(self, settings: Settings, data_dir: Path, echo: Any = print) -> None:
        self.s = settings
        self.root = data_dir / f"backlog-{time.strftime('%Y%m%d-%H%M%S')}"
        self.echo = echo
        self.report = Report(asdict(settings), store_dir=str(self.root))
        self.rss = RssSampler()
        self.store: ServiceProcess | None = None

    # ----------------------------------------------------------------- store
    def _store_settings(self, forced_clean: int = 100) -> list[str]:
        return [
            f"root_dir={self.root / 'store'}",
            f"mapped_file_size_commitlog={self.s.segment_mb * 2**20}",
            f"commitlog_page_cache_window_bytes={self.s.window_mb * 2**20}",
            f"index_page_cache_window_bytes={self.s.index_window_mb * 2**20}",
            "disk_max_used_space_ratio=100",
            f"disk_space_clean_forcibly_ratio={forced_clean}",
            "disk_space_warning_level_ratio=100",
            f"clean_resource_interval_ms={CLEAN_INTERVAL_MS}",
        ]

    def _start_store(self, forced_clean: int = 100) -> float:
        start = time.perf_counter()
        self.store = ServiceProcess(
            "store",
            self.root / "logs",
            *self._store_settings(forced_clean),
            start_timeout_s=RESTART_TIMEOUT_S,
        ).start()
        seconds = time.perf_counter() - start
        assert self.store.proc is not None
        self.rss.pids["store"] = self.store.proc.pid
        return seconds

    def _recovery_line(self) -> dict[str, int]:
        assert self.store is not None
        matches = list(RECOVERED.finditer(self.store.log_path.read_text(errors="replace")))
        if not matches:
            raise RuntimeError(f"no recovery line in {self.store.log_path}")
        m = matches[-1]
        return {k: int(m[k]) for k in ("min", "max", "start", "reput")}

    def _store_read_bytes(self) -> int:
        import psutil

        assert self.store is not None and self.store.proc is not None
        read: int = psutil.Process(self.store.proc.pid).io_counters().read_bytes
        return read

    def _stored(self) -> int:
        assert self.store is not None
        channel, stub = stub_for(self.store.address)
        try:
            queues = stub.ListQueues(store_pb2.ListQueuesRequest(), timeout=30).queues
            return sum(q.max_offset - q.min_offset for q in queues)
        finally:
            channel.close()

    def _info(self) -> store_pb2.StoreInfo:
        assert self.store is not None
        channel, stub = stub_for(self.store.address)
        try:
            info: store_pb2.StoreInfo = stub.GetStoreInfo(
                store_pb2.GetStoreInfoRequest(), timeout=30
            )
            return info
        finally:
            channel.close()

    # ----------------------------------------------------------------- phases
    def _phase(self, name: str) -> None:
        self.rss.phase = name
        self.echo(f"[{time.strftime('%H:%M:%S')}] {name}")

    def _write(self, name: str, count: int, until: Any = None) -> Progress:
        assert self.store is not None
        s = self.s
        writer = Writer(
            self.store.address, s.queues, s.body_bytes, s.batch, name, s.key_every_message
        )
        try:
            return writer.write(count, until)
        finally:
            writer.close()

    def _produce_probe(self, name: str) -> None:
        self._phase(name)
        deadline = time.monotonic() + self.s.probe_s
        done = self._write(name, 2**62, lambda: time.monotonic() > deadline)
        self.report.rates[name] = round(done.stored / done.seconds)

    def _fill(self) -> Progress:
        self._phase("fill")
        start = time.perf_counter()
        done = self._write("fill", self.s.messages)
        self.report.fill_store_rss_mib = _mib(self.rss.by_tenth("store", start, done.tenths))
        assert self.store is not None and self.store.proc is not None
        time.sleep(INDEX_SETTLE_S)
        index_rss = mapped_rss(self.store.proc.pid, self.root / "store" / "index")
        self.report.fill_index_rss_mib = round(index_rss / 2**20, 1)
        self.report.rates["fill"] = round(done.stored / done.seconds)
        self.report.fill_tenths = [round(r) for r in tenth_rates(done.tenths)]
        return done

    def _head_alone(self, probe: HeadProbe) -> None:
        self._phase("head")
        probe.take()
        time.sleep(self.s.probe_s)
        self.report.head_ms["alone"] = percentiles_ms(probe.take())

    def _old_reader(self, probe: HeadProbe) -> None:
        self._phase("old-reader")
        assert self.store is not None
        probe.take()
        reader = subprocess.Popen(
            [sys.executable, "-m", "bench.backlog_load", "--store", self.store.address],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        self.rss.pids["old-reader"] = reader.pid
        tenths: list[tuple[int, float]] = []
        start = time.perf_counter()
        disk_before = self._store_read_bytes()
        assert reader.stdout is not None
        for line in reader.stdout:
            point = json.loads(line)
            if "read" in point:
                tenths.append((point["read"], point["seconds"]))
        if reader.wait() != 0 or len(tenths) < 10:
            raise RuntimeError(f"the old reader failed (exit {reader.returncode})")
        del self.rss.pids["old-reader"]
        self.report.reader_disk_read_bytes = self._store_read_bytes() - disk_before
        self.report.reader_store_rss_mib = _mib(self.rss.by_tenth("store", start, tenths))
        self.report.head_ms["with-old-reader"] = percentiles_ms(probe.take())
        self.report.reader_tenths = [round(r) for r in tenth_rates(tenths)]
        self.report.rates["old-reader"] = round(tenths[-1][0] / tenths[-1][1])

    def _lookups(self, done: Progress) -> None:
        self._phase("lookup")
        assert self.store is not None
        channel, stub = stub_for(self.store.address)
        rng = random.Random(7)
        timings: dict[str, list[int]] = {"key": [], "msg-id": [], "offset-by-time": []}
        try:
            for _ in range(self.s.lookups):
                key = rng.choice(done.keys)
                t0 = time.perf_counter_ns()
                found = stub.QueryByKey(
                    store_pb2.QueryByKeyRequest(topic=TOPIC, key=key, max_count=1), timeout=30
                )
                timings["key"].append(time.perf_counter_ns() - t0)
                if not found.messages:
                    raise RuntimeError(f"key {key} not found")
                msg_id = rng.choice(done.ids)
                t0 = time.perf_counter_ns()
                got = stub.Get(store_pb2.GetRequest(msg_id=msg_id), timeout=30)
                timings["msg-id"].append(time.perf_counter_ns() - t0)
                if not got.found:
                    raise RuntimeError(f"message id {msg_id} not found")
                when = rng.randint(done.times_ms[0], done.times_ms[-1])
                queue = rng.randrange(self.s.queues)
                t0 = time.perf_counter_ns()
                offset = stub.OffsetByTime(
                    store_pb2.OffsetByTimeRequest(topic=TOPIC, queue_id=queue, timestamp_ms=when),
                    timeout=30,
                ).queue_offset
                timings["offset-by-time"].append(time.perf_counter_ns() - t0)
                bounds = stub.QueueRange(
                    store_pb2.QueueRangeRequest(topic=TOPIC, queue_id=queue), timeout=30
                )
                if not bounds.min_offset <= offset <= bounds.max_offset:
                    raise RuntimeError(f"offset by time {when} of queue {queue}: {offset}")
        finally:
            channel.close()
        self.report.lookup_ms = {k: percentiles_ms(v) for k, v in timings.items()}

    def _clean_restart(self) -> None:
        self._phase("clean-restart")
        assert self.store is not None
        self.store.stop()
        seconds = self._start_store()
        line = self._recovery_line()
        self.report.restarts["clean"] = {
            "seconds": round(seconds, 3),
            "checked_bytes": line["max"] - line["start"],
            "redispatched_bytes": line["max"] - line["reput"],
        }

    def _crash_restart(self) -> None:
        """kill -9 with the head producer writing; what recovery re-read against the
        checkpoint: the checkpoint covers every segment before the newest one whose first
        record was stored at or before its horizon (its oldest timestamp less recovery's
        margin), so recovery should read from that segment's start and no earlier."""
        self._phase("crash-restart")
        assert self.store is not None
        time.sleep(self.s.probe_s)
        self.store.kill()
        state = decode_checkpoint((self.root / "store" / "checkpoint").read_bytes())
        horizon = state.min_timestamp() - CRASH_RECOVERY_MARGIN_MS
        covered_to = self._segment_at(horizon)
        seconds = self._start_store()
        line = self._recovery_line()
        self.report.restarts["crash"] = {
            "seconds": round(seconds, 3),
            "reread_bytes": line["max"] - line["start"],
            "commitlog_bytes": line["max"] - line["min"],
            "checkpoint_age_ms": time.time_ns() // 1_000_000 - state.min_timestamp(),
            "not_covered_bytes": line["max"] - covered_to,
        }

    def _segment_at(self, horizon_ms: int) -> int:
        """Start offset of the newest CommitLog segment whose first record was stored at or
        before ``horizon_ms`` (the first segment's when none was)."""
        chosen = -1
        for path in sorted((self.root / "store" / "commitlog").iterdir()):
            with path.open("rb") as f:
                head = f.read(HEAD_BYTES)
            if len(head) < HEAD_BYTES or head[:4] == b"\0\0\0\0":
                continue  # an empty (pre-allocated) segment
            if chosen < 0 or store_timestamp_of(head, 0) <= horizon_ms:
                chosen = int(path.name)
        return max(chosen, 0)

    def _retention(self) -> None:
        self._phase("retention")
        assert self.store is not None
        used = disk_usage_percent(self.root)
        watermark = max(1, math.floor(used) - 1)
        first = self._info()
        self.store.stop()
        self._start_store(forced_clean=watermark)
        probe = HeadProbe(self.store.address, self.s.body_bytes).start()
        start = time.perf_counter()
        try:
            time.sleep(self.s.retention_s)
        finally:
            probe.stop()
        seconds = time.perf_counter() - start
        after = self._info()
        segment = self.s.segment_mb * 2**20
        self.report.retention = {
            "disk_used_percent": round(used, 1),
            "forced_clean_watermark_percent": watermark,
            "seconds": round(seconds, 3),
            "deleted_bytes": after.commitlog_min_offset - first.commitlog_min_offset,
            "deleted_segments": (after.commitlog_min_offset - first.commitlog_min_offset)
            // segment,
            "head_produce_msgs_per_s": round(probe.sent / seconds),
        }
        self.report.head_ms["retention"] = percentiles_ms(probe.take())

    # ----------------------------------------------------------------- all
    def execute(self) -> Report:
        self.root.mkdir(parents=True)
        self.rss.start()
        probe: HeadProbe | None = None
        try:
            self._start_store()
            self._produce_probe("produce-empty")
            done = self._fill()
            self._produce_probe("produce-backlog")
            assert self.store is not None
            probe = HeadProbe(self.store.address, self.s.body_bytes).start()
            self._head_alone(probe)
            self._old_reader(probe)
            probe.stop()
            probe = None
            self._lookups(done)
            self._clean_restart()
            probe = HeadProbe(self.store.address, self.s.body_bytes).start()
            self._crash_restart()
            probe.stop()  # it wrote to the store that was killed
            probe = None
            info = self._info()
            self.report.commitlog_bytes = info.commitlog_max_offset - info.commitlog_min_offset
            self.report.messages_stored = self._stored()
            self.report.disk_bytes = sum(
                p.stat().st_blocks * 512 for p in (self.root / "store").rglob("*") if p.is_file()
            )
            self._retention()
        finally:
            if probe is not None:
                probe.stop()
            self.rss.stop()
            if self.store is not None:
                self.store.stop()
            self._summarize()
        return self.report

    def _summarize(self) -> None:
        """The memory figures, from whatever phases ran."""
        self.report.rss_mib = {
            phase: {name: round(rss / 2**20, 1) for name, rss in row.items()}
            for phase, row in self.rss.by_phase().items()
        }
        self.report.store_file_rss_mib = {
            phase: round(row["store"] / 2**20, 1)
            for phase, row in self.rss.by_phase(file_backed=True).items()
            if "store" in row
        }
        self.report.store_rss_bound_mib = self._rss_bound()

    def _rss_bound(self) -> float:
        r = self.report
        before = r.rss_mib.get("produce-empty", {}).get("store", 0.0)
        record_bytes = r.commitlog_bytes / max(1, r.messages_stored)
        reader_mib_s = r.rates.get("old-reader", 0) * record_bytes / 2**20
        return round(before + self.s.window_mb + SWEEP_INTERVAL_S * reader_mib_s, 1)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def attempt(self, phases: Callable[[], object], keep: bool) -> BaseException | None:
        """Run ``phases`` in the run's directory (removed after unless ``keep``); the
        failure that stopped it, if any (what was measured before it is kept)."""
        try:
            self.root.parent.mkdir(parents=True, exist_ok=True)
            phases()
        except (RuntimeError, OSError) as exc:
            return exc
        finally:
            if not keep:
                self.remove()
        return None


def format_report(r: Report) -> list[str]:
    """The printed report."""
    mb = r.settings["body_bytes"] / 1e6
    lines = [
        f"backlog: {r.settings['messages']:,} messages of {r.settings['body_bytes']} B over "
        f"{r.settings['queues']} queues; CommitLog {r.commitlog_bytes / 2**30:.2f} GiB, "
        f"store directory {r.disk_bytes / 2**30:.2f} GiB",
    ]
    for name, rate in r.rates.items():
        lines.append(f"  {name:<16} {rate:>12,.0f} msg/s {rate * mb:>8.1f} MB/s")
    lines.append(f"  fill, per tenth:       {', '.join(f'{x:,.0f}' for x in r.fill_tenths)}")
    lines.append(f"  old reader, per tenth: {', '.join(f'{x:,.0f}' for x in r.reader_tenths)}")
    for name, p in {**r.head_ms, **{f"lookup {k}": v for k, v in r.lookup_ms.items()}}.items():
        lines.append(
            f"  {name:<22} n={p['count']:<6} p50 {p['p50']} ms  p99 {p['p99']} ms  "
            f"p99.9 {p['p999']} ms  max {p['max']} ms"
        )
    for name, values in {**r.restarts, "retention": r.retention}.items():
        lines.append(f"  {name}: " + ", ".join(f"{k} {v:,}" for k, v in values.items()))
    lines.append(f"  store RSS MiB per tenth of the fill:   {r.fill_store_rss_mib}")
    lines.append(f"  store RSS MiB per tenth of the reader: {r.reader_store_rss_mib}")
    lines.append(
        f"  store RSS bound (before + window + {SWEEP_INTERVAL_S:g} s of the old reader): "
        f"{r.store_rss_bound_mib:,.1f} MiB"
    )
    lines.append(
        f"  store disk reads while the old reader ran: {r.reader_disk_read_bytes / 2**30:.2f} GiB"
    )
    lines.append(f"  store file-backed RSS MiB by phase: {r.store_file_rss_mib}")
    lines.append(f"  store index mappings' RSS MiB after the fill: {r.fill_index_rss_mib}")
    lines.append("  RSS MiB by phase (largest sample):")
    for phase, row in r.rss_mib.items():
        lines.append(f"    {phase:<16} " + ", ".join(f"{k} {v:,.1f}" for k, v in row.items()))
    return lines
