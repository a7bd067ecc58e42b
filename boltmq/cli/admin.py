"""``boltmq admin``: topics, groups, the cluster and single messages.

Brokers are found through the registry (``GetClusterInfo``); a command that
changes a topic goes to every master broker of the cluster (or the one named
with ``--broker``, or those ``topic create --groups a,b`` names), as RocketMQ's
``updateTopic -c`` does, so a topic's queues live on every group and its route
merges them. ``--broker-address
HOST:PORT`` skips the registry and talks to that one broker (on the broker's
own host, ``127.0.0.1:PORT``: how accounts are prepared while the ACL is off).

Signed calls name the broker group they are for (:mod:`boltmq.kernel.signing`):
the registry gives each master's name; with ``--broker-address``, ``--broker NAME``
names it, else the calls are signed for any broker (a captured one could be
replayed on another group within the signature window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import grpc

from boltmq.cli.messages import fail, registry_option
from boltmq.cli.security import client_tls, signed_channel
from boltmq.client import PERM_READ, PERM_WRITE, parse_addresses
from boltmq.kernel.registry_client import RegistryClient, RegistryError
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2, store_pb2
from boltmq.wire.record import PROPERTY_UNIQ_KEY, parse_msg_id

RPC_TIMEOUT_S = 5.0


def _rpc_text(exc: grpc.RpcError) -> str:
    return f"{exc.code().name}: {exc.details()}"


class Admin:
    """Registry and broker stubs for one admin command."""

    def __init__(
        self, registry: str, broker: str | None, broker_address: str | None = None
    ) -> None:
        try:
            self.registry = RegistryClient(parse_addresses(registry), tls=client_tls())
            if broker_address is not None:
                parse_addresses(broker_address)
        except ValueError as exc:
            raise fail(str(exc)) from None
        self.only_broker = broker
        self.broker_address = broker_address
        """Talk to this broker alone, without asking the registry."""
        self._channels: list[grpc.Channel] = []

    def cluster(self) -> registry_pb2.ClusterInfo:
        try:
            return self.registry.cluster_info()
        except RegistryError as exc:
            raise fail(str(exc)) from None

    def masters(self, groups: str | None = None) -> list[registry_pb2.BrokerLiveInfo]:
        """The masters to call: each registered one (or the one ``--broker`` names), the
        broker at ``--broker-address`` named ``--broker`` (else by its address), or the
        live masters of the comma-separated broker ``groups`` when given (each must have
        one, otherwise the command fails naming it and the live groups)."""
        if groups is not None:
            return self._masters_of(groups)
        if self.broker_address:
            address = self.broker_address
            name = self.only_broker or address
            return [registry_pb2.BrokerLiveInfo(broker_name=name, address=address)]
        brokers = [
            b
            for b in self.cluster().brokers
            if b.broker_id == 0 and (self.only_broker is None or b.broker_name == self.only_broker)
        ]
        if not brokers:
            where = f"named {self.only_broker!r} " if self.only_broker else ""
            raise fail(f"no live master broker {where}is registered")
        return sorted(brokers, key=lambda b: b.broker_name)

    def _masters_of(self, groups: str) -> list[registry_pb2.BrokerLiveInfo]:
        names = [name.strip() for name in groups.split(",")]
        if not all(names):
            raise fail(f"--groups: give broker group names separated by commas, not {groups!r}")
        if self.only_broker or self.broker_address:
            raise fail("--groups: give either --groups or --broker / --broker-address")
        live = {b.broker_name: b for b in self.cluster().brokers if b.broker_id == 0}
        unknown = [name for name in dict.fromkeys(names) if name not in live]
        if unknown:
            raise fail(
                f"--groups: no live master of {', '.join(map(repr, unknown))} "
                f"(live groups: {', '.join(sorted(live)) or 'none'})"
            )
        return [live[name] for name in sorted(set(names))]

    def each_master_of(
        self, groups: str | None, method: str, request: Any
    ) -> list[tuple[str, Any]]:
        """:meth:`each_master`, limited to ``groups`` (comma separated) when given."""
        masters = self.masters(groups)
        return [
            (b.broker_name, self.call(b.address, method, request, self.target(b))) for b in masters
        ]

    @staticmethod
    def stub(channel: grpc.Channel) -> broker_pb2_grpc.BrokerServiceStub:
        return broker_pb2_grpc.BrokerServiceStub(channel)

    def target(self, broker: registry_pb2.BrokerLiveInfo) -> str:
        """The group name ``broker``'s calls are signed for (empty: any broker, for a
        ``--broker-address`` without ``--broker``)."""
        if self.broker_address:
            return self.only_broker or ""
        return broker.broker_name

    def call(self, address: str, method: str, request: Any, target: str = "") -> Any:
        channel = signed_channel(address, target)
        self._channels.append(channel)
        stub = self.stub(channel)
        try:
            return getattr(stub, method)(request, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as exc:
            raise fail(f"{method} on {address}: {_rpc_text(exc)}") from None

    def stub_of(self, broker: registry_pb2.BrokerLiveInfo) -> broker_pb2_grpc.BrokerServiceStub:
        """A stub for many calls to ``broker`` (closed with the others)."""
        channel = signed_channel(broker.address, self.target(broker))
        self._channels.append(channel)
        return self.stub(channel)

    def each_master(self, method: str, request: Any) -> list[tuple[str, Any]]:
        return [
            (b.broker_name, self.call(b.address, method, request, self.target(b)))
            for b in self.masters()
        ]

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        self.registry.close()


def _with_admin(fn: Callable[..., None]) -> Callable[..., None]:
    """Adds --registry and --broker and hands the command an :class:`Admin`."""

    @registry_option
    @click.option(
        "--broker",
        default=None,
        help="Only this broker name (with --broker-address: the name of the broker there, "
        "which signed calls are for).",
    )
    @click.option(
        "--broker-address",
        default=None,
        metavar="HOST:PORT",
        help="Only the broker at this address, without asking the registry "
        "(127.0.0.1:PORT on the broker's host while the ACL is off).",
    )
    def wrapper(
        registry: str, broker: str | None, broker_address: str | None, **kwargs: Any
    ) -> None:
        admin = Admin(registry, broker, broker_address)
        try:
            fn(admin, **kwargs)
        finally:
            admin.close()

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@click.group()
def admin() -> None:
    """Administer topics, groups and the cluster."""


# ------------------------------------------------------------------------ topics
@admin.group()
def topic() -> None:
    """Create, change, delete and look at topics."""


def _perm_text(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")


def _upsert(
    admin_: Admin, name: str, queues: int, perm: int, order: bool, groups: str | None
) -> None:
    config = registry_pb2.TopicConfig(
        name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm, order=order
    )
    for broker_name, response in admin_.each_master_of(
        groups, "UpsertTopic", broker_pb2.UpsertTopicRequest(topic=config)
    ):
        t = response.topic
        click.echo(
            f"{broker_name}: {t.name} queues {t.write_queue_nums}/{t.read_queue_nums} "
            f"perm {_perm_text(t.perm)}{' order' if t.order else ''}"
        )


_QUEUES = click.option("--queues", default=8, show_default=True, type=click.IntRange(1, 1024))
_PERM = click.option(
    "--perm",
    default=6,
    show_default=True,
    type=click.IntRange(0, 7),
    help="READ 4 | WRITE 2 | INHERIT 1.",
)
_ORDER = click.option("--order", is_flag=True, help="Mark the topic as ordered.")
_GROUPS = click.option(
    "--groups",
    default=None,
    metavar="A,B",
    help="Only these broker groups (comma separated; default: every live master).",
)


@topic.command("create")
@click.argument("name")
@_QUEUES
@_PERM
@_ORDER
@_GROUPS
@_with_admin
def topic_create(
    admin_: Admin, name: str, queues: int, perm: int, order: bool, groups: str | None
) -> None:
    """Create topic NAME on every master (or --broker, or --groups)."""
    _upsert(admin_, name, queues, perm, order, groups)


@topic.command("update")
@click.argument("name")
@_QUEUES
@_PERM
@_ORDER
@_GROUPS
@_with_admin
def topic_update(
    admin_: Admin, name: str, queues: int, perm: int, order: bool, groups: str | None
) -> None:
    """Change topic NAME's queues or permissions (every master, or --broker, or --groups)."""
    _upsert(admin_, name, queues, perm, order, groups)


