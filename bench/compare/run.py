"""The ``python -m bench.compare`` command: run every system, then report.

Systems run one after another (never two servers at once); each is started,
given one round per topic count, and stopped before the next starts. With
``--passes N`` the whole sequence runs N times, the systems alternating, and
the report takes each scenario's median (:mod:`bench.compare.report`). A system
that is not installed is skipped with its reason (``--install`` installs the
Debian package first), so the table can hold BoltMQ and Redis alone.
The peers: BoltMQ, Redis Streams, NATS JetStream and RabbitMQ (stream queues).
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click

from bench import python_speed, relay_floor
from bench.compare import report
from bench.compare.boltmq_peer import BoltMQPeer
from bench.compare.nats_peer import NatsPeer
from bench.compare.peer import Peer, PeerFailed, PeerUnavailable
from bench.compare.rabbitmq_peer import RabbitMQPeer
from bench.compare.redis_peer import RedisPeer
from bench.compare.workload import Row, Workload, run_round

BENCH_DIR = Path(__file__).resolve().parents[1]
SYSTEMS = ("boltmq", "redis", "nats", "rabbitmq", "boltmq-unary")
DEFAULT_SYSTEMS = SYSTEMS[:4]
"""What runs without --system; ``boltmq-unary`` (BoltMQ's unary send path) on request."""
QUICK = Workload(seconds=1.0, consume_messages=20_000)


@dataclass
class Comparison:
    """Everything one invocation measured."""

    work: Workload
    rows: list[Row] = field(default_factory=list)
    durability: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    floors: list[relay_floor.Floor] = field(default_factory=list)
    """The bare two-hop streamed path, one message a call, after each pass (when BoltMQ
    sent one at a time)."""
    probes: list[float] = field(default_factory=list)
    """:func:`bench.python_speed.probe_us` at the start and end of each pass."""


def make_peer(system: str, install: bool, colocate: bool = False) -> Peer:
    if system == "boltmq":
        return BoltMQPeer(colocated=colocate)
    if system == "boltmq-unary":
        return BoltMQPeer(send_path="unary", colocated=colocate)
    if system == "redis":
        return RedisPeer(install)
    if system == "rabbitmq":
        return RabbitMQPeer(install)
    return NatsPeer(install)


def compare(
    systems: Sequence[str],
    work: Workload,
    install: bool = False,
    progress: Callable[[Row], None] = lambda row: None,
    workdir: Path | None = None,
    passes: int = 1,
    colocate: bool = False,
) -> Comparison:
    """Run ``work`` on each system in turn, ``passes`` times over; PeerFailed if a started
    system fails. ``colocate``: BoltMQ's brokers serve their stores (``dev --colocate``)."""
    result = Comparison(work)
    for index in range(passes):
        result.probes.append(python_speed.probe_us())
        rows = []
        for system in systems:
            peer = make_peer(system, install, colocate)
            if peer.name not in result.skipped:  # not installed: not tried again
                rows += _run_system(result, peer, system, work, progress, workdir)
        result.probes.append(python_speed.probe_us())
        for row in rows:
            row.pass_index = index
        result.rows += rows
        if any(report.is_one_sender(row) for row in rows):
            # Nothing else runs now: the floor is measured on the same machine, in the same
            # pass.
            result.floors.append(
                relay_floor.measure(batch=1, size=work.size, seconds=work.seconds, call="stream")
            )
    return result


def _run_system(
    result: Comparison,
    peer: Peer,
    system: str,
    work: Workload,
    progress: Callable[[Row], None],
    workdir: Path | None,
) -> list[Row]:
    """Every round of ``work`` on ``peer`` (``system``), started and stopped here (none when
    it is not installed: its reason goes to ``result.skipped``)."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix=f"compare-{system}-", dir=workdir) as tmp:
        try:
            peer.start(Path(tmp))
        except PeerUnavailable as exc:
            result.skipped[peer.name] = str(exc)
            return rows
        try:
            for count in work.topic_counts:
                topics = peer.create_topics(f"cmp{count}t", count)
                rows += run_round(peer, work, topics, progress)
        finally:
            peer.stop()
    result.durability[peer.name] = f"{peer.durability}; one topic = one {peer.topic_unit}"
    return rows


def section(result: Comparison, command: str) -> str:
    """The Markdown section written into bench/RESULTS.md."""
    work = result.work
    load = os.getloadavg()
    lines = [
        report.SECTION_TITLE,
        "",
        "```",
        command,
        "```",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.node() or 'this host'} "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}); load average at "
        f"the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min). **The "
        "machine may be shared with other engineers' test runs**: a load average above "
        "the CPU count means the figures are lower and noisier than on an idle machine. "
        f"Each timed run lasts {work.seconds:g} s; consume reads "
        f"{work.consume_messages:,} messages; batches are {work.batch} messages; bodies "
        f"{work.size} bytes. "
        + python_speed.probe_text(result.probes)
        + (
            f"Every system ran {report.passes(result.rows)} times, alternating; each row is "
            "its median pass, and each target the median of its ratios within a pass. "
            if report.passes(result.rows) > 1
            else ""
        )
        + "Servers, producers and consumers all run on the same cores; "
        "every client is that system's Python client in one process. p50/p99 are per "
        "send call for produce (a whole batch when batched) and send-to-delivery for "
        "produce+consume.",
        "",
        "Durability:",
    ]
    lines += [f"- {name}: {text}" for name, text in result.durability.items()]
    lines += [f"- {name}: not run ({reason})" for name, reason in result.skipped.items()]
    lines += [
        "",
        *report.markdown_table(result.rows),
        "",
        *report.floor_lines(result.floors),
        "Targets:",
        *report.target_lines(result.rows, result.floors),
        "",
    ]
    return "\n".join(lines)


@click.command()
@click.option("--quick", is_flag=True, help="1 s runs, 20,000 messages consumed.")
@click.option("--seconds", type=click.FloatRange(min=0.1), help="Length of each timed run.")
@click.option(
    "--consume-messages", type=click.IntRange(min=1), help="Messages the consume scenario reads."
)
@click.option(
    "--system",
    "systems",
    multiple=True,
    type=click.Choice(SYSTEMS),
    help="Systems to run (default: boltmq, redis, nats, rabbitmq; boltmq-unary: BoltMQ on "
    "unary calls).",
)
@click.option(
    "--topics",
    "topic_counts",
    multiple=True,
    type=click.IntRange(1, 4096),
    help="Topic counts (default: 1, 64, 1024).",
)
@click.option(
    "--producers",
    "producer_counts",
    multiple=True,
    type=click.IntRange(1, 64),
    help="Producer counts (default: 1, 4).",
)
@click.option(
    "--senders",
    type=click.IntRange(1, 256),
    default=None,
    help="Threads of the concurrent-sends run, sharing one producer (default: 64).",
)
@click.option(
    "--install",
    is_flag=True,
    help="apt-get install a missing redis-server, nats-server or rabbitmq-server (root).",
)
@click.option(
    "--results",
    type=click.Path(dir_okay=False, path_type=Path),
    default=BENCH_DIR / "RESULTS.md",
    show_default=True,
    help="Results file whose side-by-side section is replaced.",
)
@click.option(
    "--charts-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=BENCH_DIR,
    show_default=True,
    help="Where compare-*.png go.",
)
@click.option(
    "--passes",
    type=click.IntRange(1, 9),
    default=1,
    show_default=True,
    help="Run every system this many times, alternating; report each scenario's median.",
)
@click.option(
    "--colocate",
    is_flag=True,
    help="BoltMQ's broker serves its store in one process (boltmq dev --colocate).",
)
@click.option("--no-write", is_flag=True, help="Print the table only.")
def main(
    quick: bool,
    seconds: float | None,
    consume_messages: int | None,
    systems: tuple[str, ...],
    topic_counts: tuple[int, ...],
    producer_counts: tuple[int, ...],
    senders: int | None,
    install: bool,
    results: Path,
    charts_dir: Path,
    passes: int,
    colocate: bool,
    no_write: bool,
) -> None:
    """Run BoltMQ, Redis Streams, NATS JetStream and RabbitMQ through the same workload."""
    base = QUICK if quick else Workload()
    work = Workload(
        seconds or base.seconds,
        consume_messages or base.consume_messages,
        topic_counts=topic_counts or base.topic_counts,
        producer_counts=producer_counts or base.producer_counts,
        senders=senders or base.senders,
    )
    try:
        result = compare(
            systems or DEFAULT_SYSTEMS,
            work,
            install,
            progress=_show,
            passes=passes,
            colocate=colocate,
        )
    except PeerFailed as exc:
        raise click.ClickException(str(exc)) from None
    for name, reason in result.skipped.items():
        click.echo(f"skipped {name}: {reason}", err=True)
    text = section(result, " ".join(["python -m bench.compare", *sys.argv[1:]]))
    click.echo(text)
    if not no_write and result.rows:
        report.write_section(results, text)
        charts_dir.mkdir(parents=True, exist_ok=True)
        charts = report.draw_charts(report.medians(result.rows), charts_dir)
        click.echo(f"wrote {results} and {len(charts)} charts in {charts_dir}")


def _show(row: Row) -> None:
    click.echo(
        f"{row.system:<15} {row.scenario:<16} {row.mode:<14} {row.producers}p "
        f"{row.topics:>5}t {row.messages:>9,} msgs {row.msgs_per_s:>10,.0f} msg/s",
        err=True,
    )
