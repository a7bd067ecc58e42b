"""``python -m bench ha``: replication benchmarks on real processes (docs/ha.md).

Each scenario starts its own master store + HA service and replica store + HA
service (``broker_role=SLAVE``, following the master statically) in a
temporary directory, and writes to the master store's Append directly (no
broker in the way: what is measured is replication).

- ``catchup``: the master holds ``--mib`` MiB before the replica starts empty
  with ``replica_start=FIRST_SEGMENT``; MB/s is the copy rate from the replica
  HA service's READY line until both ends are equal. The notes also give each
  process's CPU seconds per 256 MiB copied (psutil, from that READY line to
  the end), and the run fails (:class:`ReplicaDiffers`) unless the replica's
  CommitLog is byte-identical to the master's and every consume queue has
  the same range on both.
- ``follow``: batches of 1 KiB messages at ``--rate`` msg/s for ``--seconds``
  (each batch to one queue as raw records, the form a broker appends in)
  while the replica follows; the notes give the lag in MB (sampled every
  50 ms while writing: p50, p99, max, and p50 and max of each third of the
  run), how long the replica needed after the last write, and each process's
  CPU seconds over the run.
- ``sync``: the same batched produce (``--threads`` writers, ``--batch``
  messages a call) against an ASYNC_MASTER and a SYNC_MASTER group; latency
  per call.

These print numbers; they assert nothing.
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.report import BenchResult, nearest_rank, result, timed_threads
from boltmq.cli.dev.launcher import ServiceProcess
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from boltmq.wire.record_batch import encode_send_record

SEGMENT_BYTES = 64 * 1024 * 1024
STORE_SETTINGS = (
    f"mapped_file_size_commitlog={SEGMENT_BYTES}",
    "max_hash_slot_num=100000",
    "max_index_num=400000",
    "disk_max_used_space_ratio=100",
    "disk_space_clean_forcibly_ratio=100",
    "disk_space_warning_level_ratio=100",
)
"""Big segments; the cleaner never deletes what a run is still comparing."""
HA_SETTINGS = (
    "heartbeat_interval_ms=1000",
    "housekeeping_interval_ms=10000",
    "role_check_interval_ms=500",
)
TOPIC = "BenchHA"
QUEUES = 8
FOLLOW_IN_FLIGHT = 4
"""follow: Append calls in flight at once (the pace is kept by the clock)."""
LAG_SAMPLE_S = 0.05
CATCH_UP_TIMEOUT_S = 600.0
CPU_PER_BYTES = 256 * 2**20
"""CPU seconds are given per this much CommitLog copied (256 MiB)."""
COMPARE_BLOCK = 4 * 2**20


class ReplicaDiffers(RuntimeError):
    """After catch-up the replica's CommitLog or consume queues differ from the master's."""


@dataclass
class _Group:
    master: store_pb2_grpc.StoreServiceStub
    replica: store_pb2_grpc.StoreServiceStub
    start_replica: Callable[[], None]
    processes: dict[str, ServiceProcess]
    """By role: master-store, master-ha, replica-store, replica-ha (once started)."""
    root: Path


def _info(stub: store_pb2_grpc.StoreServiceStub) -> store_pb2.StoreInfo:
    info: store_pb2.StoreInfo = stub.GetStoreInfo(store_pb2.GetStoreInfoRequest(), timeout=10)
    return info


@contextmanager
def _group(
    directory: Path | None, master_role: str = "ASYNC_MASTER", replica_now: bool = True
) -> Iterator[_Group]:
    """A master and a replica, each a store and an HA service; stopped at the end."""
    started: list[ServiceProcess] = []
    processes: dict[str, ServiceProcess] = {}
    channels = []
    with tempfile.TemporaryDirectory(dir=directory, prefix="bench-ha-") as tmp:
        root = Path(tmp)

        def launch(name: str, service: str, *settings: str) -> ServiceProcess:
            proc = ServiceProcess(service, root / "logs", *settings).start()
            started.append(proc)
            processes[name] = proc
            return proc

        def stub(proc: ServiceProcess) -> store_pb2_grpc.StoreServiceStub:
            chan = sync_channel(proc.address)
            channels.append(chan)
            return store_pb2_grpc.StoreServiceStub(chan)

        try:
            master_store = launch(
                "master-store",
                "store",
                f"root_dir={root / 'master'}",
                f"broker_role={master_role}",
                *STORE_SETTINGS,
            )
            master_ha = launch(
                "master-ha",
                "ha",
                f"store_address={master_store.address}",
                "replica_start=FIRST_SEGMENT",
                *HA_SETTINGS,
            )
            replica_store = launch(
                "replica-store",
                "store",
                f"root_dir={root / 'replica'}",
                "broker_role=SLAVE",
                *STORE_SETTINGS,
            )

            def start_replica() -> None:
                launch(
                    "replica-ha",
                    "ha",
                    f"store_address={replica_store.address}",
                    f"master_address={master_ha.address}",
                    *HA_SETTINGS,
                )

            if replica_now:
                start_replica()
            yield _Group(stub(master_store), stub(replica_store), start_replica, processes, root)
        finally:
            for chan in channels:
                chan.close()
            for proc in reversed(started):
                proc.stop()


def _batch(body_bytes: int, batch: int, queue_id: int) -> store_pb2.AppendRequest:
    """``batch`` messages to one queue as raw records: what a broker sends its store."""
    record = encode_send_record(TOPIC, b"x" * body_bytes)
    return store_pb2.AppendRequest(
        records=record * batch, record_count=batch, topic=TOPIC, queue_id=queue_id % QUEUES
    )


def _wait_equal(group: _Group) -> float:
    """Seconds until the replica's CommitLog ends where the master's does."""
    start = time.perf_counter()
    deadline = start + CATCH_UP_TIMEOUT_S
    target = _info(group.master).commitlog_max_offset
    while _info(group.replica).commitlog_max_offset < target:
        if time.perf_counter() > deadline:
            raise TimeoutError("the replica did not catch up")
        time.sleep(0.005)
    return time.perf_counter() - start


def _cpu_seconds(processes: dict[str, ServiceProcess]) -> dict[str, float]:
    """User + system CPU seconds each process has used so far."""
    import psutil

    seconds = {}
    for name, proc in processes.items():
        assert proc.proc is not None
        times = psutil.Process(proc.proc.pid).cpu_times()
        seconds[name] = times.user + times.system
    return seconds


def _check_identical(group: _Group) -> None:
    """ReplicaDiffers unless both CommitLogs hold the same bytes and queues the same ranges."""
    master, replica = _info(group.master), _info(group.replica)
    if (replica.commitlog_min_offset, replica.commitlog_max_offset) != (
        master.commitlog_min_offset,
        master.commitlog_max_offset,
    ):
        raise ReplicaDiffers(
            f"replica CommitLog [{replica.commitlog_min_offset}, "
            f"{replica.commitlog_max_offset}) != master's "
            f"[{master.commitlog_min_offset}, {master.commitlog_max_offset})"
        )
    segment, end = master.segment_bytes, master.commitlog_max_offset
    for start in range(master.commitlog_min_offset, end, segment):
        name = f"{start:020d}"
        length = min(segment, end - start)
        with (
            (group.root / "master" / "commitlog" / name).open("rb") as ours,
            (group.root / "replica" / "commitlog" / name).open("rb") as theirs,
        ):
            for position in range(0, length, COMPARE_BLOCK):
                size = min(COMPARE_BLOCK, length - position)
                if ours.read(size) != theirs.read(size):
                    raise ReplicaDiffers(
                        f"CommitLog bytes differ in [{start + position}, {start + position + size})"
                    )
    request = store_pb2.ListQueuesRequest()
    queues = [
        sorted(
            (q.topic, q.queue_id, q.min_offset, q.max_offset)
            for q in stub.ListQueues(request, timeout=10).queues
        )
        for stub in (group.master, group.replica)
    ]
    if queues[0] != queues[1]:
        raise ReplicaDiffers(f"consume queues differ: master {queues[0]}, replica {queues[1]}")


def bench_catchup(mib: int, body_bytes: int, directory: Path | None) -> BenchResult:
    """Copy rate of an empty replica that starts behind ``mib`` MiB; CPU per process."""
    batch = 256
    with _group(directory, replica_now=False) as group:
        calls = max(1, mib * 2**20 // (batch * body_bytes))
        for n in range(calls):
            group.master.Append(_batch(body_bytes, batch, n), timeout=30)
        total = _info(group.master).commitlog_max_offset
        group.start_replica()  # returns at its READY line: the follower is connecting
        cpu_before = _cpu_seconds(group.processes)
        seconds = _wait_equal(group)
        cpu_after = _cpu_seconds(group.processes)
        _wait_dispatched(group.replica)
        _check_identical(group)
    scale = CPU_PER_BYTES / total
    cpu = ", ".join(
        f"{name} {(cpu_after[name] - cpu_before[name]) * scale:.2f}" for name in sorted(cpu_after)
    )
    r = result(
        "ha-catchup",
        calls * batch,
        seconds,
        body_bytes,
        [],
        f"{total / seconds / 1e6:.1f} MB/s of CommitLog copied ({total / 2**20:.0f} MiB, "
        f"from the replica HA's READY line); CPU s per 256 MiB: {cpu}; "
        f"replica byte-identical",
    )
    return r


def _wait_dispatched(stub: store_pb2_grpc.StoreServiceStub) -> None:
    """Until the store has dispatched its whole CommitLog into queues and index."""
    deadline = time.perf_counter() + CATCH_UP_TIMEOUT_S
    while True:
        info = _info(stub)
        if info.dispatched_offset >= info.commitlog_max_offset:
            return
        if time.perf_counter() > deadline:
            raise TimeoutError("the replica did not dispatch what it copied")
        time.sleep(0.005)


def bench_follow(
    seconds: float, rate: int, body_bytes: int, batch: int, directory: Path | None
) -> BenchResult:
    """Lag in bytes while the master takes ``rate`` msg/s for ``seconds``."""
    lags: list[int] = []
    with _group(directory) as group:
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                master_end = _info(group.master).commitlog_max_offset
                lags.append(max(0, master_end - _info(group.replica).commitlog_max_offset))
                time.sleep(LAG_SAMPLE_S)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        interval_s = batch / rate
        calls = max(1, int(seconds * rate / batch))
        requests = [_batch(body_bytes, batch, queue) for queue in range(QUEUES)]
        flying: list[grpc.Future] = []
        start = time.perf_counter()
        for n in range(calls):
            due = start + n * interval_s
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            if len(flying) >= FOLLOW_IN_FLIGHT:  # a call's latency must not slow the pace
                flying.pop(0).result()
            flying.append(group.master.Append.future(requests[n % QUEUES], timeout=30))
        for call in flying:
            call.result()
        produced_s = time.perf_counter() - start
        stop.set()
        sampler.join()
        cpu = _cpu_seconds(group.processes)
        drain_s = _wait_equal(group)
    thirds = [sorted(lags[k * len(lags) // 3 : (k + 1) * len(lags) // 3]) or [0] for k in range(3)]
    cpu_text = ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(cpu.items()))
    return result(
        "ha-follow",
        calls * batch,
        produced_s,
        body_bytes,
        [],
        f"target {rate} msg/s; lag MB p50 {_mb(_pick(lags, 0.5))} p99 "
        f"{_mb(_pick(lags, 0.99))} max {_mb(max(lags, default=0))}; per third of "
        f"the run p50 {[_mb(_pick(third, 0.5)) for third in thirds]} max "
        f"{[_mb(third[-1]) for third in thirds]} (growing when each is larger); "
        f"caught up {drain_s * 1000:.0f} ms after the last write; CPU s: {cpu_text}",
    )


def _pick(values: list[int], q: float) -> int:
    """The ``q`` quantile of ``values`` (0 when there are none)."""
    return nearest_rank(sorted(values) or [0], q)


def _mb(size: int) -> float:
    return round(size / 1e6, 1)


def bench_sync(
    messages: int, body_bytes: int, batch: int, threads: int, directory: Path | None
) -> list[BenchResult]:
    """Batched produce against ASYNC_MASTER, then SYNC_MASTER, each with a replica."""
    results = []
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        with _group(directory, master_role=role) as group:
            group.master.Append(_batch(body_bytes, batch, 0), timeout=30)  # warm
            _wait_equal(group)
            per_thread = max(1, messages // threads // batch)
            statuses: set[int] = set()

            def setup(
                n: int, group: _Group = group, statuses: set[int] = statuses
            ) -> Callable[[], object]:
                request = _batch(body_bytes, batch, n)

                def call() -> None:
                    statuses.update(group.master.Append(request, timeout=30).statuses)

                return call

            seconds, samples = timed_threads(threads, setup, per_thread)
        names = sorted(message_pb2.PutMessageStatus.Name(s) for s in statuses)  # type: ignore[arg-type]
        results.append(
            result(
                f"ha-produce-{role.lower()}",
                per_thread * batch * threads,
                seconds,
                body_bytes,
                samples,
                f"batch {batch}, {threads} threads, latency per call; statuses {', '.join(names)}",
            )
        )
    return results
