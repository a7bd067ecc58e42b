"""Clients of the name registry for brokers, the SDK and the CLI.

Registries are independent and hold no shared state, so the two kinds of call
treat the list of registries differently:

- Look-ups (``get_route``, ``get_routes``, ``cluster_info``) ask one registry at a time,
  starting with the last one that answered, and take the first answer. A
  registry that says NOT_FOUND may simply not have heard from the broker yet
  (it restarted less than one heartbeat ago), so the next one is asked too;
  :class:`TopicNotFound` is raised only when no reachable registry knows the
  topic. ``get_routes`` asks the next registry for the topics the first one
  did not know, and returns the ones none knew instead of raising.
- Announcements (``register``, ``unregister``) go to every registry, because a
  broker must be known to all of them. The result says which accepted; only
  when none did is :class:`RegistryUnavailable` raised.

UNAVAILABLE and DEADLINE_EXCEEDED mean "try again": a look-up walks the whole
list again and an announcement retries that registry, with exponential
backoff and jitter (tenacity), up to ``attempts_max`` attempts.
INVALID_ARGUMENT is the caller's mistake and raises :class:`RegistryRejected`
at once, naming the field.

:class:`RegistryClient` is blocking (SDK threads, CLI);
:class:`AsyncRegistryClient` is the same on ``grpc.aio`` and announces to all
registries concurrently (the broker's 30 s heartbeat).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import grpc
from tenacity import (
    AsyncRetrying,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from boltmq.kernel import channels
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import registry_pb2, registry_pb2_grpc

RPC_TIMEOUT_S = 3.0
"""Deadline of one call to one registry."""
ATTEMPTS_MAX = 3
"""Attempts per look-up (each walks every registry) or per announcement to one registry."""
BACKOFF_INITIAL_S = 0.1
"""First pause between attempts; it doubles up to ``BACKOFF_MAX_S``."""
BACKOFF_MAX_S = 2.0
"""Longest pause between attempts."""
RETRYABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Statuses that mean the registry could not answer, not that the answer is no."""

ROUTES_PER_CALL = 4096
"""Topics one GetRoutes call names (the registry's ROUTES_PER_CALL_MAX)."""

T = TypeVar("T")


class RegistryError(Exception):
    """A registry call failed; the subclasses say how."""


class RegistryUnavailable(RegistryError):
    """No registry could be reached (or none accepted an announcement)."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        """Address -> the last failure seen there."""
        detail = "; ".join(f"{address}: {reason}" for address, reason in self.errors.items())
        super().__init__(f"no registry reachable ({detail})")


class TopicNotFound(RegistryError, LookupError):
    """No reachable registry knows a live broker serving the topic."""

    def __init__(self, topic: str, details: str) -> None:
        super().__init__(details or f"topic {topic!r}: no live broker serves it")
        self.topic = topic


class RegistryRejected(RegistryError, ValueError):
    """The registry refused the request as invalid; the message names the field."""


class _Unreachable(RegistryError):
    """One registry did not answer; retried, then folded into RegistryUnavailable."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"{address}: {reason}")
        self.address = address
        self.reason = reason


class _NoneReachable(RegistryError):
    """A whole walk over the registries found none reachable (retried)."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("no registry reachable")
        self.errors = dict(errors)


class _NotServed(RegistryError):
    """One registry answered NOT_FOUND."""


@dataclass(frozen=True)
class RegistrationResult:
    """Which registries accepted an announcement and why the others did not."""

    accepted: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=dict)
    superseded: registry_pb2.RegisterBrokerResponse | None = None
    """Set when a registry refused the broker as master: a newer-epoch master is live."""


def _failure(address: str, exc: grpc.RpcError) -> RegistryError:
    """The named error for one registry's failed call."""
    code = exc.code()
    details = exc.details() or ""
    if code in RETRYABLE_CODES:
        return _Unreachable(address, f"{code.name}: {details}")
    if code == grpc.StatusCode.NOT_FOUND:
        return _NotServed(details)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return RegistryRejected(details)
    return RegistryError(f"registry {address} failed: {code.name}: {details}")


