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
from typing import TYPE_CHECKING, Any

import click

from boltmq.cli.messages import fail
from boltmq.kernel.config import ConfigError

if TYPE_CHECKING:
    from boltmq.cli.dev.launcher import ServiceProcess
    from boltmq.cli.dev.local_cluster import LocalCluster

_USER_ERRORS = (
    ConfigError,
    FileNotFoundError,
    NotADirectoryError,
    PermissionError,
    ValueError,
    RuntimeError,
)


@click.group()
@click.version_option(package_name="boltmq")
def main() -> None:
    """BoltMQ: a RocketMQ-style message queue."""


# ------------------------------------------------------------------------- dev
@main.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("data"),
    show_default=True,
    help="Directory for the stores' files (DATA_DIR/store; another group's in "
    "DATA_DIR/<group>/store).",
)
@click.option("--registry-port", default=9876, show_default=True, type=click.IntRange(0, 65535))
@click.option("--store-port", default=10913, show_default=True, type=click.IntRange(0, 65535))
@click.option("--broker-port", default=10911, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address every service binds.")
@click.option(
    "--flush",
    type=click.Choice(["ASYNC_FLUSH", "SYNC_FLUSH"]),
    default="ASYNC_FLUSH",
    show_default=True,
    help="The store's flush mode.",
)
@click.option(
    "--ha-port",
    default=10912,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of the master's HA service (with --replicas).",
)
@click.option(
    "--broker-groups",
    default=1,
    show_default=True,
    type=click.IntRange(1, 26),
    help="Broker groups broker-a, broker-b, ... (group g's ports are the given ones + 10 g).",
)
@click.option(
    "--replicas",
    default=0,
    show_default=True,
    type=click.IntRange(0, 8),
    help="Replica stores of every group (each with its HA service and broker).",
)
@click.option(
    "--role",
    type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER"]),
    default="ASYNC_MASTER",
    show_default=True,
    help="The master's role (SYNC_MASTER acknowledges once a replica has the bytes).",
)
@click.option("--store-set", multiple=True, metavar="NAME=VALUE", help="Extra store setting.")
@click.option("--broker-set", multiple=True, metavar="NAME=VALUE", help="Extra broker setting.")
@click.option("--ha-set", multiple=True, metavar="NAME=VALUE", help="Extra HA setting.")
@click.option(
    "--tls",
    is_flag=True,
    help="Generate throwaway CAs and certificates in DATA_DIR/tls (an internal CA for "
    "the components, an application CA for clients) and run every service with mutual TLS.",
)
@click.option(
    "--acl",
    is_flag=True,
    help="Turn the brokers' access control on, seeded with one admin account (dev-admin; "
    "its secret in DATA_DIR/acl/admin.secret).",
)
@click.option(
    "--mqtt-port",
    default=1883,
    show_default=True,
    type=click.IntRange(-1, 65535),
    help="Port of the MQTT gateway (MQTT 5 and 3.1.1; docs/mqtt.md); 0: any free one, -1: none.",
)
@click.option(
    "--controller",
    type=click.Choice(["none", "etcd"]),
    default="none",
    show_default=True,
    help="etcd: each group's HA services elect its master through etcd (needs --replicas); "
    "a dead master is replaced without a command, and the cluster keeps running.",
)
@click.option(
    "--console-port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of the web console (boltmq console) dev starts beside the cluster.",
)
@click.option("--no-console", is_flag=True, help="Do not start the web console.")
@click.option(
    "--colocate",
    is_flag=True,
    help="Each broker serves its store in its own process (serve broker --with-store): "
    "no hop between them. Not with --replicas.",
)
@click.option(
    "--etcd",
    "etcd_endpoints",
    default="",
    metavar="HOST:PORT,...",
    help="The etcd of --controller etcd (default: start one, its data in DATA_DIR/etcd).",
)
def dev(
    data_dir: Path,
    registry_port: int,
    store_port: int,
    broker_port: int,
    host: str,
    flush: str,
    ha_port: int,
    broker_groups: int,
    replicas: int,
    role: str,
    store_set: tuple[str, ...],
    broker_set: tuple[str, ...],
    ha_set: tuple[str, ...],
    tls: bool,
    acl: bool,
    mqtt_port: int,
    controller: str,
    console_port: int,
    no_console: bool,
    etcd_endpoints: str,
    colocate: bool,
) -> None:
    """Run a local cluster (registry; per broker group a store and a broker, replicas with
    HA) until Ctrl-C."""
    from boltmq.cli.dev.launcher import LaunchError
    from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster

    data_dir = data_dir.resolve()
    try:
        spec = ClusterSpec(
            data_dir,
            replicas,
            host,
            registry_port,
            store_port,
            broker_port,
            ha_port,
            flush,
            role,
            store_set,
            broker_set,
            ha_set,
            groups=broker_groups,
            mqtt_port=mqtt_port,
            colocated=colocate,
        )
    except ValueError as exc:
        raise fail(exc) from None
    if controller == "none" and etcd_endpoints:
        raise fail("--etcd is the etcd of --controller etcd: give both or neither")
    if controller == "etcd" and not replicas:
        raise fail("--controller etcd elects a master among a group's members: add --replicas")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if tls:
        from boltmq.cli.dev import certificates as dev_certificates

        spec.certificates = dev_certificates.generate(
            data_dir / "tls", hosts=(host,), groups=tuple(spec.group_names())
        )
    certificates = spec.certificates
    spec.mqtt_settings = ("ws_listen_port=0",)
    if certificates:  # the gateway calls the cluster as an application
        spec.mqtt_settings += (
            f"tls_ca_file={certificates.ca_file}",
            f"tls_client_cert_file={certificates.client_cert_file}",
            f"tls_client_key_file={certificates.client_key_file}",
        )
    dev_acl = None
    if acl:
        from boltmq.cli.dev import acl_seed

        dev_acl = acl_seed.ensure(data_dir / "acl")
        spec.broker_settings = (*dev_acl.broker_settings(), *broker_set)
        secret = dev_acl.secret_file.read_text().strip()
        spec.mqtt_settings += (f"access_key={dev_acl.access_key}", f"secret_key={secret}")
    local_etcd = None
    if controller == "etcd":
        if not etcd_endpoints:
            from boltmq.cli.etcd_server import EtcdServer

            try:
                local_etcd = EtcdServer(data_dir / "etcd").start()
            except RuntimeError as exc:
                raise fail(exc) from None
            etcd_endpoints = local_etcd.endpoint
        spec.ha_settings = (f"controller_endpoints={etcd_endpoints}", *spec.ha_settings)
    cluster = LocalCluster(spec)
    try:
        cluster.start()
    except LaunchError as exc:
        if local_etcd is not None:
            local_etcd.stop()
        raise fail(exc) from None
    assert cluster.registry is not None
    click.echo(f"registry  {cluster.registry.address}")
    if controller == "etcd":
        click.echo(f"etcd      {etcd_endpoints}  (masters elected by the HA services)")
    for group, members in cluster.groups.items():
        for member in members:
            assert member.broker is not None
            role_text = "master" if member.index == 0 else f"replica {member.index}"
            ha_text = f"ha {member.ha.address}  " if member.ha is not None else ""
            click.echo(
                f"{group}  {role_text:<10} store {member.store.address}  broker "
                f"{member.broker.address}  {ha_text}data {member.data_dir}"
            )
    if cluster.mqtt is not None:
        ws = cluster.mqtt.ports.get("ws", "")
        click.echo(f"mqtt      {cluster.mqtt.address}  (MQTT 5, 3.1.1)  websocket {ws}")
    console = None
    if not no_console:
        from boltmq.cli.console import BackgroundConsole

        try:
            console = BackgroundConsole(
                cluster.registry.address, host, console_port, _console_tls(certificates)
            )
        except click.ClickException:
            cluster.stop()
            if local_etcd is not None:
                local_etcd.stop()
            raise
        click.echo(f"console   {console.url}  (web console; --no-console: off)")
    click.echo(f"logs      {cluster.log_dir}")
    if certificates:
        click.echo(
            f"application TLS: CA {certificates.ca_file}  certificate "
            f"{certificates.client_cert_file}  key {certificates.client_key_file}"
        )
    tls_flags = (
        f" --tls-ca {certificates.ca_file} --tls-cert {certificates.client_cert_file}"
        f" --tls-key {certificates.client_key_file}"
        if certificates
        else ""
    )
    if dev_acl:
        click.echo(
            f"ACL on: export BOLTMQ_ACCESS_KEY={dev_acl.access_key} "
            f"BOLTMQ_SECRET_KEY=$(cat {dev_acl.secret_file})"
        )
    click.echo(
        f"try: boltmq produce --registry {cluster.registry.address}{tls_flags} "
        "--topic T --body hello"
    )
    click.echo("press Ctrl-C to stop")
    try:
        _watch(cluster, stop, survive_deaths=controller == "etcd")
    finally:
        if console is not None:
            console.stop()
        if local_etcd is not None:
            local_etcd.stop()
    click.echo("cluster stopped cleanly")


def _console_tls(certificates: Any) -> Any:
    """The application's client TLS of a ``dev --tls`` cluster, for its console."""
    if not certificates:
        return None
    from boltmq.kernel.tls import ClientTLS

    return ClientTLS.from_files(
        str(certificates.ca_file),
        str(certificates.client_cert_file),
        str(certificates.client_key_file),
    )


def _watch(cluster: LocalCluster, stop: threading.Event, *, survive_deaths: bool) -> None:
    """Until ``stop``: a process that dies stops the cluster with its error, or, when a
    controller replaces dead masters (``survive_deaths``), is reported once and left
    dead; then stop the rest, failing if one of them does not exit cleanly."""
    dead: set[ServiceProcess] = set()
    while not stop.wait(0.5):
        for process in cluster.processes():
            if process.alive() or process in dead:
                continue
            if not survive_deaths:
                cluster.stop()
                raise fail(RuntimeError(f"{process.service} exited: {process.last_error()}"))
            dead.add(process)
            click.echo(f"{process.service} {process.address} exited; the others keep serving")
    alive = [p for p in cluster.processes() if p not in dead]
    codes = [p.stop() for p in reversed(alive) if p.proc is not None]
    cluster.stop()
    if any(code not in (0, None) for code in codes):
        raise fail(RuntimeError(f"a service did not stop cleanly (exit codes {codes})"))


# ------------------------------------------------------------------------- serve
SERVICE_MODULES = {
    "store": "services.store.server",
    "registry": "services.registry.server",
    "broker": "services.broker.server",
    "ha": "services.ha.server",
    "mqtt": "services.mqtt.server",
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


def service_config(
    service: str,
    config_file: Path | None,
    host: str | None,
    port: int | None,
    settings: tuple[str, ...],
    statefulset_pod: str | None,
    env: Mapping[str, str] | None = None,
) -> tuple[ModuleType, Any]:
    """The service's server module and its config, as ``boltmq serve`` builds them.

    ``env`` defaults to the process environment; the deploy tests pass a pod's
    environment to check what a Kubernetes container would run with.
    """
    import importlib

    from boltmq.cli.dev.statefulset import member_settings
    from boltmq.kernel.config import load_config

    module = importlib.import_module(SERVICE_MODULES[service])
    overrides: dict[str, object] = dict(_parse_settings(settings))
    overrides.update({"listen_host": host, "listen_port": port})
    if statefulset_pod is not None:
        overrides.update(member_settings(service, statefulset_pod, overrides))
    return module, load_config(module.CONFIG_CLASS, config_file, env=env, overrides=overrides)


@main.command()
@click.argument("service", type=click.Choice(sorted(SERVICE_MODULES)))
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML file with the service's settings.",
)
@click.option("--host", default=None, help="Address to bind (listen_host).")
@click.option(
    "--port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Port to bind (listen_port; 0 picks a free one).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="Any setting of the service's config (repeatable).",
)
@click.option("--log-level", default="INFO", show_default=True)
@click.option(
    "--statefulset-pod",
    default=None,
    metavar="POD_NAME",
    help="Kubernetes pod <statefulset>-<N>: run as member N of the broker group "
    "(store: SLAVE unless N is 0; broker: broker_id N). See docs/deploy.md.",
)
@click.option(
    "--with-store",
    is_flag=True,
    help="broker only: serve its store in this process too (the broker calls it without "
    "a hop; store_address is the store's). See docs/architecture.md.",
)
@click.option(
    "--store-config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --with-store: the store's TOML file.",
)
@click.option(
    "--store-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="With --with-store: the store's port (listen_port; 0 picks a free one).",
)
@click.option(
    "--store-set",
    "store_settings",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --with-store: any setting of the store's config (repeatable).",
)
def serve(
    service: str,
    config_file: Path | None,
    host: str | None,
    port: int | None,
    settings: tuple[str, ...],
    log_level: str,
    statefulset_pod: str | None,
    with_store: bool,
    store_config: Path | None,
    store_port: int | None,
    store_settings: tuple[str, ...],
) -> None:
    """Run one service in the foreground (what a Kubernetes pod runs)."""
    import asyncio

    from boltmq.kernel import telemetry
    from boltmq.kernel.runtime import PortInUse, configure_logging

    if not with_store and (store_config or store_port is not None or store_settings):
        raise click.UsageError("--store-config, --store-port and --store-set need --with-store")
    if with_store and service != "broker":
        raise click.UsageError(f"--with-store serves a broker's store; not {service}'s")
    configure_logging(log_level)
    try:
        module, config = service_config(service, config_file, host, port, settings, statefulset_pod)
        configure_logging(log_level, config.log_format)  # the config's format from here on
        observability = telemetry.configure(
            service, config, config.metrics_host or config.listen_host
        )
        try:
            if with_store:
                from boltmq.cli import colocated

                _, store = service_config(
                    "store", store_config, host, store_port, store_settings, statefulset_pod
                )
                asyncio.run(colocated.serve(store, config))
            else:
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
@click.option(
    "--records",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Decode and print this many CommitLog records.",
)
@click.option(
    "--from-offset",
    default=None,
    type=click.IntRange(min=0),
    help="CommitLog offset to start decoding at (default: the first).",
)
def inspect(directory: Path, records: int, from_offset: int | None) -> None:
    """Summarise segments, queues and index files (and decode records on request)."""
    from boltmq.cli.inspect_store import inspect_directory

    try:
        for line in inspect_directory(directory, records, from_offset):
            click.echo(line)
    except _USER_ERRORS as exc:
        raise fail(exc) from None


# ------------------------------------------------------------------------- bench
def _register_client_commands() -> None:
    from boltmq.cli import (
        acl,  # noqa: F401 - adds ``admin acl``
        cluster,  # noqa: F401 - adds ``admin cluster``
        connections,  # noqa: F401 - adds ``admin connections producer|consumer``
        dlq,  # noqa: F401 - adds ``admin group dlq``
        group_admin,  # noqa: F401 - adds ``admin group create|update|delete|show``
        ha,  # noqa: F401 - adds ``admin broker`` and ``admin ha``
        message_track,  # noqa: F401 - adds ``admin message track``
        offsets,  # noqa: F401 - adds ``admin group reset-offset``
        stats,  # noqa: F401 - adds ``admin stats topic|group``
    )
    from boltmq.cli.admin import admin
    from boltmq.cli.console import console
    from boltmq.cli.etcd_auth import etcd_auth
    from boltmq.cli.messages import consume, produce

    main.add_command(produce)
    main.add_command(consume)
    main.add_command(admin)
    main.add_command(console)
    main.add_command(etcd_auth)


_register_client_commands()


if __name__ == "__main__":
    main()
