"""Who is looking: the console's sessions, each holding one account's signed calls.

The browser keeps a session cookie signed by the console (Starlette's
``SessionMiddleware``: an id, the CSRF token, a one-shot notice); the account's
access key and secret stay in this process, in the :class:`Session` the id
names, and are never sent back to the browser. A session ends at logout, after
``SESSION_IDLE_S`` without a request, or when the console stops.

With the brokers' ACL off, every visitor shares one unsigned session: it may change
things when the brokers answer the console's unsigned ``GetAcl`` (the console runs on
a broker's host, as ``boltmq dev``'s does), and is read-only when they refuse it as
a caller from elsewhere (:meth:`ClusterCalls.probe_acl`). The console has no account of its
own: whatever it shows or changes, the logged-in account's rights allow.

Failed logins are limited per client address (``LOGIN_FAILURES`` per
``LOGIN_WINDOW_S``), so the login form is no faster way to guess a secret than
signing calls at the brokers.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from boltmq.console.calls import ClusterCalls, ConsoleError
from boltmq.kernel.signing import Credentials, SigningError
from boltmq.kernel.tls import ClientTLS

SESSION_IDLE_S = 1800.0
ACL_PROBE_S = 10.0
"""How long the answer to "is the ACL on?" is kept."""
LOGIN_FAILURES = 10
LOGIN_WINDOW_S = 60.0


@dataclass
class Session:
    calls: ClusterCalls
    admin: bool
    last_used: float = field(default_factory=time.monotonic)

    @property
    def access_key(self) -> str:
        return self.calls.access_key


class TooManyLogins(ConsoleError):
    """The client failed to log in too often lately."""


class Sessions:
    """The live sessions of one console, by id."""

    def __init__(self, registry: str, tls: ClientTLS | None) -> None:
        self.registry = registry
        self.tls = tls
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._anonymous: Session | None = None
        self._acl_checked = (-ACL_PROBE_S, True)
        self._failures: dict[str, deque[float]] = {}

    def login(self, access_key: str, secret_key: str, client: str) -> tuple[str, Session]:
        """A new session for the account, once the brokers accept it: (id, session)."""
        self._check_failures(client)
        try:
            credentials = Credentials(access_key.strip(), secret_key)
        except SigningError as exc:
            self._failed(client)
            raise ConsoleError(str(exc)) from None
        calls = ClusterCalls(self.registry, self.tls, credentials)
        try:
            calls.check_account()
            session = Session(calls, calls.is_admin())
        except ConsoleError:
            calls.close()
            self._failed(client)
            raise
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[sid] = session
        self._expire()
        return sid, session

    def _check_failures(self, client: str) -> None:
        with self._lock:
            recent = self._failures.setdefault(client, deque())
            while recent and time.monotonic() - recent[0] > LOGIN_WINDOW_S:
                recent.popleft()
            if len(recent) >= LOGIN_FAILURES:
                raise TooManyLogins("too many failed logins: wait a minute")

    def _failed(self, client: str) -> None:
        with self._lock:
            self._failures.setdefault(client, deque()).append(time.monotonic())

    def get(self, sid: str | None) -> Session | None:
        """The live session ``sid`` names (its idle clock restarted), else None."""
        if not sid:
            return None
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return None
            if time.monotonic() - session.last_used > SESSION_IDLE_S:
                del self._sessions[sid]
                session.calls.close()
                return None
            session.last_used = time.monotonic()
            return session

    def logout(self, sid: str | None) -> None:
        with self._lock:
            session = self._sessions.pop(sid or "", None)
        if session is not None:
            session.calls.close()

    def anonymous(self) -> Session | None:
        """The shared unsigned session while the brokers' ACL is off, else None (asked
        again every ``ACL_PROBE_S``)."""
        checked_at, enforced = self._acl_checked
        if time.monotonic() - checked_at >= ACL_PROBE_S:
            with self._lock:
                if self._anonymous is None:
                    self._anonymous = Session(ClusterCalls(self.registry, self.tls, None), True)
            enforced, may_change = self._anonymous.calls.probe_acl()
            self._anonymous.admin = may_change
            self._acl_checked = (time.monotonic(), enforced)
        return None if enforced else self._anonymous

    def _expire(self) -> None:
        now = time.monotonic()
        with self._lock:
            old = [sid for sid, s in self._sessions.items() if now - s.last_used > SESSION_IDLE_S]
            closing = [self._sessions.pop(sid) for sid in old]
        for session in closing:
            session.calls.close()

    def close(self) -> None:
        with self._lock:
            closing = list(self._sessions.values())
            self._sessions.clear()
            if self._anonymous is not None:
                closing.append(self._anonymous)
                self._anonymous = None
        for session in closing:
            session.calls.close()