class _Walk:
    """Bookkeeping of one look-up over the registries."""

    def __init__(self, topic: str = "") -> None:
        self.topic = topic
        self.unreachable: dict[str, str] = {}
        self.not_found: _NotServed | None = None

    def failed(self, address: str, exc: grpc.RpcError) -> None:
        """Note a failure worth asking the next registry about; raise the final ones."""
        failure = _failure(address, exc)
        if isinstance(failure, _Unreachable):
            self.unreachable[address] = failure.reason
        elif isinstance(failure, _NotServed):
            self.not_found = failure
        else:
            raise failure from None

    def finish(self) -> NoReturn:
        """Every registry was asked and none answered."""
        if self.not_found is not None:
            raise TopicNotFound(self.topic, str(self.not_found))
        raise _NoneReachable(self.unreachable)


def _result(
    accepted: list[str], failed: dict[str, str], answers: Iterable[object] = ()
) -> RegistrationResult:
    if not accepted:
        raise RegistryUnavailable(failed)
    superseded = next(
        (a for a in answers if isinstance(a, registry_pb2.RegisterBrokerResponse) and a.superseded),
        None,
    )
    return RegistrationResult(tuple(accepted), failed, superseded)


def _register_request(
    cluster_name: str,
    broker_name: str,
    broker_id: int,
    address: str,
    ha_address: str,
    topics: Iterable[registry_pb2.TopicConfig],
    data_version: int,
    epoch: int,
) -> registry_pb2.RegisterBrokerRequest:
    return registry_pb2.RegisterBrokerRequest(
        cluster_name=cluster_name,
        broker_name=broker_name,
        broker_id=broker_id,
        address=address,
        ha_address=ha_address,
        topics=list(topics),
        data_version=data_version,
        epoch=epoch,
    )


