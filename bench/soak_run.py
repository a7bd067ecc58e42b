"""``python -m bench soak``: the local cluster under a steady load for a long time.

:func:`run_soak` starts a :class:`~boltmq.cli.dev.local_cluster.LocalCluster` (what
``boltmq dev`` runs: registry, store, broker as processes, on free ports, in a
temporary directory unless one is given), then ``producers`` threads send
``batch`` messages per call at ``rate`` msg/s in total while ``consumers``
PushConsumers of one group read them, for ``seconds``. Every
``sample_seconds`` it records the window's throughput, p99 send latency (per
call), end-to-end latency (send to listener) and each service process's
memory, open file descriptors and threads (psutil). After the load, the
consumers get ``drain_timeout_s`` to receive every acknowledged message, the
cluster is stopped with SIGTERM and the run is judged by the rules of
:mod:`bench.soak_report`, which also writes the CSV/JSON/PNG files.

Message body: ``SEND_HEADER`` (send time in ``perf_counter_ns``, producer
index, sequence number; big-endian) padded to ``size`` bytes. Which sequence
numbers were acknowledged and which arrived is kept as one bitmap per producer,
so a 10-minute run at thousands of msg/s costs the client kilobytes. The
producers start once every consumer has rebalanced after the last one joined,
so a run without faults delivers no duplicate.
"""

from __future__ import annotations

import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.soak_report import (
    MIB,
    Limits,
    ProcessSample,
    Sample,
    Verdict,
    judge_handles,
    judge_memory,
    percentile_ms,
    write_outputs,
)
from boltmq.cli.dev.launcher import ServiceProcess
from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.kernel import allocator
from boltmq.message import Message, ReceivedMessage, SendStatus
from boltmq.options import ProducerOptions, PushConsumerOptions
from boltmq.producer import Producer
from boltmq.push_consumer import PushConsumer

SEND_HEADER = struct.Struct(">qII")
TOPIC = "SoakTopic"
GROUP = "SOAK_CONSUMER"
STORE_SETTINGS = (
    "disk_max_used_space_ratio=100",
    "disk_space_clean_forcibly_ratio=100",
    "disk_space_warning_level_ratio=100",
)
"""How full this machine's disk is must not make the cleaner delete what the run
still has to read back."""
BROKER_SETTINGS = ("client_scan_interval_ms=1000",)
REBALANCE_INTERVAL_MS = 2_000
"""Consumers share the queues within seconds of starting, not after 20 s."""
SEND_TIMEOUT_MS = 10_000
MIN_SAMPLES_PER_HALF = 3


class SoakError(ValueError):
    """A soak specification that cannot be run (named so the CLI prints one line)."""


@dataclass(frozen=True)
class SoakSpec:
    """What to run; every field is validated by :meth:`check`."""

    seconds: float = 600.0
    rate: int = 1000
    producers: int = 2
    consumers: int = 2
    batch: int = 10
    size: int = 1024
    sample_seconds: float = 5.0
    drain_timeout_s: float = 60.0
    limits: Limits = field(default_factory=Limits)

    def check(self) -> None:
        """SoakError naming the first unusable field."""
        if self.size < SEND_HEADER.size:
            raise SoakError(f"size must be at least {SEND_HEADER.size} bytes (the header)")
        if min(self.producers, self.consumers, self.batch) < 1:
            raise SoakError("producers, consumers and batch must be at least 1")
        if self.rate < self.producers * self.batch / 10:
            raise SoakError(f"rate {self.rate} msg/s is below one batch per 10 s per producer")
        if self.sample_seconds <= 0 or self.drain_timeout_s <= 0:
            raise SoakError("sample_seconds and drain_timeout_s must be positive")
        if self.seconds < 2 * MIN_SAMPLES_PER_HALF * self.sample_seconds:
            raise SoakError(
                f"seconds must be at least {2 * MIN_SAMPLES_PER_HALF} samples "
                f"({2 * MIN_SAMPLES_PER_HALF * self.sample_seconds:g} s) so each "
                "half of the run can be judged"
            )
        if self.limits.rss_slope_max_mib_per_min < 0 or self.limits.fd_slack < 0:
            raise SoakError("the memory slope limit and the fd slack must not be negative")


