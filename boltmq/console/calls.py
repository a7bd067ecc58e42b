"""The console's calls to one cluster, signed with one account (or unsigned, ACL off).

:class:`ClusterCalls` wraps the SDK's :class:`boltmq.client.ClientInstance` (its
registry client, its broker stubs signed for the group they go to) and asks
every master, as ``boltmq admin`` does: :meth:`ClusterCalls.each` answers each
master's reply, or the ``grpc.RpcError`` it raised, so a page can show what one
broker group refused beside what the others answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc

from boltmq.client import MASTER_ID, ClientInstance, rpc_error_text
from boltmq.kernel.registry_client import RegistryError
from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import broker_pb2, registry_pb2

RPC_TIMEOUT_S = 5.0
ACL_OFF_REMOTE = "access control is off"
"""How a broker begins refusing ``GetAcl`` to a caller off its host while the ACL is off."""
PARALLEL_CALLS = 8
"""Calls in flight at once when a page asks one thing per topic or group."""

T = TypeVar("T")
R = TypeVar("R")


class ConsoleError(Exception):
    """What the console tells the user instead of a page (one line)."""


class NotSignedIn(ConsoleError):
    """The cluster wants signed calls and the request has no account."""


def denied(exc: grpc.RpcError) -> bool:
    """The broker refused the account (unknown, bad signature, or no right)."""
    return exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED)


def error_text(exc: grpc.RpcError) -> str:
    return rpc_error_text(exc)


class ClusterCalls:
    """Registry and broker calls of one account (``credentials`` None: unsigned)."""

    def __init__(
        self, registry: str, tls: ClientTLS | None, credentials: Credentials | None
    ) -> None:
        self.credentials = credentials
        self.client = ClientInstance(
            registry, rpc_timeout_s=RPC_TIMEOUT_S, tls=tls, credentials=credentials
        )
        self._pool = ThreadPoolExecutor(PARALLEL_CALLS, thread_name_prefix="console-calls")

    @property
    def access_key(self) -> str:
        return self.credentials.access_key if self.credentials else ""

    def members(self) -> list[registry_pb2.BrokerLiveInfo]:
        """Every live broker the registries know, by group and id."""
        try:
            brokers = self.client.cluster_brokers()
        except RegistryError as exc:
            raise ConsoleError(f"registry: {exc}") from None
        return sorted(brokers, key=lambda b: (b.cluster_name, b.broker_name, b.broker_id))

    def masters(self) -> list[registry_pb2.BrokerLiveInfo]:
        masters = [b for b in self.members() if b.broker_id == MASTER_ID]
        if not masters:
            raise ConsoleError("no live master broker is registered")
        return masters

    def call(self, broker: registry_pb2.BrokerLiveInfo, method: str, request: Any) -> Any:
        """``method`` on ``broker``; grpc.RpcError when it refuses."""
        stub = self.client.broker(broker.address)
        return getattr(stub, method)(request, timeout=RPC_TIMEOUT_S)

    def each(
        self,
        method: str,
        request: Any,
        masters: Sequence[registry_pb2.BrokerLiveInfo] | None = None,
    ) -> list[tuple[registry_pb2.BrokerLiveInfo, Any]]:
        """``method`` on every master: (master, its answer or the grpc.RpcError raised)."""
        answers: list[tuple[registry_pb2.BrokerLiveInfo, Any]] = []
        for broker in self.masters() if masters is None else masters:
            try:
                answers.append((broker, self.call(broker, method, request)))
            except grpc.RpcError as exc:
                answers.append((broker, exc))
        return answers

    def each_ok(self, method: str, request: Any) -> list[tuple[str, Any]]:
        """``method`` on every master, every one answering (else ConsoleError naming it)."""
        answers = []
        for broker, answer in self.each(method, request):
            if isinstance(answer, grpc.RpcError):
                raise ConsoleError(f"{method} on {broker.broker_name}: {error_text(answer)}")
            answers.append((broker.broker_name, answer))
        return answers

    def in_parallel(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``fn`` of every item, a few at a time, in the items' order."""
        return list(self._pool.map(fn, items))

    def is_admin(self) -> bool:
        """Whether the account may make admin calls (reading the ACL is one)."""
        try:
            self.call(self.masters()[0], "GetAcl", broker_pb2.GetAclRequest())
        except grpc.RpcError as exc:
            if denied(exc):
                return False
            raise ConsoleError(f"GetAcl: {error_text(exc)}") from None
        return True

    def check_account(self) -> None:
        """ConsoleError unless the brokers accept the account's signature."""
        try:
            self.call(self.masters()[0], "ListTopics", broker_pb2.ListTopicsRequest())
        except grpc.RpcError as exc:
            if denied(exc):
                raise NotSignedIn("the brokers refused this access key and secret") from None
            raise ConsoleError(f"ListTopics: {error_text(exc)}") from None

    def probe_acl(self) -> tuple[bool, bool]:
        """(the brokers want signed calls, unsigned calls may change things), from an
        unsigned ``GetAcl``: answered while the ACL is off (to a caller on the broker's
        host); refused while it is on, or off but asked from elsewhere (the broker says
        so: then nothing needs a login, and nothing may be changed from here)."""
        try:
            document = self.call(self.masters()[0], "GetAcl", broker_pb2.GetAclRequest())
        except grpc.RpcError as exc:
            if denied(exc):
                return ACL_OFF_REMOTE not in (exc.details() or ""), False
            raise ConsoleError(f"GetAcl: {error_text(exc)}") from None
        return bool(document.enforced), True

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()
