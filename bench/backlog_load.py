"""The clients of ``python -m bench backlog`` (:mod:`bench.backlog`), all over the store's gRPC.

- :class:`Writer`: batches of raw records (the broker's form: ``Append`` with
  ``records``/``record_count`` for one queue), ``IN_FLIGHT`` calls outstanding
  from one thread, queues round-robin. The first record of every batch carries
  the key ``<writer name>-<batch number>`` (unique: one name a writer), and with
  ``key_every_message`` every other record one of its own (``...-<n>-<i>``, as the
  SDK's UNIQ_KEY: an index entry a message); every ``ID_SAMPLE_EVERY``-th batch's
  first message id and key are kept (for the lookups), with the wall time of each
  tenth.
- :class:`HeadProbe`: a producer at a fixed pace (one batch of ``HEAD_BATCH``
  stamped bodies every ``HEAD_PERIOD_S`` to the head topic) and a consumer at
  the head polling ``PullQueues`` from where each queue ended; latency is
  send to delivery of each message (``perf_counter_ns`` in the body: both in
  this process).
- :func:`read_all` (the old reader, run as its own process through
  ``python -m bench.backlog_load``): ``PullQueues`` over every queue from
  offset 0 until each reaches the end it had at the start, printing one JSON
  line per tenth of the backlog read: ``{"read": n, "seconds": t}``.
- :class:`RssSampler`: the resident memory of named processes every
  ``RSS_PERIOD_S`` (psutil), by phase; :func:`mapped_rss`: the resident part of a
  process's mappings of the files in one directory (``/proc/<pid>/smaps``).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click
import grpc

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from boltmq.wire.record import decode_records
from boltmq.wire.record_batch import encode_send_record

TOPIC = "Backlog"
HEAD_TOPIC = "BacklogHead"
IN_FLIGHT = 4
ID_SAMPLE_EVERY = 64
HEAD_BATCH = 16
HEAD_PERIOD_S = 0.01
HEAD_QUEUES = 4
PULL_MESSAGES = 1024
PULL_BYTES = 4 * 2**20
RSS_PERIOD_S = 0.5
CALL_TIMEOUT_S = 60.0
STAMP = struct.Struct(">q")


def stub_for(address: str) -> tuple[grpc.Channel, store_pb2_grpc.StoreServiceStub]:
    channel = sync_channel(address)
    return channel, store_pb2_grpc.StoreServiceStub(channel)


@dataclass
class Progress:
    """What a writer did: messages stored, and when each tenth of the target was reached."""

    stored: int = 0
    seconds: float = 0.0
    tenths: list[tuple[int, float]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    times_ms: list[int] = field(default_factory=list)
    """Wall time (ms) at every tenth: offset-by-time looks these up."""


class Writer:
    """Batched raw appends of ``body_bytes`` bodies over ``queues`` queues."""

    def __init__(
        self,
        address: str,
        queues: int,
        body_bytes: int,
        batch: int,
        name: str = "bk",
        key_every_message: bool = False,
    ) -> None:
        self.channel, self.stub = stub_for(address)
        self.name = name  # keys are <name>-<batch number>: one name per writer
        self.queues, self.batch = queues, batch
        self.key_every_message = key_every_message
        self.body = b"b" * body_bytes
        self.plain = encode_send_record(TOPIC, self.body)
        self.batches = 0

    def _request(self) -> store_pb2.AppendRequest:
        n = self.batches
        self.batches += 1
        keyed = encode_send_record(TOPIC, self.body, keys=[f"{self.name}-{n}"])
        if self.key_every_message:
            rest = b"".join(
                encode_send_record(TOPIC, self.body, keys=[f"{self.name}-{n}-{i}"])
                for i in range(1, self.batch)
            )
        else:
            rest = self.plain * (self.batch - 1)
        return store_pb2.AppendRequest(
            records=keyed + rest,
            record_count=self.batch,
            topic=TOPIC,
            queue_id=n % self.queues,
        )

    def write(self, count: int, until: Callable[[], bool] | None = None) -> Progress:
        """Append ``count`` messages (rounded up to whole batches), or until ``until()``."""
        progress = Progress()
        pending: deque[tuple[int, grpc.Future]] = deque()
        start = time.perf_counter()
        next_tenth = 1

        def settle() -> None:
            nonlocal next_tenth
            number, future = pending.popleft()
            answer = future.result()
            if any(s != message_pb2.PUT_OK for s in answer.statuses):
                raise RuntimeError(f"append refused: {dict(answer.errors) or answer.statuses}")
            progress.stored += len(answer.statuses)
            if number % ID_SAMPLE_EVERY == 0:
                progress.ids.append(f"{answer.msg_id_prefix}{answer.commitlog_offsets[0]:016X}")
                progress.keys.append(f"{self.name}-{number}")
            while progress.stored >= next_tenth * count / 10 and next_tenth <= 10:
                progress.tenths.append((progress.stored, time.perf_counter() - start))
                progress.times_ms.append(time.time_ns() // 1_000_000)
                next_tenth += 1

        sent = 0
        while sent < count and not (until is not None and until()):
            number = self.batches
            pending.append((number, self.stub.Append.future(self._request(), CALL_TIMEOUT_S)))
            sent += self.batch
            if len(pending) >= IN_FLIGHT:
                settle()
        while pending:
            settle()
        progress.seconds = time.perf_counter() - start
        return progress

    def close(self) -> None:
        self.channel.close()


def _ends(stub: store_pb2_grpc.StoreServiceStub, topic: str) -> dict[int, int]:
    answer = stub.ListQueues(store_pb2.ListQueuesRequest(topic=topic), timeout=CALL_TIMEOUT_S)
    return {q.queue_id: q.max_offset for q in answer.queues}


class HeadProbe:
    """A paced producer and a consumer at the head; latency samples by window."""

    def __init__(self, address: str, body_bytes: int) -> None:
        self.address, self.body_bytes = address, body_bytes
        self.samples: list[int] = []
        self.sent = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(self) -> HeadProbe:
        channel, stub = stub_for(self.address)
        self._channels = [channel]
        ends = _ends(stub, HEAD_TOPIC)
        self.offsets = {q: ends.get(q, 0) for q in range(HEAD_QUEUES)}
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._guard(self._produce, stub), daemon=True),
            threading.Thread(target=self._guard(self._consume, stub), daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def _guard(
        self,
        loop: Callable[[store_pb2_grpc.StoreServiceStub], None],
        stub: store_pb2_grpc.StoreServiceStub,
    ) -> Callable[[], None]:
        def run() -> None:
            try:
                loop(stub)
            except BaseException as exc:  # reported by stop()
                self.errors.append(exc)

        return run

    def take(self) -> list[int]:
        """The latency samples (ns) since the last take."""
        with self._lock:
            taken, self.samples = self.samples, []
        return taken

    def _produce(self, stub: store_pb2_grpc.StoreServiceStub) -> None:
        pad = b"h" * max(0, self.body_bytes - STAMP.size)
        n = 0
        next_at = time.perf_counter()
        while not self._stop.is_set():
            records = b"".join(
                encode_send_record(HEAD_TOPIC, STAMP.pack(time.perf_counter_ns()) + pad)
                for _ in range(HEAD_BATCH)
            )
            request = store_pb2.AppendRequest(
                records=records, record_count=HEAD_BATCH, topic=HEAD_TOPIC, queue_id=n % HEAD_QUEUES
            )
            try:
                stub.Append(request, timeout=CALL_TIMEOUT_S)
                self.sent += HEAD_BATCH
            except grpc.RpcError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)  # the store is restarting: the producer waits for it
            n += 1
            next_at += HEAD_PERIOD_S
            time.sleep(max(0.0, next_at - time.perf_counter()))

    def _consume(self, stub: store_pb2_grpc.StoreServiceStub) -> None:
        while not self._stop.is_set():
            pulls = [
                store_pb2.PullRequest(
                    topic=HEAD_TOPIC, queue_id=q, queue_offset=o, max_messages=PULL_MESSAGES
                )
                for q, o in self.offsets.items()
            ]
            try:
                answer = stub.PullQueues(
                    store_pb2.PullQueuesRequest(pulls=pulls), timeout=CALL_TIMEOUT_S
                )
            except grpc.RpcError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)
                continue
            got = 0
            now_samples = []
            for q, one in zip(self.offsets, answer.answers, strict=False):
                if one.record_count:
                    now = time.perf_counter_ns()
                    for record in decode_records(one.records, check_crc=False):
                        now_samples.append(now - STAMP.unpack_from(record.body)[0])
                    got += one.record_count
                if one.next_begin_offset > self.offsets[q]:
                    self.offsets[q] = one.next_begin_offset
            with self._lock:
                self.samples += now_samples
            if not got:
                time.sleep(0.001)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        for channel in self._channels:
            channel.close()
        if self.errors:
            raise RuntimeError(f"head probe failed: {self.errors[0]!r}") from self.errors[0]


def read_all(
    address: str, topic: str, out: Callable[[str], None], calls_ns: list[int] | None = None
) -> int:
    """Read every queue of ``topic`` from offset 0 to the end it had at the start; the time
    of each PullQueues call goes into ``calls_ns`` when given."""
    channel, stub = stub_for(address)
    try:
        ends = {q: e for q, e in _ends(stub, topic).items() if e > 0}
        total = sum(ends.values())
        offsets = dict.fromkeys(ends, 0)
        read, next_tenth, start = 0, 1, time.perf_counter()
        while offsets:
            pulls = [
                store_pb2.PullRequest(
                    topic=topic,
                    queue_id=q,
                    queue_offset=o,
                    max_messages=PULL_MESSAGES,
                    raw_records=True,
                )
                for q, o in offsets.items()
            ]
            called = time.perf_counter_ns()
            answer = stub.PullQueues(
                store_pb2.PullQueuesRequest(pulls=pulls, max_bytes=PULL_BYTES),
                timeout=CALL_TIMEOUT_S,
            )
            if calls_ns is not None:
                calls_ns.append(time.perf_counter_ns() - called)
            for pull, one in zip(pulls, answer.answers, strict=False):
                q = pull.queue_id
                read += one.record_count
                offsets[q] = max(offsets[q], one.next_begin_offset)
                if offsets[q] >= ends[q]:
                    del offsets[q]
            while read >= next_tenth * total / 10 and next_tenth <= 10:
                out(json.dumps({"read": read, "seconds": round(time.perf_counter() - start, 3)}))
                next_tenth += 1
        return read
    finally:
        channel.close()


class RssSampler:
    """Resident memory (bytes) of named processes, sampled in a thread, by phase."""

    def __init__(self) -> None:
        self.pids: dict[str, int] = {"bench": os.getpid()}
        self.phase = "start"
        self.samples: list[tuple[str, str, int, float, int]] = []
        """(phase, process name, rss bytes, perf_counter seconds, file-backed rss bytes)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(RSS_PERIOD_S):
            for name, pid in list(self.pids.items()):
                try:
                    memory = psutil.Process(pid).memory_info()
                except psutil.Error:  # the process is gone (restarted, finished): no sample
                    continue
                self.samples.append(
                    (self.phase, name, memory.rss, time.perf_counter(), memory.shared)
                )

    def by_phase(self, file_backed: bool = False) -> dict[str, dict[str, int]]:
        """Per phase, each process's largest sample (of its file-backed part, mapped
        CommitLog and consume-queue pages, with ``file_backed``)."""
        table: dict[str, dict[str, int]] = {}
        for phase, name, rss, _, shared in self.samples:
            row = table.setdefault(phase, {})
            row[name] = max(row.get(name, 0), shared if file_backed else rss)
        return table

    def by_tenth(self, name: str, start: float, tenths: Sequence[tuple[int, float]]) -> list[int]:
        """``name``'s largest sample within each tenth of a phase that began at ``start``
        (perf_counter) and passed ``tenths`` (cumulative count, seconds since start)."""
        bounds = [start, *(start + seconds for _, seconds in tenths)]
        return [
            max(
                (rss for _, who, rss, at, _ in self.samples if who == name and lo <= at <= hi),
                default=0,
            )
            for lo, hi in zip(bounds, bounds[1:], strict=False)
        ]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def mapped_rss(pid: int, directory: Path) -> int:
    """Resident bytes of ``pid``'s mappings of files in ``directory`` (smaps ``Rss``)."""
    prefix = f"{directory.resolve()}/"
    total, inside = 0, False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                inside = line.rstrip().split(maxsplit=5)[-1].startswith(prefix)
            elif inside and first == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


def tenth_rates(tenths: Sequence[tuple[int, float]]) -> list[float]:
    """msg/s of each tenth from cumulative (count, seconds) points."""
    rates, before = [], (0, 0.0)
    for count, seconds in tenths:
        span = seconds - before[1]
        rates.append((count - before[0]) / span if span > 0 else 0.0)
        before = (count, seconds)
    return rates


@click.command()
@click.option("--store", "address", required=True)
@click.option("--topic", default=TOPIC, show_default=True)
def reader_main(address: str, topic: str) -> None:
    """The old reader: every queue of a topic from offset 0, one JSON line per tenth, then
    ``{"done": n, "calls_ns": [...]}`` (each PullQueues call's time, sorted)."""
    calls_ns: list[int] = []
    read = read_all(address, topic, lambda line: print(line, flush=True), calls_ns)
    print(json.dumps({"done": read, "calls_ns": sorted(calls_ns)}), flush=True)


if __name__ == "__main__":
    reader_main(sys.argv[1:])