class _ClientBase:
    """Addresses, retry policy and the rotation shared by both clients."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        rpc_timeout_s: float = RPC_TIMEOUT_S,
        attempts_max: int = ATTEMPTS_MAX,
        backoff_initial_s: float = BACKOFF_INITIAL_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        tls: ClientTLS | None = None,
    ) -> None:
        if isinstance(addresses, str):
            raise TypeError("addresses is a list of 'host:port' strings, not one string")
        unique = list(dict.fromkeys(addresses))
        if not unique or not all(isinstance(a, str) and a for a in unique):
            raise ValueError(
                f"registry addresses must be non-empty 'host:port' strings, got {list(addresses)!r}"
            )
        if attempts_max < 1:
            raise ValueError("attempts_max must be at least 1")
        self.addresses: tuple[str, ...] = tuple(unique)
        """The registries, in the order given (duplicates dropped)."""
        self._rpc_timeout_s = rpc_timeout_s
        self._attempts_max = attempts_max
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._tls = tls
        """TLS of the channels to the registries (None: plaintext)."""
        self._preferred = 0

    def _rotation(self) -> Iterator[str]:
        """Every address once, starting with the one that answered last."""
        count = len(self.addresses)
        for step in range(count):
            yield self.addresses[(self._preferred + step) % count]

    def _answered(self, address: str) -> None:
        self._preferred = self.addresses.index(address)

    def _retry_policy(self, retry_on: type[Exception]) -> dict[str, Any]:
        return dict(
            retry=retry_if_exception_type(retry_on),
            stop=stop_after_attempt(self._attempts_max),
            wait=wait_exponential_jitter(
                multiplier=self._backoff_initial_s,
                max=self._backoff_max_s,
                jitter=self._backoff_initial_s,
            ),
            reraise=True,
        )


class RegistryClient(_ClientBase):
    """Blocking client of a list of registries; one instance may be shared by threads."""

    def __init__(self, addresses: Sequence[str], **options: Any) -> None:
        super().__init__(addresses, **options)
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, Any] = {}
        self._lock = threading.Lock()
        """Guards channel creation, so two threads never open two channels to one address."""

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every channel."""
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
        for channel in channels:
            channel.close()

    def get_route(self, topic: str) -> registry_pb2.TopicRoute:
        """The topic's route from the first registry that knows it."""
        request = registry_pb2.GetRouteRequest(topic=topic)
        route: registry_pb2.TopicRoute = self._ask_any(
            lambda stub: stub.GetRoute(request, timeout=self._rpc_timeout_s), topic
        )
        return route

    def get_routes(
        self, topics: Iterable[str]
    ) -> tuple[dict[str, registry_pb2.TopicRoute], list[str]]:
        """The routes of ``topics`` (GetRoutes calls of up to ROUTES_PER_CALL topics) and
        the topics no reachable registry knows, in the order given."""
        wanted = list(dict.fromkeys(topics))
        routes: dict[str, registry_pb2.TopicRoute] = {}
        for start in range(0, len(wanted), ROUTES_PER_CALL):
            routes.update(self._routes_of(wanted[start : start + ROUTES_PER_CALL]))
        return routes, [topic for topic in wanted if topic not in routes]

    def _routes_of(self, topics: list[str]) -> dict[str, registry_pb2.TopicRoute]:
        def walk() -> dict[str, registry_pb2.TopicRoute]:
            progress = _Walk()
            found: dict[str, registry_pb2.TopicRoute] = {}
            remaining, answered = topics, False
            for address in self._rotation():
                request = registry_pb2.GetRoutesRequest(topics=remaining)
                try:
                    response = self._stub(address).GetRoutes(request, timeout=self._rpc_timeout_s)
                except grpc.RpcError as exc:
                    progress.failed(address, exc)
                    continue
                if not answered:
                    self._answered(address)
                    answered = True
                asked = set(remaining)
                found.update(
                    (route.topic, route) for route in response.routes if route.topic in asked
                )
                remaining = [topic for topic in remaining if topic not in found]
                if not remaining:
                    break
            if not answered:
                progress.finish()
            return found

        try:
            return Retrying(**self._retry_policy(_NoneReachable))(walk)
        except _NoneReachable as exc:
            raise RegistryUnavailable(exc.errors) from None

    def cluster_info(self) -> registry_pb2.ClusterInfo:
        """Live brokers as the first reachable registry sees them."""
        request = registry_pb2.GetClusterInfoRequest()
        info: registry_pb2.ClusterInfo = self._ask_any(
            lambda stub: stub.GetClusterInfo(request, timeout=self._rpc_timeout_s)
        )
        return info

    def register(
        self,
        *,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        address: str,
        ha_address: str = "",
        topics: Iterable[registry_pb2.TopicConfig] = (),
        data_version: int = 0,
        epoch: int = 0,
    ) -> RegistrationResult:
        """Register (or re-register, replacing the topic set) with every registry."""
        request = _register_request(
            cluster_name, broker_name, broker_id, address, ha_address, topics, data_version, epoch
        )
        return self._tell_all(
            lambda stub: stub.RegisterBroker(request, timeout=self._rpc_timeout_s)
        )

    def unregister(
        self, *, cluster_name: str, broker_name: str, broker_id: int, address: str
    ) -> RegistrationResult:
        """Remove a broker from every registry (its clean shutdown)."""
        request = registry_pb2.UnregisterBrokerRequest(
            cluster_name=cluster_name, broker_name=broker_name, broker_id=broker_id, address=address
        )
        return self._tell_all(
            lambda stub: stub.UnregisterBroker(request, timeout=self._rpc_timeout_s)
        )

    def _stub(self, address: str) -> Any:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                self._channels[address] = channels.sync_channel(address, self._tls)
                stub = self._stubs[address] = registry_pb2_grpc.RegistryServiceStub(
                    self._channels[address]
                )
            return stub

    def _ask_any(self, call: Callable[[Any], T], topic: str = "") -> T:
        def walk() -> T:
            progress = _Walk(topic)
            for address in self._rotation():
                try:
                    result = call(self._stub(address))
                except grpc.RpcError as exc:
                    progress.failed(address, exc)
                    continue
                self._answered(address)
                return result
            progress.finish()

        try:
            return Retrying(**self._retry_policy(_NoneReachable))(walk)
        except _NoneReachable as exc:
            raise RegistryUnavailable(exc.errors) from None

    def _tell_one(self, address: str, call: Callable[[Any], object]) -> object:
        try:
            return call(self._stub(address))
        except grpc.RpcError as exc:
            raise _failure(address, exc) from None

    def _tell_all(self, call: Callable[[Any], object]) -> RegistrationResult:
        accepted: list[str] = []
        failed: dict[str, str] = {}
        answers: list[object] = []
        for address in self.addresses:
            try:
                answers.append(
                    Retrying(**self._retry_policy(_Unreachable))(self._tell_one, address, call)
                )
            except RegistryRejected:
                raise
            except _Unreachable as exc:
                failed[address] = exc.reason
            except RegistryError as exc:
                failed[address] = str(exc)
            else:
                accepted.append(address)
        return _result(accepted, failed, answers)


