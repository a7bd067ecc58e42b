"""Caller: the account a broker call runs for, for rights that depend on what a handler reads.

The gate (:mod:`services.broker.access.gate`) checks what a request names;
some rights depend on records the handler fetches: the record at the
commitlog offset a ConsumerSendBack or EndTransaction names, the half
message a check-back stream would carry. The gate puts the authenticated
call's :class:`Caller` in a context variable, which the handler's task sees
(one task per call); :func:`caller_may` answers for the call in progress and
:func:`current_caller` hands a long-lived stream its caller to keep.

A Caller looks its account up in the document in force at each question, so
an account edited or deleted while a stream is open loses its rights at
once. With access control off there is no caller, and everything is allowed.

The gate also names the *client* of each call, whom its side effects are
charged to (:func:`current_client_key`): the access key with access control on,
else the caller's IP address, as for the client limits. Code deep in a call
(auto-creating a topic or a consumer group) reads it without every processor
passing it along; outside a gated call (background tasks, unit tests) it is
``""``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass

from services.broker.access.acl_file import AclDocument
from services.broker.access.authorizer import holds
from services.broker.access.resources import Need


@dataclass(frozen=True)
class Caller:
    """An authenticated access key and where its current rights are read."""

    access_key: str
    document: Callable[[], AclDocument]

    def may(self, *needs: Need) -> bool:
        """True when the account, as the ACL is now, holds every right in ``needs``."""
        account = self.document().accounts.get(self.access_key)
        return account is not None and all(holds(account, need) for need in needs)


_CALLER: ContextVar[Caller | None] = ContextVar("boltmq_broker_caller", default=None)


def set_caller(caller: Caller) -> None:
    """The gate: ``caller`` makes the call in progress (its task's context)."""
    _CALLER.set(caller)


def current_caller() -> Caller | None:
    """The call in progress's caller; None when access control is off."""
    return _CALLER.get()


def caller_may(*needs: Need) -> bool:
    """True when the call in progress may use every right in ``needs`` (always with
    access control off)."""
    caller = _CALLER.get()
    return caller is None or caller.may(*needs)


_CLIENT_KEY: ContextVar[str] = ContextVar("boltmq_broker_client_key", default="")


def current_client_key() -> str:
    """Whom the call in progress is charged to, or ``""`` outside a gated call."""
    return _CLIENT_KEY.get()


def set_client_key(key: str) -> Token[str]:
    """Charge the running call to ``key``; give the token to :func:`reset_client_key`."""
    return _CLIENT_KEY.set(key)


def reset_client_key(token: Token[str]) -> None:
    """Undo :func:`set_client_key` (the call is over)."""
    _CLIENT_KEY.reset(token)
