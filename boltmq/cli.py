"""The ``boltmq`` command.

A user's mistake is one clear line on stderr and a non-zero exit, never a
traceback: every command turns the library's named errors into
``click.ClickException``.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from boltmq.cli_messages import fail
from boltmq.cli_security import sdk_options, security_options
from boltmq.config import ConfigError

_USER_ERRORS = (ConfigError, FileNotFoundError, NotADirectoryError, PermissionError, ValueError,
                RuntimeError)


@click.group()
@click.version_option(package_name="boltmq")
def main() -> None:
    """BoltMQ: a RocketMQ-style message queue."""


# ------------------------------------------------------------------------- dev
@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("data"),
              show_default=True, help="Directory for the store's files (DATA_DIR/store).")
@click.option("--registry-port", default=9876, show_default=True, type=click.IntRange(0, 65535))
@click.option("--store-port", default=10913, show_default=True, type=click.IntRange(0, 65535))
@click.option("--broker-port", default=10911, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address every service binds.")
@click.option("--flush", type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]), default="ASYNC_FLUSH",
              show_default=True, help="The store's flush mode.")
@click.option("--ha-port", default=10912, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the master's HA service (with --replicas).")
@click.option("--replicas", default=0, show_default=True, type=click.IntRange(0, 8),
              help="Replica stores (each with its HA service and broker).")
@click.option("--role", type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER"]),
              default="ASYNC_MASTER", show_default=True,
              help="The master's role (SYNC_MASTER acknowledges once a replica has the bytes).")
@click.option("--store-set", multiple=True, metavar="NAME=VALUE", help="Extra store setting.")
@click.option("--broker-set", multiple=True, metavar="NAME=VALUE", help="Extra broker setting.")
@click.option("--ha-set", multiple=True, metavar="NAME=VALUE", help="Extra HA setting.")
@click.option("--tls", is_flag=True,
              help="Generate a throwaway CA and certificates in DATA_DIR/tls and run every "
                   "service with TLS and mutual TLS.")
def dev(data_dir: Path, registry_port: int, store_port: int, broker_port: int, host: str,
        flush: str, ha_port: int, replicas: int, role: str, store_set: tuple[str, ...],
        broker_set: tuple[str, ...], ha_set: tuple[str, ...], tls: bool) -> None:
    """Run a local cluster (registry, store, broker; replicas with HA) until Ctrl-C."""
    from boltmq.launcher import LaunchError
    from boltmq.local_cluster import ClusterSpec, LocalCluster

    data_dir = data_dir.resolve()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    certificates = None
    if tls:
        from boltmq import dev_certificates

        certificates = dev_certificates.generate(data_dir / "tls", hosts=(host,))
    cluster = LocalCluster(ClusterSpec(
        data_dir, replicas, host, registry_port, store_port, broker_port, ha_port, flush, role,
        store_set, broker_set, ha_set,
        tls_settings=certificates.server_settings() if certificates else ()))
    try:
        cluster.start()
    except LaunchError as exc:
        raise fail(exc) from None
    assert cluster.registry is not None
    click.echo(f"registry  {cluster.registry.address}")
    master, *replica_members = cluster.members
    assert master.broker is not None
    click.echo(f"store     {master.store.address}   data {master.data_dir}")
    click.echo(f"broker    {master.broker.address}")
    if master.ha is not None:
        click.echo(f"ha        {master.ha.address}")
    for member in replica_members:
        assert member.broker is not None and member.ha is not None
        click.echo(f"replica {member.index} store {member.store.address}   broker "
                   f"{member.broker.address}   ha {member.ha.address}   data {member.data_dir}")
    click.echo(f"logs      {cluster.log_dir}")
    tls_flags = (f" --tls-ca {certificates.ca_file} --tls-cert {certificates.client_cert_file}"
                 f" --tls-key {certificates.client_key_file}" if certificates else "")
    click.echo(f"try: boltmq produce --registry {cluster.registry.address}{tls_flags} "
               "--topic T --body hello")
    click.echo("press Ctrl-C to stop")
    while not stop.wait(0.5):
        dead = [p for p in cluster.processes() if not p.alive()]
        if dead:
            cluster.stop()
            raise fail(RuntimeError(f"{dead[0].service} exited: {dead[0].last_error()}"))
    codes = cluster.stop()
    if any(code not in (0, None) for code in codes):
        raise fail(RuntimeError(f"a service did not stop cleanly (exit codes {codes})"))
    click.echo("cluster stopped cleanly")


# ------------------------------------------------------------------------- serve
SERVICE_MODULES = {
    "store": "services.store.server",
    "registry": "services.registry.server",
    "broker": "services.broker.server",
    "ha": "services.ha.server",
}
"""Each module exposes ``CONFIG_CLASS`` (a frozen dataclass with ``listen_host`` and
``listen_port``) and ``async def serve(config)``."""


def _parse_settings(settings: tuple[str, ...]) -> dict[str, str]:
    values = {}
    for item in settings:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.UsageError(f"--set expects NAME=VALUE, got {item!r}")
        values[name.strip()] = value
    return values


def service_config(service: str, config_file: Path | None, host: str | None, port: int | None,
                   settings: tuple[str, ...], statefulset_pod: str | None,
                   env: Mapping[str, str] | None = None) -> tuple[ModuleType, Any]:
    """The service's server module and its config, as ``boltmq serve`` builds them.

    ``env`` defaults to the process environment; the deploy tests pass a pod's
    environment to check what a Kubernetes container would run with.
    """
    import importlib

    from boltmq.config import load_config
    from boltmq.statefulset import member_settings

    module = importlib.import_module(SERVICE_MODULES[service])
    overrides: dict[str, object] = dict(_parse_settings(settings))
    overrides.update({"listen_host": host, "listen_port": port})
    if statefulset_pod is not None:
        overrides.update(member_settings(service, statefulset_pod, overrides))
    return module, load_config(module.CONFIG_CLASS, config_file, env=env, overrides=overrides)


@main.command()
@click.argument("service", type=click.Choice(sorted(SERVICE_MODULES)))
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              help="TOML file with the service's settings.")
@click.option("--host", default=None, help="Address to bind (listen_host).")
@click.option("--port", default=None, type=click.IntRange(0, 65535),
              help="Port to bind (listen_port; 0 picks a free one).")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Any setting of the service's config (repeatable).")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--statefulset-pod", default=None, metavar="POD_NAME",
              help="Kubernetes pod <statefulset>-<N>: run as member N of the broker group "
                   "(store: SLAVE unless N is 0; broker: broker_id N). See docs/deploy.md.")
def serve(service: str, config_file: Path | None, host: str | None, port: int | None,
          settings: tuple[str, ...], log_level: str, statefulset_pod: str | None) -> None:
    """Run one service in the foreground (what a Kubernetes pod runs)."""
    import asyncio

    from boltmq import telemetry
    from boltmq.runtime import PortInUse, configure_logging

    configure_logging(log_level)
    try:
        module, config = service_config(service, config_file, host, port, settings,
                                        statefulset_pod)
        configure_logging(log_level, config.log_format)  # the config's format from here on
        observability = telemetry.configure(service, config, config.listen_host)
        try:
            asyncio.run(module.serve(config))
        finally:
            observability.shutdown()
    except (PortInUse, *_USER_ERRORS) as exc:
        raise fail(exc) from None


# ------------------------------------------------------------------------- store
@main.group()
def store() -> None:
    """Look at a store directory offline."""


@store.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def verify(directory: Path) -> None:
    """Check CommitLog, consume queues and index; exit 1 with one line per problem."""
    from services.store.verify import verify_directory

    try:
        problems = verify_directory(directory)
    except _USER_ERRORS as exc:
        raise fail(exc) from None
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(1)
    click.echo(f"{directory}: no inconsistencies")


@store.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--records", default=0, show_default=True, type=click.IntRange(min=0),
              help="Decode and print this many CommitLog records.")
@click.option("--from-offset", default=None, type=click.IntRange(min=0),
              help="CommitLog offset to start decoding at (default: the first).")
def inspect(directory: Path, records: int, from_offset: int | None) -> None:
    """Summarise segments, queues and index files (and decode records on request)."""
    from boltmq.inspect_store import inspect_directory

    try:
        for line in inspect_directory(directory, records, from_offset):
            click.echo(line)
    except _USER_ERRORS as exc:
        raise fail(exc) from None


# ------------------------------------------------------------------------- bench
@main.group()
def bench() -> None:
    """Benchmarks that print msg/s, MB/s and latency percentiles."""


@bench.command("store")
@click.option("--scenario", "scenarios", multiple=True,
              type=click.Choice(["batch", "raw", "single", "get", "sync", "sync-threads",
                                 "recovery"]),
              help="Scenarios to run (default: all).")
@click.option("--messages", default=200_000, show_default=True, type=click.IntRange(min=1))
@click.option("--body-bytes", default=1024, show_default=True, type=click.IntRange(min=0))
@click.option("--batch", "batch_size", default=256, show_default=True, type=click.IntRange(1, 4096))
@click.option("--writers", default=64, show_default=True, type=click.IntRange(1, 1024))
@click.option("--recovery-mib", default=1024, show_default=True, type=click.IntRange(min=1))
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Where to put the temporary store (default: the system temp dir).")
@click.option("--repeat", default=1, show_default=True, type=click.IntRange(1, 20),
              help="Run each scenario this many times (each run is printed).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def bench_store(scenarios: tuple[str, ...], messages: int, body_bytes: int, batch_size: int,
                writers: int, recovery_mib: int, directory: Path | None, repeat: int,
                as_json: bool) -> None:
    """In-process store benchmarks (1 KiB bodies, 16 queues)."""
    from boltmq import bench_store as b
    from boltmq.bench_report import format_result, to_json

    runs = {
        "batch": lambda: b.bench_batch(messages, body_bytes, batch_size, directory),
        "raw": lambda: b.bench_raw(messages, body_bytes, batch_size, directory),
        "single": lambda: b.bench_single(messages, body_bytes, directory),
        "get": lambda: b.bench_get(messages, body_bytes, directory),
        "sync": lambda: b.bench_sync(min(messages, 64_000), body_bytes, writers, directory),
        "sync-threads": lambda: b.bench_sync_threads(min(messages, 64_000), body_bytes, writers,
                                                     directory),
        "recovery": lambda: b.bench_recovery(recovery_mib * 2**20, body_bytes, directory),
    }
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    for name in scenarios or tuple(runs):
        for _ in range(repeat):
            result = runs[name]()
            click.echo(to_json(result) if as_json else format_result(result))


@bench.command("ha")
@click.option("--scenario", "scenarios", multiple=True,
              type=click.Choice(["catchup", "follow", "sync"]),
              help="Scenarios to run (default: all).")
@click.option("--mib", default=256, show_default=True, type=click.IntRange(min=1),
              help="catchup: MiB on the master before the replica starts.")
@click.option("--seconds", default=10.0, show_default=True, type=click.FloatRange(min=0.1),
              help="follow: how long the load runs.")
@click.option("--rate", default=20_000, show_default=True, type=click.IntRange(1, 10_000_000),
              help="follow: messages per second sent to the master.")
@click.option("--messages", default=100_000, show_default=True, type=click.IntRange(min=1),
              help="sync: messages per role.")
@click.option("--body-bytes", default=1024, show_default=True, type=click.IntRange(min=0))
@click.option("--batch", "batch_size", default=256, show_default=True,
              type=click.IntRange(1, 4096))
@click.option("--threads", default=4, show_default=True, type=click.IntRange(1, 256),
              help="sync: concurrent writers.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              help="Where to put the temporary stores (default: the system temp dir).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def bench_ha(scenarios: tuple[str, ...], mib: int, seconds: float, rate: int, messages: int,
             body_bytes: int, batch_size: int, threads: int, directory: Path | None,
             as_json: bool) -> None:
    """Replication: catch-up MB/s, lag under load, SYNC_MASTER vs ASYNC_MASTER produce."""
    from boltmq import bench_ha as b
    from boltmq.bench_report import format_result, to_json
    from boltmq.launcher import LaunchError

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
_SIZE = click.option("--size", default=1024, show_default=True, type=click.IntRange(min=0),
                     help="Body bytes.")
_JSON = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
_REGISTRY = click.option("--registry", default="127.0.0.1:9876", show_default=True,
                         envvar="BOLTMQ_REGISTRY")
_TOPIC = click.option("--topic", default="BenchTopic", show_default=True)


def _echo_result(outcome, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    from boltmq.bench_report import format_result, to_json

    click.echo(to_json(outcome) if as_json else format_result(outcome))


def _bench_call(fn, *args):  # type: ignore[no-untyped-def]
    from boltmq.client import BoltMQError
    from boltmq.registry_client import RegistryError

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
@_JSON
@security_options
def bench_produce(registry: str, topic: str, count: int, size: int, batch: int,
                  concurrency: int, as_json: bool) -> None:
    """Produce to a running cluster (batch 1: one synchronous send per call)."""
    from boltmq import bench_cluster as c

    _echo_result(_bench_call(c.bench_produce, registry, topic, count, size, batch, concurrency,
                             sdk_options()), as_json)


@bench.command("consume")
@_REGISTRY
@_TOPIC
@_COUNT
@_SIZE
@_JSON
@security_options
def bench_consume(registry: str, topic: str, count: int, size: int, as_json: bool) -> None:
    """Consume COUNT messages already in TOPIC with a fresh group."""
    from boltmq import bench_cluster as c

    _echo_result(_bench_call(c.bench_consume, registry, topic, count, size, sdk_options()),
                 as_json)


@bench.command("e2e")
@_REGISTRY
@_TOPIC
@_COUNT
@_SIZE
@click.option("--rate", default=500, show_default=True, type=click.IntRange(1, 100_000),
              help="Messages per second sent.")
@_JSON
@security_options
def bench_e2e(registry: str, topic: str, count: int, size: int, rate: int,
              as_json: bool) -> None:
    """Send-to-receive latency through a parked long poll."""
    from boltmq import bench_cluster as c

    _echo_result(_bench_call(c.bench_e2e, registry, topic, count, size, rate, sdk_options()),
                 as_json)


@bench.command("redis")
@click.option("--redis", "url", default="redis://127.0.0.1:6379/0", show_default=True)
@_COUNT
@_SIZE
@click.option("--batch", default=256, show_default=True, type=click.IntRange(1, 4096))
@_JSON
def bench_redis(url: str, count: int, size: int, batch: int, as_json: bool) -> None:
    """The reference: Redis Streams XADD, pipelined (needs redis-py and a server)."""
    from boltmq import bench_cluster as c

    _echo_result(_bench_call(c.bench_redis, url, count, size, batch), as_json)


@bench.command("spark")
@click.option("--messages", default=300_000, show_default=True, type=click.IntRange(min=1),
              help="Rows of 1 KiB written, then read back.")
@click.option("--path", "paths", multiple=True,
              type=click.Choice(["write", "broker", "commitlog"]),
              help="Measure only these paths (repeatable; default: all three).")
@click.option("--segment-mb", default=1024, show_default=True, type=click.IntRange(min=1),
              help="CommitLog segment size (the store's default: 1 GiB).")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(min=1),
              help="Timed runs of each path after its first; the median is the figure.")
@click.option("--page-cache-mb", default=256, show_default=True, type=click.IntRange(min=0),
              help="The store's page-cache window (0: keep every page; the store's default "
                   "is 1024).")
def bench_spark(messages: int, paths: tuple[str, ...], segment_mb: int, repeat: int,
                page_cache_mb: int) -> None:
    """The Spark connector on a local cluster: write, broker read, commitlog read rows/s."""
    from boltmq.launcher import LaunchError
    from boltmq.spark.bench import bench_spark as run

    try:
        run(messages, paths, segment_mb, repeat, page_cache_mb)
    except (LaunchError, ImportError) as exc:
        raise fail(exc) from None


@bench.command("soak")
@click.option("--seconds", default=600.0, show_default=True, type=click.FloatRange(min=1),
              help="How long the load runs (make soak: SOAK_SECONDS).")
@click.option("--rate", default=1000, show_default=True, type=click.IntRange(1, 1_000_000),
              help="Messages per second, all producers together.")
@click.option("--producers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--consumers", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option("--batch", default=10, show_default=True, type=click.IntRange(1, 4096),
              help="Messages per send call.")
@_SIZE
@click.option("--sample-seconds", default=5.0, show_default=True,
              type=click.FloatRange(min=0.1), help="Sampling interval.")
@click.option("--rss-slope-max", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="Memory rule: MiB/min of anonymous memory over the second half.")
@click.option("--fd-slack", default=2, show_default=True, type=click.IntRange(min=0),
              help="Handle rule: fds the second half may exceed the first half's maximum by.")
@click.option("--out", "out_dir", default=Path("soak-results"), show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where soak.csv, soak.json and soak.png go.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="The cluster's data directory (default: a temporary one, removed after).")
def bench_soak(seconds: float, rate: int, producers: int, consumers: int, batch: int, size: int,
               sample_seconds: float, rss_slope_max: float, fd_slack: int, out_dir: Path,
               data_dir: Path | None) -> None:
    """Steady load on a local cluster; exit 1 unless memory and handles stay flat."""
    from boltmq import bench_soak as s
    from boltmq.launcher import LaunchError
    from boltmq.soak_report import Limits

    spec = s.SoakSpec(seconds, rate, producers, consumers, batch, size, sample_seconds,
                      limits=Limits(rss_slope_max, fd_slack))

    def show(sample):  # type: ignore[no-untyped-def]
        procs = "  ".join(f"{n} {p.anon_mib:.0f}MiB/{p.fds}fd"
                          for n, p in sample.processes.items())
        click.echo(f"{sample.t_s:>7.1f}s  sent {sample.sent_per_s:>8.0f}/s  received "
                   f"{sample.received_per_s:>8.0f}/s  send p99 {sample.send_p99_ms}ms  e2e p99 "
                   f"{sample.e2e_p99_ms}ms  {procs}")

    try:
        outcome = s.run_soak(spec, out_dir, data_dir, progress=show)
    except (s.SoakError, LaunchError, ImportError) as exc:
        raise fail(exc) from None
    for name, value in outcome.summary.items():
        click.echo(f"{name}: {value}")
    for verdict in outcome.verdicts:
        click.echo(f"{'ok  ' if verdict.ok else 'FAIL'} {verdict.rule} [{verdict.subject}]: "
                   f"{verdict.detail}")
    click.echo("wrote " + ", ".join(str(p) for p in outcome.files))
    if not outcome.ok:
        sys.exit(1)


def _register_client_commands() -> None:
    from boltmq import (
        cli_acl,  # noqa: F401 - adds ``admin acl``
        cli_dlq,  # noqa: F401 - adds ``admin group dlq``
        cli_ha,  # noqa: F401 - adds ``admin broker`` and ``admin ha``
    )
    from boltmq.cli_admin import admin
    from boltmq.cli_messages import consume, produce

    main.add_command(produce)
    main.add_command(consume)
    main.add_command(admin)


_register_client_commands()


if __name__ == "__main__":
    main()