class _Bitmap:
    """A growable set of small non-negative integers."""

    def __init__(self) -> None:
        self.bits = bytearray()

    def add(self, n: int) -> bool:
        """Set bit ``n``; False if it was already set."""
        index, mask = n >> 3, 1 << (n & 7)
        if index >= len(self.bits):
            self.bits.extend(bytes(index - len(self.bits) + 1024))
        if self.bits[index] & mask:
            return False
        self.bits[index] |= mask
        return True

    def missing_from(self, other: _Bitmap) -> int:
        """How many members of ``other`` this set lacks."""
        mine = self.bits.ljust(len(other.bits), b"\0")
        return sum(
            bin(theirs & ~ours & 0xFF).count("1")
            for ours, theirs in zip(mine, other.bits, strict=False)
        )


@dataclass
class _Ledger:
    """Acknowledged and received sequence numbers, and the current window's figures."""

    producers: int
    acked: list[_Bitmap] = field(default_factory=list)
    received: list[_Bitmap] = field(default_factory=list)
    acked_count: int = 0
    received_count: int = 0
    duplicates: int = 0
    failed_sends: int = 0
    window_sent: int = 0
    window_received: int = 0
    window_send_ns: list[int] = field(default_factory=list)
    window_e2e_ns: list[int] = field(default_factory=list)
    all_send_ns: list[int] = field(default_factory=list)
    all_e2e_ns: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.acked = [_Bitmap() for _ in range(self.producers)]
        self.received = [_Bitmap() for _ in range(self.producers)]

    def on_sent(self, producer: int, seqs: range, ok: list[bool], call_ns: int) -> None:
        with self.lock:
            for seq, acked in zip(seqs, ok, strict=True):
                if acked:
                    self.acked[producer].add(seq)
            count = sum(ok)
            self.acked_count += count
            self.failed_sends += len(ok) - count
            self.window_sent += count
            self.window_send_ns.append(call_ns)

    def on_received(self, messages: list[ReceivedMessage]) -> None:
        now = time.perf_counter_ns()
        with self.lock:
            for m in messages:
                body = m.body
                if len(body) < SEND_HEADER.size:
                    continue  # the warm-up message that created the topic
                sent_ns, producer, seq = SEND_HEADER.unpack_from(body)
                if producer >= self.producers or not self.received[producer].add(seq):
                    self.duplicates += 1
                    continue
                self.received_count += 1
                self.window_received += 1
                self.window_e2e_ns.append(now - sent_ns)

    def cut_window(self, seconds: float) -> tuple[float, float, list[int], list[int]]:
        """(sent/s, received/s, send ns, e2e ns) of the window now ending; a new one starts."""
        with self.lock:
            out = (
                self.window_sent / seconds,
                self.window_received / seconds,
                self.window_send_ns,
                self.window_e2e_ns,
            )
            self.all_send_ns += self.window_send_ns
            self.all_e2e_ns += self.window_e2e_ns
            self.window_sent = self.window_received = 0
            self.window_send_ns, self.window_e2e_ns = [], []
        return out

    def missing(self) -> int:
        """Acknowledged messages no consumer has received."""
        with self.lock:
            return sum(r.missing_from(a) for r, a in zip(self.received, self.acked, strict=True))


@dataclass
class SoakResult:
    """The samples, the summary and the verdicts of one run."""

    samples: list[Sample]
    summary: dict[str, object]
    verdicts: list[Verdict]
    files: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)


