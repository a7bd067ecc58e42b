"""``boltmq admin connections producer|consumer GROUP``: who is connected in a group.

RocketMQ's ``producerConnection`` / ``consumerConnection``: asks every master
(or ``--broker``) for the live clients of GROUP it knows from their heartbeats
and prints, per master, one line per client: its id, the address the broker
saw it connect from, its language, SDK version and since when the broker knows
it (UTC); a consumer's line adds its message model and subscriptions. A group
with no live client on any master is an error (exit status 1), as is a group
name the brokers refuse. Admin-only when the ACL is on.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import click

from boltmq.cli.admin import Admin, _with_admin, admin
from boltmq.cli.messages import fail
from boltmq.v1 import broker_pb2


@admin.group()
def connections() -> None:
    """Live producer or consumer clients of a group."""


def _since(since_ms: int) -> str:
    if since_ms <= 0:
        return "-"
    moment = datetime.fromtimestamp(since_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def subscriptions_text(subscriptions: Iterable[broker_pb2.ConsumerSubscription]) -> str:
    """``topic:expression`` pairs (a SQL92 one as ``topic:SQL92(condition)``), or ``-``."""
    return (
        ", ".join(
            f"{s.topic}:{s.expression_type}({s.expression})"
            if s.expression_type and s.expression_type != "TAG"
            else f"{s.topic}:{s.expression}"
            for s in subscriptions
        )
        or "-"
    )


def _client_line(c: broker_pb2.ClientConnection, consumer: bool) -> str:
    line = (
        f"  {c.client_id}  {c.address or '-'}  {c.language or '-'}  {c.version or '-'}  "
        f"since {_since(c.since_ms)}"
    )
    if consumer:
        line += f"  {c.model}  {subscriptions_text(c.subscriptions)}"
    return line


def _show(admin_: Admin, kind: str, name: str) -> None:
    request = broker_pb2.GetConnectionsRequest(group=name, kind=kind)
    found = 0
    for broker_name, answer in admin_.each_master("GetConnections", request):
        click.echo(f"{broker_name}: {kind} group {name}: {len(answer.connections)} client(s)")
        for c in answer.connections:
            click.echo(_client_line(c, consumer=kind == "consumer"))
        found += len(answer.connections)
    if not found:
        raise fail(f"{kind} group {name!r} has no live client on any master")


@connections.command("producer")
@click.argument("name")
@_with_admin
def connections_producer(admin_: Admin, name: str) -> None:
    """Live producers of producer group NAME on every master (or --broker)."""
    _show(admin_, "producer", name)


@connections.command("consumer")
@click.argument("name")
@_with_admin
def connections_consumer(admin_: Admin, name: str) -> None:
    """Live consumers of consumer group NAME, with their subscriptions, on every master."""
    _show(admin_, "consumer", name)
