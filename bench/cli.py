"""``python -m bench <name>``: every benchmark of BoltMQ, with how it prints its figures
(:mod:`bench.report`). Run from a checkout; the figures of record are in ``bench/RESULTS.md``."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from boltmq.cli.messages import fail
from boltmq.cli.security import sdk_options, security_options


@click.group()
def bench() -> None:
    """Benchmarks that print msg/s, MB/s and latency percentiles."""


@bench.command("store")
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    type=click.Choice(
        ["batch", "raw", "raw-ids", "raw-multi", "raw-split", "single", "get", "sync"]
        + ["sync-threads", "recovery"]
    ),
    help="Scenarios to run (default: all).",
)
@click.option("--messages", default=200_000, show_default=True, type=click.IntRange(min=1))
@click.option("--body-bytes", default=1024, show_default=True, type=click.IntRange(min=0))
@click.option("--batch", "batch_size", default=256, show_default=True, type=click.IntRange(1, 4096))
@click.option("--writers", default=64, show_default=True, type=click.IntRange(1, 1024))
@click.option("--recovery-mib", default=1024, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to put the temporary store (default: the system temp dir).",
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    type=click.IntRange(1, 20),
    help="Run each scenario this many times (each run is printed).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def bench_store(
    scenarios: tuple[str, ...],
    messages: int,
    body_bytes: int,
    batch_size: int,
    writers: int,
    recovery_mib: int,
    directory: Path | None,
    repeat: int,
    as_json: bool,
) -> None:
    """In-process store benchmarks (1 KiB bodies, 16 queues)."""
    from bench import store as b
    from bench.report import format_result, to_json

    runs = {
        "batch": lambda: b.bench_batch(messages, body_bytes, batch_size, directory),
        "raw": lambda: b.bench_raw(messages, body_bytes, batch_size, directory),
        "raw-ids": lambda: b.bench_raw(messages, body_bytes, batch_size, directory, True),
        "raw-multi": lambda: b.bench_raw_groups(messages, body_bytes, directory, together=True),
        "raw-split": lambda: b.bench_raw_groups(messages, body_bytes, directory, together=False),
        "single": lambda: b.bench_single(messages, body_bytes, directory),
        "get": lambda: b.bench_get(messages, body_bytes, directory),
        "sync": lambda: b.bench_sync(min(messages, 64_000), body_bytes, writers, directory),
        "sync-threads": lambda: b.bench_sync_threads(
            min(messages, 64_000), body_bytes, writers, directory
        ),
        "recovery": lambda: b.bench_recovery(recovery_mib * 2**20, body_bytes, directory),
    }
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    for name in scenarios or tuple(runs):
        for _ in range(repeat):
            result = runs[name]()
            click.echo(to_json(result) if as_json else format_result(result))


@bench.command("backlog")
@click.option(
    "--messages",
    default=100_000_000,
    show_default=True,
    type=click.IntRange(min=1024),
    help="Messages in the backlog.",
)
@click.option("--body-bytes", default=100, show_default=True, type=click.IntRange(8, 65536))
@click.option("--queues", default=64, show_default=True, type=click.IntRange(1, 1024))
@click.option(
    "--batch", "batch_size", default=1024, show_default=True, type=click.IntRange(1, 4096)
)
@click.option(
    "--segment-mb",
    default=1024,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="CommitLog segment size.",
)
@click.option(
    "--window-mb",
    default=1024,
    show_default=True,
    type=click.IntRange(0, 65536),
    help="The store's page-cache window behind the flushed offset.",
)
@click.option(
    "--probe-seconds",
    default=5.0,
    show_default=True,
    type=click.FloatRange(0.5, 600),
    help="Length of the produce and head-latency probes.",
)
@click.option(
    "--retention-seconds",
    default=15.0,
    show_default=True,
    type=click.FloatRange(1, 3600),
    help="How long retention deletes under the lowered watermark.",
)
@click.option("--lookups", default=200, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--key-every-message",
    is_flag=True,
    help="Every message with a key of its own (as the SDK's UNIQ_KEY), not one a batch.",
)
@click.option(
    "--index-window-mb",
    default=4,
    show_default=True,
    type=click.IntRange(0, 65536),
    help="The store's index page-cache window (index_page_cache_window_bytes; 0: off).",
)
@click.option(
    "--data-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the run's directory is made (deleted at the end unless --keep).",
)
@click.option("--keep", is_flag=True, help="Keep the store directory.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report as JSON here.",
)
@click.option(
    "--head-only",
    is_flag=True,
    help="Only the fill, then rounds of the head probe alone and with the old reader, "
    "arms A and B alternating (bench/backlog_ab.py).",
)
@click.option(
    "--rounds", default=4, show_default=True, type=click.IntRange(1, 100), help="--head-only."
)
@click.option(
    "--a",
    "a_settings",
    multiple=True,
    metavar="SETTING=VALUE",
    help="--head-only: a store setting of arm A (repeatable; default: the store's defaults).",
)
@click.option(
    "--b",
    "b_settings",
    multiple=True,
    metavar="SETTING=VALUE",
    help="--head-only: a store setting of arm B (repeatable; default: the store's defaults).",
)
def bench_backlog(
    messages: int,
    body_bytes: int,
    queues: int,
    batch_size: int,
    segment_mb: int,
    window_mb: int,
    probe_seconds: float,
    retention_seconds: float,
    lookups: int,
    key_every_message: bool,
    index_window_mb: int,
    data_dir: Path,
    keep: bool,
    json_path: Path | None,
    head_only: bool,
    rounds: int,
    a_settings: tuple[str, ...],
    b_settings: tuple[str, ...],
) -> None:
    """A store with a large backlog: produce, old and head readers, lookups, restarts,
    retention and memory (bench/backlog.py)."""
    import dataclasses
    import json

    from bench.backlog import Run, Settings, format_report

    settings = Settings(
        messages,
        body_bytes,
        queues,
        batch_size,
        segment_mb,
        window_mb,
        probe_seconds,
        retention_seconds,
        lookups,
        key_every_message,
        index_window_mb,
    )
    if head_only:
        from bench.backlog_ab import run_head_rounds

        run_head_rounds(settings, data_dir, keep, json_path, rounds, (a_settings, b_settings))
        return
    run = Run(settings, data_dir, echo=lambda line: click.echo(line, err=True))
    failure = run.attempt(run.execute, keep)
    if run.report.rss_mib or failure is None:  # what was measured before a failure too
        for line in format_report(run.report):
            click.echo(line)
        if json_path is not None:
            json_path.write_text(json.dumps(dataclasses.asdict(run.report), indent=2) + "\n")
    if failure is not None:
        raise fail(failure)


@bench.command("ha")
@click.option(
    "--scenario",
    "scenarios",
    multiple=True,
    type=click.Choice(["catchup", "follow", "sync"]),
    help="Scenarios to run (default: all).",
)
@click.option(
    "--mib",
    default=256,
    show_default=True,
    type=click.IntRange(min=1),
    help="catchup: MiB on the master before the replica starts.",
)
@click.option(
    "--seconds",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="follow: how long the load runs.",
)
@click.option(
    "--rate",
    default=20_000,
    show_default=True,
    type=click.IntRange(1, 10_000_000),
    help="follow: messages per second sent to the master.",
)
@click.option(
    "--messages",
    default=100_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="sync: messages per role.",
)
@click.option("--body-bytes", default=1024, show_default=True, type=click.IntRange(min=0))
@click.option("--batch", "batch_size", default=256, show_default=True, type=click.IntRange(1, 4096))
@click.option(
    "--threads",
    default=4,
    show_default=True,
    type=click.IntRange(1, 256),
    help="sync: concurrent writers.",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to put the temporary stores (default: the system temp dir).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def bench_ha(
    scenarios: tuple[str, ...],
    mib: int,
    seconds: float,
    rate: int,
    messages: int,
    body_bytes: int,
    batch_size: int,
    threads: int,
    directory: Path | None,
    as_json: bool,
) -> None:
    """Replication: catch-up MB/s, lag under load, SYNC_MASTER vs ASYNC_MASTER produce."""
    from bench import ha as b
    from bench.report import format_result, to_json
    from boltmq.cli.dev.launcher import LaunchError

    runs = {
        "catchup": lambda: [b.bench_catchup(mib, body_bytes, directory)],
        "follow": lambda: [b.bench_follow(seconds, rate, body_bytes, batch_size, directory)],
        "sync": lambda: b.bench_sync(messages, body_bytes, batch_size, threads, directory),
    }
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    for name in scenarios or tuple(runs):
        try:
            outcomes = runs[name]()
        except (LaunchError, TimeoutError, b.ReplicaDiffers) as exc:
            raise fail(exc) from None
        for outcome in outcomes:
            click.echo(to_json(outcome) if as_json else format_result(outcome))


_COUNT = click.option("--count", default=100_000, show_default=True, type=click.IntRange(min=1))
_SIZE = click.option(
    "--size", default=1024, show_default=True, type=click.IntRange(min=0), help="Body bytes."
)
_JSON = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
_REGISTRY = click.option(
    "--registry", default="127.0.0.1:9876", show_default=True, envvar="BOLTMQ_REGISTRY"
)
_TOPIC = click.option("--topic", default="BenchTopic", show_default=True)


def _echo_result(outcome, as_json: bool) -> None:
    from bench.report import format_result, to_json

    click.echo(to_json(outcome) if as_json else format_result(outcome))


def _bench_call(fn, *args):
    from boltmq.client import BoltMQError
    from boltmq.kernel.registry_client import RegistryError

    try:
        return fn(*args)
    except (BoltMQError, RegistryError, TimeoutError, ValueError, ImportError) as exc:
        raise fail(exc) from None


@bench.command("produce")
@_REGISTRY
@_TOPIC
@_COUNT
@_SIZE
@click.option("--batch", default=256, show_default=True, type=click.IntRange(1, 4096))
@click.option("--concurrency", default=2, show_default=True, type=click.IntRange(1, 256))
@click.option(
    "--natural-batching/--no-natural-batching",
    default=True,
    show_default=True,
    help="ProducerOptions.natural_batching: concurrent sends queued behind a call leave "
    "together (--concurrency 64 --batch 1 shows it).",
)
@_JSON
@security_options
def bench_produce(
    registry: str,
    topic: str,
    count: int,
    size: int,
    batch: int,
    concurrency: int,
    natural_batching: bool,
    as_json: bool,
) -> None:
    """Produce to a running cluster (batch 1: one synchronous send per call)."""
    from bench import cluster as c

    _echo_result(
        _bench_call(
            c.bench_produce,
            registry,
            topic,
            count,
            size,
            batch,
            concurrency,
            sdk_options(),
            natural_batching,
        ),
        as_json,
    )


@bench.command("consume")
@_REGISTRY
@_TOPIC
@_COUNT
@_SIZE
@_JSON
@security_options
def bench_consume(registry: str, topic: str, count: int, size: int, as_json: bool) -> None:
    """Consume COUNT messages already in TOPIC with a fresh group."""
    from bench import cluster as c

    _echo_result(_bench_call(c.bench_consume, registry, topic, count, size, sdk_options()), as_json)


@bench.command("e2e")
@_REGISTRY
@_TOPIC
@_COUNT
@_SIZE
@click.option(
    "--rate",
    default=500,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Messages per second sent.",
)
@_JSON
@security_options
def bench_e2e(registry: str, topic: str, count: int, size: int, rate: int, as_json: bool) -> None:
    """Send-to-receive latency through a parked long poll."""
    from bench import cluster as c

    _echo_result(
        _bench_call(c.bench_e2e, registry, topic, count, size, rate, sdk_options()), as_json
    )


@bench.command("redis")
@click.option("--redis", "url", default="redis://127.0.0.1:6379/0", show_default=True)
@_COUNT
@_SIZE
@click.option("--batch", default=256, show_default=True, type=click.IntRange(1, 4096))
@_JSON
def bench_redis(url: str, count: int, size: int, batch: int, as_json: bool) -> None:
    """The reference: Redis Streams XADD, pipelined (needs redis-py and a server)."""
    from bench import cluster as c

    _echo_result(_bench_call(c.bench_redis, url, count, size, batch), as_json)


@bench.command("spark")
@click.option(
    "--messages",
    default=300_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows of 1 KiB written, then read back.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Choice(["write", "broker", "commitlog"]),
    help="Measure only these paths (repeatable; default: all three).",
)
@click.option(
    "--segment-mb",
    default=1024,
    show_default=True,
    type=click.IntRange(min=1),
    help="CommitLog segment size (the store's default: 1 GiB).",
)
@click.option(
    "--repeat",
    default=3,
    show_default=True,
    type=click.IntRange(min=1),
    help="Timed runs of each path after its first; the median is the figure.",
)
@click.option(
    "--page-cache-mb",
    default=256,
    show_default=True,
    type=click.IntRange(min=0),
    help="The store's page-cache window (0: keep every page; the store's default is 1024).",
)
def bench_spark(
    messages: int, paths: tuple[str, ...], segment_mb: int, repeat: int, page_cache_mb: int
) -> None:
    """The Spark connector on a local cluster: write, broker read, commitlog read rows/s."""
    from bench.spark import bench_spark as run
    from boltmq.cli.dev.launcher import LaunchError

    try:
        run(messages, paths, segment_mb, repeat, page_cache_mb)
    except (LaunchError, ImportError) as exc:
        raise fail(exc) from None


@bench.command("soak")
@click.option(
    "--seconds",
    default=600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="How long the load runs (make soak: SOAK_SECONDS).",
)
@click.option(
    "--rate",
    default=1000,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Messages per second, all producers together.",
)
@click.option("--producers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--consumers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--batch",
    default=10,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Messages per send call.",
)
@_SIZE
@click.option(
    "--sample-seconds",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Sampling interval.",
)
@click.option(
    "--rss-slope-max",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Memory rule: MiB/min of anonymous memory over the second half.",
)
@click.option(
    "--fd-slack",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="Handle rule: fds the second half may exceed the first half's maximum by.",
)
@click.option(
    "--out",
    "out_dir",
    default=Path("soak-results"),
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where soak.csv, soak.json and soak.png go.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The cluster's data directory (default: a temporary one, removed after).",
)
def bench_soak(
    seconds: float,
    rate: int,
    producers: int,
    consumers: int,
    batch: int,
    size: int,
    sample_seconds: float,
    rss_slope_max: float,
    fd_slack: int,
    out_dir: Path,
    data_dir: Path | None,
) -> None:
    """Steady load on a local cluster; exit 1 unless memory and handles stay flat."""
    from bench import soak_run as s
    from bench.soak_report import Limits
    from boltmq.cli.dev.launcher import LaunchError

    spec = s.SoakSpec(
        seconds,
        rate,
        producers,
        consumers,
        batch,
        size,
        sample_seconds,
        limits=Limits(rss_slope_max, fd_slack),
    )

    def show(sample):
        procs = "  ".join(f"{n} {p.anon_mib:.0f}MiB/{p.fds}fd" for n, p in sample.processes.items())
        click.echo(
            f"{sample.t_s:>7.1f}s  sent {sample.sent_per_s:>8.0f}/s  received "
            f"{sample.received_per_s:>8.0f}/s  send p99 {sample.send_p99_ms}ms  e2e p99 "
            f"{sample.e2e_p99_ms}ms  {procs}"
        )

    try:
        outcome = s.run_soak(spec, out_dir, data_dir, progress=show)
    except (s.SoakError, LaunchError, ImportError) as exc:
        raise fail(exc) from None
    for name, value in outcome.summary.items():
        click.echo(f"{name}: {value}")
    for verdict in outcome.verdicts:
        click.echo(
            f"{'ok  ' if verdict.ok else 'FAIL'} {verdict.rule} [{verdict.subject}]: "
            f"{verdict.detail}"
        )
    click.echo("wrote " + ", ".join(str(p) for p in outcome.files))
    if not outcome.ok:
        sys.exit(1)
