"""``boltmq admin broker promote`` and ``boltmq admin ha status`` (docs/ha.md).

Both find the group's members through the registry: brokers (and the HA
addresses they registered) of one broker name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click
import grpc

from boltmq.cli.admin import RPC_TIMEOUT_S, Admin, _rpc_text, _with_admin, admin
from boltmq.cli.messages import fail
from boltmq.cli.security import signed_channel
from boltmq.v1 import broker_pb2, ha_pb2, ha_pb2_grpc, registry_pb2

PROMOTE_TIMEOUT_S = 60.0
"""A promotion waits for the replica to dispatch everything it received."""


def _group_members(admin_: Admin, broker_name: str) -> list[registry_pb2.BrokerLiveInfo]:
    members = sorted(
        (b for b in admin_.cluster().brokers if b.broker_name == broker_name),
        key=lambda b: b.broker_id,
    )
    if not members:
        raise fail(f"no live broker named {broker_name!r} is registered")
    return members


def _call_once(
    address: str, what: str, call: Callable[[grpc.Channel], Any], target: str = ""
) -> Any:
    """One call on a fresh channel to ``address``, signed for the broker group ``target``;
    a failure is one clear CLI line."""
    channel = signed_channel(address, target)
    try:
        return call(channel)
    except grpc.RpcError as exc:
        raise fail(f"{what} on {address}: {_rpc_text(exc)}") from None
    finally:
        channel.close()


@admin.group("broker")
def broker() -> None:
    """Fail over a broker group."""


@broker.command("promote")
@click.argument("broker_name")
@click.option(
    "--broker-id",
    type=click.IntRange(min=1),
    default=None,
    help="The replica to promote (default: the lowest replica id).",
)
@click.option(
    "--max-lag-bytes",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Refuse when the replica is further behind its master (0: promote anyway, "
    "e.g. when the master is gone for good).",
)
@_with_admin
def promote(admin_: Admin, broker_name: str, broker_id: int | None, max_lag_bytes: int) -> None:
    """Make a caught-up replica the master of BROKER_NAME; writes go to it from now on."""
    replicas = [b for b in _group_members(admin_, broker_name) if b.broker_id > 0]
    if broker_id is not None:
        replicas = [b for b in replicas if b.broker_id == broker_id]
    if not replicas:
        which = f"with id {broker_id} " if broker_id is not None else ""
        raise fail(f"{broker_name} has no live replica {which}to promote")
    target = replicas[0]
    info: broker_pb2.BrokerInfo = _call_once(
        target.address,
        "Promote",
        lambda channel: admin_.stub(channel).Promote(
            broker_pb2.PromoteRequest(max_lag_bytes=max_lag_bytes), timeout=PROMOTE_TIMEOUT_S
        ),
        broker_name,
    )
    click.echo(
        f"{broker_name}: {target.address} is the master now (epoch {info.store.epoch}, "
        f"CommitLog end {info.store.commitlog_max_offset})"
    )


@admin.group("ha")
def ha() -> None:
    """Replication state."""


@ha.command("status")
@_with_admin
def status(admin_: Admin) -> None:
    """Each replica's acked offset and lag, per broker group, from the masters' HA services."""
    masters = [
        b
        for b in admin_.cluster().brokers
        if b.broker_id == 0 and (admin_.only_broker is None or b.broker_name == admin_.only_broker)
    ]
    if not masters:
        raise fail("no live master broker is registered")
    for master in sorted(masters, key=lambda b: b.broker_name):
        if not master.ha_address:
            click.echo(f"{master.broker_name}: no HA service registered (no replicas)")
            continue
        state: ha_pb2.HAStatus = _call_once(
            master.ha_address,
            "HA Status",
            lambda channel: ha_pb2_grpc.HAServiceStub(channel).Status(
                ha_pb2.HAStatusRequest(), timeout=RPC_TIMEOUT_S
            ),
            master.broker_name,
        )
        click.echo(
            f"{master.broker_name}: master {master.address} epoch {state.epoch} "
            f"CommitLog end {state.max_offset}"
        )
        if not state.replicas:
            click.echo("  no replica connected")
        now_ms = time.time_ns() // 1_000_000
        for r in state.replicas:
            click.echo(
                f"  replica {r.replica_address:<22} acked {r.acked_offset:>14} "
                f"lag {r.lag_bytes:>12} B {r.lag_seconds:8.1f} s   last report "
                f"{max(0, now_ms - r.last_report_ms)} ms ago"
            )