class AsyncRegistryClient(_ClientBase):
    """The same client on ``grpc.aio``; use it from one event loop.

    Channels are opened on first use inside the running loop, and announcements
    go to all registries concurrently, so one dead registry delays no other.
    """

    def __init__(self, addresses: Sequence[str], **options: Any) -> None:
        super().__init__(addresses, **options)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, Any] = {}

    async def __aenter__(self) -> AsyncRegistryClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every channel."""
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            await channel.close()

    async def get_route(self, topic: str) -> registry_pb2.TopicRoute:
        """The topic's route from the first registry that knows it."""
        request = registry_pb2.GetRouteRequest(topic=topic)
        route: registry_pb2.TopicRoute = await self._ask_any(
            lambda stub: stub.GetRoute(request, timeout=self._rpc_timeout_s), topic
        )
        return route

    async def cluster_info(self) -> registry_pb2.ClusterInfo:
        """Live brokers as the first reachable registry sees them."""
        request = registry_pb2.GetClusterInfoRequest()
        info: registry_pb2.ClusterInfo = await self._ask_any(
            lambda stub: stub.GetClusterInfo(request, timeout=self._rpc_timeout_s)
        )
        return info

    async def register(
        self,
        *,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        address: str,
        ha_address: str = "",
        topics: Iterable[registry_pb2.TopicConfig] = (),
        data_version: int = 0,
        epoch: int = 0,
    ) -> RegistrationResult:
        """Register (or re-register, replacing the topic set) with every registry at once."""
        request = _register_request(
            cluster_name, broker_name, broker_id, address, ha_address, topics, data_version, epoch
        )
        return await self._tell_all(
            lambda stub: stub.RegisterBroker(request, timeout=self._rpc_timeout_s)
        )

    async def unregister(
        self, *, cluster_name: str, broker_name: str, broker_id: int, address: str
    ) -> RegistrationResult:
        """Remove a broker from every registry at once (its clean shutdown)."""
        request = registry_pb2.UnregisterBrokerRequest(
            cluster_name=cluster_name, broker_name=broker_name, broker_id=broker_id, address=address
        )
        return await self._tell_all(
            lambda stub: stub.UnregisterBroker(request, timeout=self._rpc_timeout_s)
        )

    def _stub(self, address: str) -> Any:
        stub = self._stubs.get(address)
        if stub is None:
            self._channels[address] = channels.channel(address, self._tls)
            stub = self._stubs[address] = registry_pb2_grpc.RegistryServiceStub(
                self._channels[address]
            )
        return stub

    async def _ask_any(self, call: Callable[[Any], Awaitable[T]], topic: str = "") -> T:
        async def walk() -> T:
            progress = _Walk(topic)
            for address in self._rotation():
                try:
                    result = await call(self._stub(address))
                except grpc.RpcError as exc:
                    progress.failed(address, exc)
                    continue
                self._answered(address)
                return result
            progress.finish()

        try:
            result: T = await AsyncRetrying(**self._retry_policy(_NoneReachable))(walk)
            return result
        except _NoneReachable as exc:
            raise RegistryUnavailable(exc.errors) from None

    async def _tell_one(self, address: str, call: Callable[[Any], Awaitable[object]]) -> object:
        try:
            return await call(self._stub(address))
        except grpc.RpcError as exc:
            raise _failure(address, exc) from None

    async def _tell_one_retrying(
        self, address: str, call: Callable[[Any], Awaitable[object]]
    ) -> object:
        return await AsyncRetrying(**self._retry_policy(_Unreachable))(
            self._tell_one, address, call
        )

    async def _tell_all(self, call: Callable[[Any], Awaitable[object]]) -> RegistrationResult:
        outcomes = await asyncio.gather(
            *(self._tell_one_retrying(address, call) for address in self.addresses),
            return_exceptions=True,
        )
        accepted: list[str] = []
        failed: dict[str, str] = {}
        for address, outcome in zip(self.addresses, outcomes, strict=True):
            if isinstance(outcome, RegistryRejected) or (
                isinstance(outcome, BaseException) and not isinstance(outcome, RegistryError)
            ):
                raise outcome
            if isinstance(outcome, _Unreachable):
                failed[address] = outcome.reason
            elif isinstance(outcome, RegistryError):
                failed[address] = str(outcome)
            else:
                accepted.append(address)
        return _result(accepted, failed, outcomes)