@topic.command("delete")
@click.argument("name")
@_with_admin
def topic_delete(admin_: Admin, name: str) -> None:
    """Delete topic NAME from every master (its messages age out with retention)."""
    for broker_name, _ in admin_.each_master(
        "DeleteTopic", broker_pb2.DeleteTopicRequest(topic=name)
    ):
        click.echo(f"{broker_name}: {name} deleted")


@topic.command("list")
@_with_admin
def topic_list(admin_: Admin) -> None:
    """Every topic of every master."""
    for broker_name, response in admin_.each_master("ListTopics", broker_pb2.ListTopicsRequest()):
        for t in sorted(response.topics, key=lambda t: t.name):
            click.echo(
                f"{broker_name:<12} {t.name:<40} queues {t.write_queue_nums:>3} "
                f"perm {_perm_text(t.perm)}"
            )


@topic.command("route")
@click.argument("name")
@_with_admin
def topic_route(admin_: Admin, name: str) -> None:
    """The registry's route for topic NAME."""
    try:
        route = admin_.registry.get_route(name)
    except RegistryError as exc:
        raise fail(str(exc)) from None
    for q in route.queues:
        click.echo(
            f"queues  {q.broker_name}: write {q.write_queue_nums} read "
            f"{q.read_queue_nums} perm {_perm_text(q.perm)}"
        )
    for b in route.brokers:
        members = ", ".join(f"{i}={a}" for i, a in sorted(b.addresses.items()))
        click.echo(f"broker  {b.cluster_name}/{b.broker_name}: {members}")


