"""``boltmq admin stats topic TOPIC`` and ``boltmq admin stats group GROUP``.

RocketMQ's ``statsAll``: messages produced to TOPIC and consumed from it (in
all and per consumer group), or consumed by GROUP (in all and per topic), over
the last minute and the last hour, with the rate per second of each window
(count / 60 s, count / 3600 s). Each master (or ``--broker``) answers for its
own traffic (RPC ``GetTrafficStats``, admin-only under the ACL); the command
adds them up and names the masters counted. Produced counts messages stored,
consumed counts messages returned to pulls (a pull that reads from a replica
is counted there, not here), the same counts the brokers' Prometheus
``boltmq.broker.in.messages`` / ``out.messages`` add. A master that does not
know the topic or group is skipped; none knowing it is an error (exit 1).

    topic orders on broker-a, broker-b
      produced  last minute 120 (2.00/s)  last hour 120 (0.03/s)
      consumed  last minute 120 (2.00/s)  last hour 120 (0.03/s)
      group billing  consumed  last minute 120 (2.00/s)  last hour 120 (0.03/s)
"""

from __future__ import annotations

from collections import defaultdict

import click
import grpc

from boltmq.cli.admin import Admin, _rpc_text, _with_admin, admin
from boltmq.cli.group_admin import _each
from boltmq.cli.messages import fail
from boltmq.v1 import broker_pb2

MINUTE_S = 60
HOUR_S = 3600


@admin.group()
def stats() -> None:
    """Messages produced and consumed over the last minute and hour."""


def _window(minute: int, hour: int) -> str:
    return (
        f"last minute {minute} ({minute / MINUTE_S:.2f}/s)  "
        f"last hour {hour} ({hour / HOUR_S:.2f}/s)"
    )


def _show(admin_: Admin, kind: str, name: str, request: broker_pb2.GetTrafficStatsRequest) -> None:
    answers: list[tuple[str, broker_pb2.GetTrafficStatsResponse]] = []
    for broker, answer in _each(admin_, "GetTrafficStats", request):
        if isinstance(answer, grpc.RpcError):
            if answer.code() == grpc.StatusCode.NOT_FOUND:
                continue
            raise fail(f"GetTrafficStats on {broker.broker_name}: {_rpc_text(answer)}")
        answers.append((broker.broker_name, answer))
    if not answers:
        raise fail(f"{kind} {name!r} is unknown on every master")
    produced = [sum(a.produced.last_minute for _, a in answers)]
    produced.append(sum(a.produced.last_hour for _, a in answers))
    consumed = [sum(a.consumed.last_minute for _, a in answers)]
    consumed.append(sum(a.consumed.last_hour for _, a in answers))
    parts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for _, answer in answers:
        for part in answer.parts:
            parts[part.name][0] += part.consumed.last_minute
            parts[part.name][1] += part.consumed.last_hour
    click.echo(f"{kind} {name} on {', '.join(b for b, _ in answers)}")
    if kind == "topic":
        click.echo(f"  produced  {_window(*produced)}")
    click.echo(f"  consumed  {_window(*consumed)}")
    label = "group" if kind == "topic" else "topic"
    for part_name in sorted(parts):
        click.echo(f"  {label} {part_name}  consumed  {_window(*parts[part_name])}")


@stats.command("topic")
@click.argument("name")
@_with_admin
def stats_topic(admin_: Admin, name: str) -> None:
    """Messages produced to topic NAME and consumed from it, per group, on every master."""
    _show(admin_, "topic", name, broker_pb2.GetTrafficStatsRequest(topic=name))


@stats.command("group")
@click.argument("name")
@_with_admin
def stats_group(admin_: Admin, name: str) -> None:
    """Messages consumer group NAME consumed, per topic, on every master."""
    _show(admin_, "group", name, broker_pb2.GetTrafficStatsRequest(group=name))