def run_soak(
    spec: SoakSpec,
    out_dir: Path,
    data_dir: Path | None = None,
    progress: Callable[[Sample], None] | None = None,
) -> SoakResult:
    """Run the soak described by ``spec``; write its files into ``out_dir``."""
    spec.check()
    allocator.keep_freed_memory()
    with _cluster(data_dir) as cluster:
        registry = cluster.registry
        assert registry is not None
        ledger = _Ledger(spec.producers)
        samples, exit_codes, alive = _load(spec, cluster, registry.address, ledger, progress)
    summary = _summary(spec, ledger, samples, exit_codes)
    verdicts = (
        judge_memory(samples, spec.limits)
        + judge_handles(samples, spec.limits)
        + _delivery_verdicts(ledger, exit_codes, alive)
    )
    result = SoakResult(samples, summary, verdicts)
    result.files = write_outputs(out_dir, asdict(spec), summary, verdicts, samples)
    return result


@contextmanager
def _cluster(data_dir: Path | None) -> Iterator[LocalCluster]:
    with tempfile.TemporaryDirectory(prefix="boltmq-soak-") as tmp:
        root = data_dir or Path(tmp)
        cluster = LocalCluster(
            ClusterSpec(root, store_settings=STORE_SETTINGS, broker_settings=BROKER_SETTINGS)
        ).start()
        try:
            yield cluster
        finally:
            cluster.stop()


def _load(
    spec: SoakSpec,
    cluster: LocalCluster,
    registry: str,
    ledger: _Ledger,
    progress: Callable[[Sample], None] | None,
) -> tuple[list[Sample], list[int | None], bool]:
    """Run producers, consumers and the sampler; (samples, exit codes, all stayed up)."""
    processes = _named_processes(cluster)
    stop = threading.Event()
    with Producer(
        registry, "SOAK_PRODUCER", options=ProducerOptions(send_timeout_ms=SEND_TIMEOUT_MS)
    ) as producer:
        producer.send(Message(topic=TOPIC, body=b"warm-up"))  # creates the topic
        consumers = [
            PushConsumer(
                registry,
                GROUP,
                {TOPIC: "*"},
                ledger.on_received,
                options=PushConsumerOptions(
                    pull_batch_size=256,
                    consume_batch_max_size=256,
                    rebalance_interval_ms=REBALANCE_INTERVAL_MS,
                ),
            ).start()
            for _ in range(spec.consumers)
        ]
        # A member takes its share when it starts, but the members started before it
        # give theirs up only at their next rebalance: until then both read the moved
        # queues (docs/reliability.md, duplicates). The load starts once every member
        # has rebalanced, so a duplicate in the run means a fault, not the start.
        for consumer in consumers:
            consumer.rebalance()
        try:
            threads = [
                threading.Thread(
                    target=_produce,
                    args=(spec, n, producer, ledger, stop),
                    name=f"soak-producer-{n}",
                    daemon=True,
                )
                for n in range(spec.producers)
            ]
            for t in threads:
                t.start()
            samples = _sample_until(spec, processes, ledger, progress)
            stop.set()
            for t in threads:
                t.join()
            _drain(spec, ledger)
        finally:
            for consumer in consumers:
                consumer.shutdown()
    alive = all(p.alive() for p in processes.values())
    return samples, cluster.stop(), alive


def _named_processes(cluster: LocalCluster) -> dict[str, ServiceProcess]:
    names: dict[str, ServiceProcess] = {}
    for process in cluster.processes():
        name = process.service
        while name in names:
            name += "'"
        names[name] = process
    return names


def _produce(
    spec: SoakSpec, index: int, producer: Producer, ledger: _Ledger, stop: threading.Event
) -> None:
    """Send ``batch`` messages every interval until ``stop``; a late call does not burst."""
    interval = spec.batch * spec.producers / spec.rate
    pad = b"x" * (spec.size - SEND_HEADER.size)
    seq = 0
    next_at = time.monotonic()
    while not stop.is_set():
        seqs = range(seq, seq + spec.batch)
        t0 = time.perf_counter_ns()
        messages = [Message(topic=TOPIC, body=SEND_HEADER.pack(t0, index, n) + pad) for n in seqs]
        try:
            ok = [r.status is SendStatus.SEND_OK for r in producer.send_batch(messages)]
        except Exception:  # noqa: BLE001 - a failed send is counted, the load goes on
            ok = [False] * len(messages)
        ledger.on_sent(index, seqs, ok, time.perf_counter_ns() - t0)
        seq += spec.batch
        next_at = max(next_at + interval, time.monotonic())
        stop.wait(next_at - time.monotonic())