@topic.command("status")
@click.argument("name")
@_with_admin
def topic_status(admin_: Admin, name: str) -> None:
    """Min and max offset of every queue of topic NAME."""
    for broker_name, response in admin_.each_master(
        "TopicStatus", broker_pb2.TopicStatusRequest(topic=name)
    ):
        for q in sorted(response.queues, key=lambda q: q.queue_id):
            click.echo(
                f"{broker_name:<12} {q.topic}/{q.queue_id:<4} min {q.min_offset:>12} "
                f"max {q.max_offset:>12}"
            )


# ------------------------------------------------------------------------ groups
@admin.group()
def group() -> None:
    """Consumer groups: settings, members, progress and dead letters."""


@group.command("list")
@_with_admin
def group_list(admin_: Admin) -> None:
    """Consumer groups known to the masters, with their live members."""
    for broker_name, response in admin_.each_master("ListGroups", broker_pb2.ListGroupsRequest()):
        for g in sorted(response.groups, key=lambda g: g.group):
            click.echo(
                f"{broker_name:<12} {g.group:<32} {g.model or '-':<12} members {len(g.client_ids)}"
            )


@group.command("progress")
@click.argument("name")
@_with_admin
def group_progress(admin_: Admin, name: str) -> None:
    """Offsets and lag of group NAME per queue."""
    total = 0
    for broker_name, response in admin_.each_master(
        "GroupProgress", broker_pb2.GroupProgressRequest(group=name)
    ):
        for q in sorted(response.queues, key=lambda q: (q.topic, q.queue_id)):
            total += q.lag
            click.echo(
                f"{broker_name:<12} {q.topic}/{q.queue_id:<4} broker {q.broker_offset:>12} "
                f"consumer {q.consumer_offset:>12} lag {q.lag:>10}"
            )
    click.echo(f"total lag {total}")


# ------------------------------------------------------------------------ messages
@admin.group()
def message() -> None:
    """Look up single messages."""


def _show(broker_name: str, m: Any) -> None:
    click.echo(
        f"{broker_name}: {m.msg_id} {m.topic}/{m.queue_id}@{m.queue_offset} "
        f"commitlog {m.commitlog_offset} stored {m.store_timestamp_ms} "
        f"tags={m.tags or '-'} keys={' '.join(m.keys) or '-'} "
        f"unique_id={m.properties.get(PROPERTY_UNIQ_KEY) or '-'} body={m.body!r}"
    )


