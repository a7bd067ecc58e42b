"""InternalGate: the server interceptor that lets only the right components call internal RPCs.

Each internal service (store, HA, registry) hands the gate one table, method
name -> :class:`Rule` (or :data:`OPEN`), built once at start-up: the roles
allowed to call it and whose broker group they must belong to. Per call the
gate looks the method up, reads the caller's identity from its client
certificate (:class:`~boltmq.kernel.peer_identity.IdentityReader`, cached per
certificate) and compares; a stream is checked once, when it opens, never per
message. A method of the service missing from the table is refused: a new
RPC is closed until someone says who may call it. Health, reflection and
other services pass untouched.

Refusals are logged at WARNING (method, peer, reason) and answered:

- ``UNAUTHENTICATED``: no client certificate, one the internal CA did not
  issue, or one that names no valid ``boltmq://`` identity;
- ``PERMISSION_DENIED``: a component of a role or broker group the method does
  not accept.

:func:`internal_gate` decides at start-up whether there is a gate: none
without TLS (the default dev mode), a gate when ``tls_internal_ca_file`` is
set, and a refusal to start when TLS is on without it, unless
``allow_unauthenticated_internal`` says so (then a WARNING at every start).
"""

from __future__ import annotations

import enum
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import grpc

from boltmq.kernel.config import ConfigError, ServerSettings
from boltmq.kernel.peer_identity import IdentityError, IdentityReader, PeerIdentity, own_identity
from boltmq.kernel.tls import read_certificates

log = logging.getLogger(__name__)


class Group(enum.Enum):
    """Whose broker group a caller must belong to."""

    OWN = "own"
    """The serving component's own group (from its own certificate)."""
    REQUEST = "request"
    """The group the request names in its ``broker_name`` field (unary calls only)."""


@dataclass(frozen=True)
class Rule:
    """Who may call one method: any of ``roles``, of the group ``group`` says."""

    roles: frozenset[str]
    group: Group = Group.OWN

    def describe(self, own_group: str) -> str:
        roles = " or ".join(sorted(self.roles))
        where = "the request's broker group" if self.group is Group.REQUEST else own_group
        return f"{roles} of {where}"


HANDLER_KINDS = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)
"""A method handler's four behaviour kinds and how to make a handler of each (an
interceptor wraps the one that is set)."""

OPEN = None
"""A method any caller the TLS handshake accepted may call (e.g. route look-ups)."""
NOBODY = Rule(frozenset())
"""What a method missing from the table gets: no caller at all."""


class Refused(Exception):
    """A call the gate refuses: its status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class InternalGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc classes are Any
    """Checks every call of one service against its rule table."""

    def __init__(
        self,
        service_name: str,
        rules: Mapping[str, Rule | None],
        reader: IdentityReader,
        own: PeerIdentity,
    ) -> None:
        self._prefix = f"/{service_name}/"
        self._rules = {self._prefix + name: rule for name, rule in rules.items()}
        self.reader = reader
        """Reads callers' identities (the caller limits key calls by them too)."""
        self.own = own
        """This component's identity (its group is what ``Group.OWN`` means)."""

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], handler_call_details: Any
    ) -> Any:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not method.startswith(self._prefix):
            return handler
        rule = self._rules.get(method, NOBODY)
        if rule is OPEN:
            return handler
        for kind, make in HANDLER_KINDS:
            inner = getattr(handler, kind)
            if inner is not None:
                return make(
                    self._guard(method, rule, inner),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

    def check(self, method: str, rule: Rule, identity: PeerIdentity, request: Any) -> None:
        """Refused (PERMISSION_DENIED) unless ``identity`` may make the call."""
        if not rule.roles:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, f"{method} accepts no caller")
        group = self.own.group if rule.group is Group.OWN else getattr(request, "broker_name", None)
        if identity.role in rule.roles and identity.group == group:
            return
        raise Refused(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{identity} may not call {method}: it accepts {rule.describe(self.own.group)}",
        )

    async def _admit(
        self, method: str, rule: Rule, request: Any, context: grpc.aio.ServicerContext
    ) -> None:
        try:
            try:
                identity = self.reader.of_caller(context)
            except IdentityError as exc:
                raise Refused(
                    grpc.StatusCode.UNAUTHENTICATED,
                    f"{method} needs a component certificate from the internal CA: {exc}",
                ) from None
            self.check(method, rule, identity, request)
        except Refused as exc:
            log.warning("refused %s from %s: %s: %s", method, context.peer(), exc.code.name, exc)
            await context.abort(exc.code, str(exc))

    def _guard(self, method: str, rule: Rule, inner: Callable[..., Any]) -> Any:
        admit = self._admit
        if inspect.isasyncgenfunction(inner):

            async def guarded_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await admit(method, rule, request, context)
                stream: AsyncIterator[Any] = inner(request, context)
                async for item in stream:
                    yield item

            return guarded_stream

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await admit(method, rule, request, context)
            return await inner(request, context)

        return guarded


def internal_gate(
    settings: ServerSettings, service_name: str, rules: Mapping[str, Rule | None]
) -> InternalGate | None:
    """The gate of an internal service with ``settings`` (None: calls are not checked).

    ConfigError when TLS is on without ``tls_internal_ca_file`` and without
    ``allow_unauthenticated_internal``, or when the service's own certificate
    names no identity.
    """
    if not settings.tls_cert_file:
        return None
    if not settings.tls_internal_ca_file:
        if not settings.allow_unauthenticated_internal:
            raise ConfigError(
                f"{service_name} serves TLS but tls_internal_ca_file is not set: any caller "
                "the handshake accepts could make internal calls; set tls_internal_ca_file to "
                "the CA that issues component certificates, or allow_unauthenticated_internal "
                "= true to accept that"
            )
        log.warning(
            "%s accepts internal calls from ANY caller the TLS handshake accepts "
            "(allow_unauthenticated_internal = true, no tls_internal_ca_file)",
            service_name,
        )
        return None
    internal_ca = read_certificates("tls_internal_ca_file", settings.tls_internal_ca_file)
    reader = IdentityReader(internal_ca, settings.tls_internal_crl_file)
    try:
        own = own_identity(read_certificates("tls_cert_file", settings.tls_cert_file))
    except IdentityError as exc:
        raise ConfigError(f"tls_cert_file: {settings.tls_cert_file}: {exc}") from None
    return InternalGate(service_name, rules, reader, own)