def _sample_until(
    spec: SoakSpec,
    processes: dict[str, ServiceProcess],
    ledger: _Ledger,
    progress: Callable[[Sample], None] | None,
) -> list[Sample]:
    import psutil

    handles = {
        name: psutil.Process(p.proc.pid) for name, p in processes.items() if p.proc is not None
    }
    samples: list[Sample] = []
    start = last = time.monotonic()
    while last - start < spec.seconds:
        time.sleep(max(0.0, last + spec.sample_seconds - time.monotonic()))
        now = time.monotonic()
        sent, received, send_ns, e2e_ns = ledger.cut_window(now - last)
        last = now
        sample = Sample(
            round(now - start, 2),
            round(sent, 1),
            round(received, 1),
            percentile_ms(send_ns, 0.99),
            percentile_ms(e2e_ns, 0.50),
            percentile_ms(e2e_ns, 0.99),
            _process_samples(handles),
        )
        samples.append(sample)
        if progress is not None:
            progress(sample)
    return samples


def _process_samples(handles: dict[str, object]) -> dict[str, ProcessSample]:
    import psutil

    out = {}
    for name, handle in handles.items():
        assert isinstance(handle, psutil.Process)
        try:
            with handle.oneshot():
                memory = handle.memory_info()
                out[name] = ProcessSample(
                    round(memory.rss / MIB, 2),
                    round((memory.rss - memory.shared) / MIB, 2),
                    handle.num_fds(),
                    handle.num_threads(),
                )
        except psutil.NoSuchProcess:
            continue  # judged by the "stayed up" rule
    return out


def _drain(spec: SoakSpec, ledger: _Ledger) -> None:
    deadline = time.monotonic() + spec.drain_timeout_s
    while ledger.missing() and time.monotonic() < deadline:
        time.sleep(0.2)


def _summary(
    spec: SoakSpec, ledger: _Ledger, samples: list[Sample], exit_codes: list[int | None]
) -> dict[str, object]:
    ledger.cut_window(1.0)
    return {
        "seconds": spec.seconds,
        "acknowledged": ledger.acked_count,
        "received": ledger.received_count,
        "missing": ledger.missing(),
        "duplicates": ledger.duplicates,
        "failed_sends": ledger.failed_sends,
        "sent_per_s_mean": round(ledger.acked_count / spec.seconds, 1),
        "send_p50_ms": percentile_ms(ledger.all_send_ns, 0.50),
        "send_p99_ms": percentile_ms(ledger.all_send_ns, 0.99),
        "e2e_p50_ms": percentile_ms(ledger.all_e2e_ns, 0.50),
        "e2e_p99_ms": percentile_ms(ledger.all_e2e_ns, 0.99),
        "exit_codes": exit_codes,
        "processes": {
            name: {
                "anon_mib_first": samples[0].processes[name].anon_mib,
                "anon_mib_last": samples[-1].processes[name].anon_mib,
                "fds_first": samples[0].processes[name].fds,
                "fds_last": samples[-1].processes[name].fds,
            }
            for name in samples[0].processes
            if name in samples[-1].processes
        },
    }


def _delivery_verdicts(ledger: _Ledger, exit_codes: list[int | None], alive: bool) -> list[Verdict]:
    missing = ledger.missing()
    return [
        Verdict(
            "nothing lost",
            "cluster",
            missing == 0 and ledger.acked_count > 0,
            f"{ledger.acked_count} acknowledged, {ledger.received_count} received, "
            f"{missing} missing, {ledger.duplicates} duplicates",
        ),
        Verdict(
            "clean exit",
            "cluster",
            alive and all(c == 0 for c in exit_codes),
            f"every service up to the end: {alive}; exit codes {exit_codes}",
        ),
    ]