@message.command("id")
@click.argument("msg_id")
@click.option(
    "--topic",
    "topic_name",
    default=None,
    help="Search this topic's index only for a unique id (default: every topic).",
)
@_with_admin
def message_id(admin_: Admin, msg_id: str, topic_name: str | None) -> None:
    """The message with id MSG_ID: an offset id (32 or 56 hex digits, where the copy
    lies) or a producer's unique id (UNIQ_KEY, found through the index of every master,
    for every topic or --topic's; every copy a retried send left)."""
    if not msg_id or any(c.isspace() for c in msg_id):
        raise fail(f"message id {msg_id!r} must be non-empty without spaces")
    found = False
    not_offset_id = ""
    try:
        parse_msg_id(msg_id)
    except ValueError as exc:
        not_offset_id = f" (not an offset id: {exc})"  # a unique id only
    else:
        for broker_name, response in admin_.each_master(
            "ViewMessage", store_pb2.GetRequest(msg_id=msg_id)
        ):
            if response.found and response.message.msg_id == msg_id.upper():
                found = True
                _show(broker_name, response.message)
    if not found:
        for broker_name, m in _by_unique_id(admin_, msg_id, topic_name):
            found = True
            _show(broker_name, m)
    if not found:
        where = f"topic {topic_name!r}" if topic_name else "any topic"
        kind = "unique id" if not_offset_id else "offset id or unique id"
        raise fail(f"no message with {kind} {msg_id} in {where}{not_offset_id}")


def _by_unique_id(admin_: Admin, unique_id: str, topic_name: str | None) -> list[tuple[str, Any]]:
    """(broker name, message) of every master's messages whose UNIQ_KEY is ``unique_id``,
    in ``topic_name`` or in every topic the master has."""
    found = []
    for b in admin_.masters():
        stub = admin_.stub_of(b)
        try:
            if topic_name is not None:
                topics = [topic_name]
            else:
                listed = stub.ListTopics(broker_pb2.ListTopicsRequest(), timeout=RPC_TIMEOUT_S)
                topics = sorted(t.name for t in listed.topics)
            responses = []
            for name in topics:
                request = store_pb2.QueryByKeyRequest(topic=name, key=unique_id, max_count=16)
                try:
                    responses.append(stub.QueryMessageByKey(request, timeout=RPC_TIMEOUT_S))
                except grpc.RpcError as exc:
                    if exc.code() is not grpc.StatusCode.NOT_FOUND:
                        raise
                    # the topic is not (or no longer) on this group
        except grpc.RpcError as exc:
            raise fail(f"unique id lookup on {b.address}: {_rpc_text(exc)}") from None
        for response in responses:
            found += [
                (b.broker_name, m)
                for m in response.messages
                if m.properties.get(PROPERTY_UNIQ_KEY) == unique_id
            ]
    return found


@message.command("offset")
@click.argument("commitlog_offset", type=click.IntRange(min=0))
@_with_admin
def message_offset(admin_: Admin, commitlog_offset: int) -> None:
    """The message at COMMITLOG_OFFSET (use --broker when there are several)."""
    found = False
    for broker_name, response in admin_.each_master(
        "ViewMessage", store_pb2.GetRequest(commitlog_offset=commitlog_offset)
    ):
        if response.found:
            found = True
            _show(broker_name, response.message)
    if not found:
        raise fail(f"no message at offset {commitlog_offset}")


@message.command("key")
@click.argument("topic_name")
@click.argument("key")
@click.option("--max", "max_count", default=32, show_default=True, type=click.IntRange(1, 1024))
@_with_admin
def message_key(admin_: Admin, topic_name: str, key: str, max_count: int) -> None:
    """Messages of TOPIC_NAME whose key is KEY."""
    request = store_pb2.QueryByKeyRequest(topic=topic_name, key=key, max_count=max_count)
    count = 0
    for broker_name, response in admin_.each_master("QueryMessageByKey", request):
        for m in response.messages:
            count += 1
            _show(broker_name, m)
    if not count:
        raise fail(f"no message of {topic_name!r} with key {key!r}")
