"""Authorizer: who signed a call (UNAUTHENTICATED) and may they make it (PERMISSION_DENIED).

Authentication: the call's signed metadata (:mod:`boltmq.kernel.signing`, format 3)
must name this broker group (its ``broker_name``) as the target, or no broker
(an empty target), name an account of the ACL document, carry a timestamp within
``max_skew_ms`` of the broker's clock (either way: a clock ahead is as suspect
as one behind), a body digest equal to the SHA-256 of the request bytes
received, a signature the account's secret makes over the method called, and a
nonce the broker has not accepted before (:class:`ReplayCache`; only calls with
a good signature are remembered, so nobody without a secret can fill it).
Authorization: an admin account
may do everything; any other account needs every right
:func:`~services.broker.access.resources.needs_of` lists, and never makes an
admin call.

Denials carry a reason for the caller and one for the broker's log; neither
ever holds a secret or a signature. An unknown access key and a wrong
signature get the same answer (and cost the same HMAC), so a caller cannot
probe which access keys exist; only the log tells them apart. The timestamp
is checked before the account is looked up, for the same reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from boltmq.kernel.signing import SignedCall, SigningError
from services.broker.access.acl_file import Account, AclDocument, Perm
from services.broker.access.replay_cache import ReplayCache
from services.broker.access.resources import Kind, Need, is_admin_call, needs_of
from services.broker.errors import BrokerError
from services.broker.metadata.topic_config import BROKER_TOPICS


def rights_on(account: Account, need: Need) -> Perm:
    """What ``account`` holds on the topic or group ``need`` names; nothing on the topics
    only the broker writes (delay entries and half messages of every topic), whatever a
    default says."""
    if need.kind is Kind.TOPIC:
        if need.name in BROKER_TOPICS:
            return Perm.DENY
        return account.topic_perm(need.name)
    return account.group_perm(need.name)


def holds(account: Account, need: Need) -> bool:
    """True when ``account`` is an admin or holds ``need``'s right."""
    return account.admin or rights_on(account, need).grants(need.perm)


_NO_SUCH_SECRET = "no-account-has-this-secret"
"""Checked against the signature of an unknown access key, so both failures cost alike."""


class AccessDenied(BrokerError):
    """A call refused; ``code`` is UNAUTHENTICATED or PERMISSION_DENIED (RESOURCE_EXHAUSTED
    when the replay cache is full, INVALID_ARGUMENT for a request that does not parse)."""

    def __init__(self, code: grpc.StatusCode, reason: str, log_reason: str = "") -> None:
        super().__init__(reason, code)
        self.log_reason = log_reason or reason
        """What the broker logs (may say more than the caller is told)."""


def _unauthenticated(reason: str, log_reason: str = "") -> AccessDenied:
    return AccessDenied(grpc.StatusCode.UNAUTHENTICATED, reason, log_reason)


def _bad_credentials(access_key: str, log_reason: str) -> AccessDenied:
    """One answer for an unknown access key and a wrong signature."""
    return _unauthenticated(
        f"access key {access_key} is unknown, or the signature does not match its secret "
        "and the method called",
        log_reason,
    )


class Authorizer:
    """Checks calls against the ACL document ``document()`` returns."""

    def __init__(
        self,
        document: Callable[[], AclDocument],
        max_skew_ms: int,
        replays: ReplayCache,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        broker_name: str = "",
    ) -> None:
        self.document = document
        """The ACL document in force (read at every call)."""
        self._broker_name = broker_name
        """This broker group's name: a call signed for another group is refused (empty:
        no target is checked)."""
        self._max_skew_ms = max_skew_ms
        self._replays = replays
        self._clock_ms = clock_ms

    def authenticate(
        self, method: str, metadata: Sequence[tuple[str, Any]] | None, body: bytes
    ) -> Account:
        """The account that signed the call to ``method`` (full name) whose serialized
        request is ``body``, else AccessDenied."""
        return self.authenticate_call(method, metadata, body)[0]

    def authenticate_call(
        self, method: str, metadata: Sequence[tuple[str, Any]] | None, body: bytes
    ) -> tuple[Account, SignedCall]:
        """:meth:`authenticate`, with the signed fields (a stream's messages are checked
        against its nonce and signature method)."""
        try:
            call = SignedCall.from_metadata(metadata)
        except SigningError as exc:
            raise _unauthenticated(str(exc)) from None
        if call is None:
            raise _unauthenticated("no credentials: sign the call with an access key")
        if call.target and self._broker_name and call.target != self._broker_name:
            raise _unauthenticated(
                f"call of access key {call.access_key} was signed for broker "
                f"{call.target!r}, not for this broker ({self._broker_name!r}): "
                "a call replayed on another broker group, or sent to the wrong address"
            )
        now_ms = self._clock_ms()
        skew_ms = abs(now_ms - call.timestamp_ms)
        if skew_ms > self._max_skew_ms:
            raise _unauthenticated(
                f"timestamp of access key {call.access_key} is {skew_ms} ms "
                f"from the broker's clock (at most {self._max_skew_ms}): "
                "a stale or replayed call, or an unsynchronised clock"
            )
        if not call.covers(body):
            raise _unauthenticated(
                f"request body differs from the one access key {call.access_key} signed"
            )
        account = self.document().accounts.get(call.access_key)
        if account is None:
            call.matches(_NO_SUCH_SECRET, method)
            raise _bad_credentials(call.access_key, f"unknown access key {call.access_key}")
        if not call.matches(account.secret_key, method):
            raise _bad_credentials(
                call.access_key,
                f"wrong signature for access key {call.access_key} "
                f"(wrong secret key, or signed for another method than {method})",
            )
        why = self._replays.admit(call.nonce, call.timestamp_ms, now_ms)
        if why == "replayed":
            raise _unauthenticated(
                f"replayed call: nonce {call.nonce} of access key {call.access_key} "
                "was already used"
            )
        if why:
            raise AccessDenied(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "too many signed calls within the signature window: retry shortly",
            )
        return account, call

    @staticmethod
    def authorize(account: Account, short_method: str, request: Any) -> None:
        """Nothing when ``account`` may make the call; AccessDenied otherwise."""
        if account.admin:
            return
        if is_admin_call(short_method):
            raise AccessDenied(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{short_method} needs an admin account; {account.access_key} is not one",
            )
        for need in needs_of(short_method, request):
            owned = rights_on(account, need)
            if not owned.grants(need.perm):
                raise AccessDenied(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"{account.access_key} has {owned.text()} on "
                    f"{need.kind.value} {need.name!r}; "
                    f"{short_method} needs {need.perm.text()}",
                )
