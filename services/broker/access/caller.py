"""The caller of the call in progress: who a call's side effects are charged to.

The gate names the caller of each BrokerService call (its access key when
access control is on, else its IP address, as for the client limits) and
sets it for the call's task; code deep in a call (auto-creating a topic or a
consumer group) reads it without every processor passing it along. Outside
a gated call (background tasks, unit tests) the caller is ``""``.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

_CALLER: ContextVar[str] = ContextVar("boltmq_broker_caller", default="")


def current_caller() -> str:
    """The caller of the call in progress, or ``""`` outside a gated call."""
    return _CALLER.get()


def set_caller(key: str) -> Token[str]:
    """Make ``key`` the running call's caller; give the token to :func:`reset_caller`."""
    return _CALLER.set(key)


def reset_caller(token: Token[str]) -> None:
    """Undo :func:`set_caller` (the call is over)."""
    _CALLER.reset(token)
