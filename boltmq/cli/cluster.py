"""``boltmq admin cluster``: every broker group, its members and their state.

The registry's ``GetClusterInfo`` lists the live members of every group
(cluster, group, broker id, address, the epoch each registered with, topic
count); each member's own ``GetBrokerInfo`` adds what its store reports: its
role as it runs now, its epoch and its CommitLog end. A replica's lag is its
master's CommitLog end minus its own, in bytes (``-`` while the group has no
answering master). A member that does not answer keeps its registry row,
``-`` in the store's columns, and a line below the table says why: the
command still succeeds, since a member that is down is what one looks for here.

The table is plain text (rich, without box or colour), one row per member,
groups in name order, members by broker id:

Column          | Holds
----------------+------------------------------------------------------------
CLUSTER         | cluster name
GROUP           | broker group (broker name)
ROLE            | ``master`` (broker id 0) or ``replica``, as registered
ID              | broker id
ADDRESS         | the broker's advertised address
STORE ROLE      | ASYNC_MASTER, SYNC_MASTER or SLAVE, as the store runs now
EPOCH           | the store's master epoch (the registered one if it did not answer)
COMMITLOG END   | the store's CommitLog max offset (bytes)
LAG B           | replicas: master's CommitLog end - own (bytes)
TOPICS          | topics the member registered
"""

from __future__ import annotations

from collections.abc import Iterable

import click
import grpc
from rich.console import Console
from rich.table import Table
from rich.text import Text

from boltmq.cli.admin import RPC_TIMEOUT_S, Admin, _rpc_text, _with_admin, admin
from boltmq.cli.security import signed_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2

COLUMNS = (
    "CLUSTER",
    "GROUP",
    "ROLE",
    "ID",
    "ADDRESS",
    "STORE ROLE",
    "EPOCH",
    "COMMITLOG END",
    "LAG B",
    "TOPICS",
)
TABLE_WIDTH = 240
"""Wide enough that no row wraps: scripts read one member per line."""


def _broker_info(address: str, group: str) -> broker_pb2.BrokerInfo | str:
    """The member's GetBrokerInfo (signed for its ``group``), or why it did not answer."""
    channel = signed_channel(address, group)
    try:
        return broker_pb2_grpc.BrokerServiceStub(channel).GetBrokerInfo(
            broker_pb2.GetBrokerInfoRequest(), timeout=RPC_TIMEOUT_S
        )
    except grpc.RpcError as exc:
        return _rpc_text(exc)
    finally:
        channel.close()


def _rows(
    members: Iterable[registry_pb2.BrokerLiveInfo],
    infos: dict[str, broker_pb2.BrokerInfo | str],
) -> list[tuple[str, ...]]:
    masters_end = {
        m.broker_name: info.store.commitlog_max_offset
        for m in members
        if m.broker_id == 0 and isinstance(info := infos[m.address], broker_pb2.BrokerInfo)
    }
    rows: list[tuple[str, ...]] = []
    for m in members:
        info = infos[m.address]
        role = "master" if m.broker_id == 0 else "replica"
        store_role, epoch, end, lag = "-", str(m.epoch), "-", "-"
        if isinstance(info, broker_pb2.BrokerInfo):
            store_role, epoch = info.store.broker_role or "-", str(info.store.epoch)
            end = str(info.store.commitlog_max_offset)
            master_end = masters_end.get(m.broker_name)
            if m.broker_id != 0 and master_end is not None:
                lag = str(max(0, master_end - info.store.commitlog_max_offset))
        rows.append(
            (
                m.cluster_name,
                m.broker_name,
                role,
                str(m.broker_id),
                m.address,
                store_role,
                epoch,
                end,
                lag,
                str(m.topic_count),
            )
        )
    return rows


def render(rows: list[tuple[str, ...]]) -> str:
    """The plain-text table of ``rows`` (one line per row, a header line first)."""
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="", highlight=False)
    for name in COLUMNS:
        table.add_column(name, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console = Console(width=TABLE_WIDTH, no_color=True, highlight=False, markup=False)
    with console.capture() as captured:
        console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


@admin.command("cluster")
@_with_admin
def cluster(admin_: Admin) -> None:
    """Every broker group: its members (id, address, role), epochs and replication lag."""
    members = sorted(
        (
            b
            for b in admin_.cluster().brokers
            if admin_.only_broker is None or b.broker_name == admin_.only_broker
        ),
        key=lambda b: (b.cluster_name, b.broker_name, b.broker_id),
    )
    if not members:
        click.echo("no live brokers")
        return
    infos = {m.address: _broker_info(m.address, m.broker_name) for m in members}
    click.echo(render(_rows(members, infos)))
    for m in members:
        info = infos[m.address]
        if isinstance(info, str):
            click.echo(f"{m.broker_name} {m.broker_id} at {m.address} did not answer: {info}")
