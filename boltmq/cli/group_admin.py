"""``boltmq admin group create|update|delete|show``: consumer groups' settings.

Each command goes to every master broker (or ``--broker``), as ``admin topic
create`` does, so a group has the same settings on every broker group. The
settings keep RocketMQ's meaning; a flag left out keeps the group's current
value (RocketMQ's default for a new group). What each one does on the broker,
and which values are refused because the broker cannot act on them, is
documented in :mod:`services.broker.admin.group_settings`.

``delete`` refuses a group with live consumers on any master unless
``--force``; ``show`` prints the settings and every live member with its own
subscriptions, and says when members subscribe differently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import grpc

from boltmq.cli.admin import RPC_TIMEOUT_S, Admin, _rpc_text, _with_admin, group
from boltmq.cli.connections import subscriptions_text
from boltmq.cli.messages import fail
from boltmq.cli.security import signed_channel
from boltmq.v1 import broker_pb2
from boltmq.v1.registry_pb2 import BrokerLiveInfo

_SETTING_OPTIONS: list[Callable[[Callable[..., None]], Callable[..., None]]] = [
    click.option(
        "--consume-enable/--consume-disable",
        "consume_enable",
        default=None,
        help="Whether the group may pull (disabled: its pulls are refused).",
    ),
    click.option(
        "--broadcast-enable/--broadcast-disable",
        "consume_broadcast_enable",
        default=None,
        help="Whether the group may consume BROADCASTING.",
    ),
    click.option(
        "--consume-from-min-enable/--consume-from-min-disable",
        "consume_from_min_enable",
        default=None,
        help="Only enabled is accepted (consumers choose where a new group starts).",
    ),
    click.option(
        "--orderly/--concurrently",
        "consume_message_orderly",
        default=None,
        help="The group consumes orderly (reported by group list).",
    ),
    click.option("--retry-queue-nums", type=int, default=None, help="Queues of %RETRY%<group>."),
    click.option(
        "--retry-max-times",
        type=int,
        default=None,
        help="Deliveries before a message goes to %DLQ%<group> (1..1000, default 16).",
    ),
    click.option("--broker-id", type=int, default=None, help="Only 0 (the master)."),
    click.option(
        "--which-broker-when-consume-slowly",
        type=int,
        default=None,
        help="Only 1 (the SDK picks the replica a lagging group reads from).",
    ),
]


def _setting_options(fn: Callable[..., None]) -> Callable[..., None]:
    for option in reversed(_SETTING_OPTIONS):
        fn = option(fn)
    return fn


def _each(admin_: Admin, method: str, request: Any) -> list[tuple[BrokerLiveInfo, Any]]:
    """``method`` on every master: (the master, its answer or the grpc.RpcError raised)."""
    answers: list[tuple[BrokerLiveInfo, Any]] = []
    for broker in admin_.masters():
        channel = signed_channel(broker.address, admin_.target(broker))
        try:
            stub = admin_.stub(channel)
            answers.append((broker, getattr(stub, method)(request, timeout=RPC_TIMEOUT_S)))
        except grpc.RpcError as exc:
            answers.append((broker, exc))
        finally:
            channel.close()
    return answers


def _settings_text(s: broker_pb2.GroupSettings) -> str:
    def flag(value: bool) -> str:
        return "true" if value else "false"

    return (
        f"consume-enable {flag(s.consume_enable)}  "
        f"broadcast-enable {flag(s.consume_broadcast_enable)}  "
        f"consume-from-min-enable {flag(s.consume_from_min_enable)}  "
        f"orderly {flag(s.consume_message_orderly)}\n"
        f"  retry-queue-nums {s.retry_queue_nums}  retry-max-times {s.retry_max_times}  "
        f"broker-id {s.broker_id}  "
        f"which-broker-when-consume-slowly {s.which_broker_when_consume_slowly}"
    )


def _upsert(admin_: Admin, name: str, settings: dict[str, Any]) -> None:
    request = broker_pb2.UpsertGroupRequest(
        group=name, **{k: v for k, v in settings.items() if v is not None}
    )
    for broker_name, response in admin_.each_master("UpsertGroup", request):
        click.echo(f"{broker_name}: group {response.group}\n  {_settings_text(response.settings)}")


@group.command("create")
@click.argument("name")
@_setting_options
@_with_admin
def group_create(admin_: Admin, name: str, **settings: Any) -> None:
    """Create (or change) consumer group NAME on every master (or --broker)."""
    _upsert(admin_, name, settings)


@group.command("update")
@click.argument("name")
@_setting_options
@_with_admin
def group_update(admin_: Admin, name: str, **settings: Any) -> None:
    """Change settings of existing consumer group NAME on every master (or --broker)."""
    if all(value is None for value in settings.values()):
        raise fail("update: name at least one setting to change (see --help)")
    for broker, answer in _each(admin_, "GetGroup", broker_pb2.GetGroupRequest(group=name)):
        broker_name = broker.broker_name
        if isinstance(answer, grpc.RpcError) and answer.code() != grpc.StatusCode.NOT_FOUND:
            raise fail(f"GetGroup on {broker_name}: {_rpc_text(answer)}")
        if isinstance(answer, grpc.RpcError) or not answer.HasField("settings"):
            raise fail(f"group {name!r} does not exist on {broker_name} (create it first)")
    _upsert(admin_, name, settings)


@group.command("delete")
@click.argument("name")
@click.option("--force", is_flag=True, help="Delete even while consumers of the group run.")
@_with_admin
def group_delete(admin_: Admin, name: str, force: bool) -> None:
    """Delete consumer group NAME's settings on every master (or --broker); its offsets and
    retry and dead-letter topics stay."""
    found = [
        (broker, answer)
        for broker, answer in _each(admin_, "GetGroup", broker_pb2.GetGroupRequest(group=name))
        if not isinstance(answer, grpc.RpcError) and answer.HasField("settings")
    ]
    if not found:
        raise fail(f"group {name!r} does not exist on any master")
    live = {m.client_id for _, answer in found for m in answer.members}
    if live and not force:
        raise fail(
            f"group {name!r} has {len(live)} live consumer(s) ({', '.join(sorted(live)[:5])}); "
            f"stop them first or pass --force"
        )
    request = broker_pb2.DeleteGroupRequest(group=name, force=force)
    for broker, _ in found:
        admin_.call(broker.address, "DeleteGroup", request, admin_.target(broker))
        click.echo(f"{broker.broker_name}: group {name} deleted")


@group.command("show")
@click.argument("name")
@_with_admin
def group_show(admin_: Admin, name: str) -> None:
    """Settings and live members (each with its subscriptions) of consumer group NAME."""
    known = False
    for broker, answer in _each(admin_, "GetGroup", broker_pb2.GetGroupRequest(group=name)):
        broker_name = broker.broker_name
        if isinstance(answer, grpc.RpcError):
            if answer.code() != grpc.StatusCode.NOT_FOUND:
                raise fail(f"GetGroup on {broker_name}: {_rpc_text(answer)}")
            click.echo(f"{broker_name}: group {name} unknown here")
            continue
        known = True
        settings = (
            _settings_text(answer.settings)
            if answer.HasField("settings")
            else "no settings (live members only)"
        )
        click.echo(f"{broker_name}: group {name}\n  {settings}")
        for member in answer.members:
            subscriptions = subscriptions_text(member.subscriptions)
            excluded = "  EXCLUDED: no queues" if member.excluded else ""
            click.echo(f"  member {member.client_id} {member.model}  {subscriptions}{excluded}")
        if answer.inconsistent:
            click.echo(
                "  INCONSISTENT: members subscribe differently; only those subscribing as "
                "most do share the queues, the EXCLUDED ones get none until they match"
            )
    if not known:
        raise fail(f"group {name!r} is unknown on every master")
