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
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
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
