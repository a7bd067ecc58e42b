"""Credentials: who signed a RocketMQ 5 call, checked against BoltMQ's ACL.

The official clients sign every call the same way, in two headers:

- ``x-mq-date-time``: the client's clock as ``YYYYMMDDTHHMMSSZ`` (UTC);
- ``authorization``: ``MQv2-HMAC-SHA1 Credential=<access key>,
  SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1 of the date-time under the
  account's secret key>``.

With ``acl_enable`` on, a call must carry both, the date-time within
``acl_signature_max_skew_ms`` of the broker's clock, an access key of the ACL
document and a signature its secret makes; else the call is answered UNAUTHORIZED
(an unknown access key and a wrong signature get one answer, at the cost of one
HMAC each, as BoltMQ's own signing does). Rights are then checked per call by
:func:`require` (FORBIDDEN): PUB on a topic to send or end a transaction, SUB on
the group and the topic to consume. With the ACL off the headers are ignored.

What the protocol's signature cannot give, and BoltMQ's own signing does: it covers
neither the method nor the request, and carries no nonce, so within the skew window
a captured header can be replayed with another request. Use TLS between clients and
brokers where that matters (docs/rocketmq-clients.md).
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from boltmq.rocketmq.v2 import definition_pb2 as v2
from services.broker.access.acl_file import Account, AclDocument, Perm
from services.broker.access.authorizer import holds
from services.broker.access.caller import Caller
from services.broker.access.resources import Need, group_need, topic_need
from services.broker.rocketmq_v2.status import Refused

DATE_TIME_HEADER = "x-mq-date-time"
AUTHORIZATION_HEADER = "authorization"
CLIENT_ID_HEADER = "x-mq-client-id"
_AUTHORIZATION = re.compile(
    r"\AMQv2-HMAC-SHA1 Credential=(?P<ak>[^,\s/]{1,255})(?:/[^,]*)?,\s*"
    r"SignedHeaders=(?P<headers>[^,]{1,100}),\s*Signature=(?P<sig>[0-9a-fA-F]{1,128})\Z"
)
_NO_SUCH_SECRET = b"no-account-has-this-secret"
_VERB = {Perm.PUB: "publish to", Perm.SUB: "subscribe to"}


def header(metadata: Sequence[tuple[str, Any]] | None, name: str) -> str:
    """The first value of header ``name`` ("" when absent or not text)."""
    for key, value in metadata or ():
        if key == name and isinstance(value, str):
            return value
    return ""


def _unauthorized(message: str) -> Refused:
    return Refused(v2.UNAUTHORIZED, message)


class Credentials:
    """Authenticates calls against the ACL document ``document()`` returns (None: off)."""

    def __init__(
        self,
        document: Callable[[], AclDocument] | None,
        max_skew_ms: int,
        clock_s: Callable[[], float] = time.time,
    ) -> None:
        self._document = document
        self._max_skew_s = max_skew_ms / 1000
        self._clock_s = clock_s

    @property
    def enabled(self) -> bool:
        return self._document is not None

    def caller(self, metadata: Sequence[tuple[str, Any]] | None) -> Caller | None:
        """The authenticated caller (None with the ACL off); Refused UNAUTHORIZED."""
        if self._document is None:
            return None
        account = self._authenticate(metadata, self._document())
        return Caller(account.access_key, self._document)

    def _authenticate(
        self, metadata: Sequence[tuple[str, Any]] | None, document: AclDocument
    ) -> Account:
        authorization = header(metadata, AUTHORIZATION_HEADER)
        date_time = header(metadata, DATE_TIME_HEADER)
        if not authorization or not date_time:
            raise _unauthorized(
                "no credentials: the broker's ACL is on; configure the client with an "
                "access key and secret key (headers authorization and x-mq-date-time)"
            )
        match = _AUTHORIZATION.match(authorization)
        if match is None:
            raise _unauthorized(
                "authorization header is not 'MQv2-HMAC-SHA1 Credential=<access key>, "
                "SignedHeaders=x-mq-date-time, Signature=<hex>'"
            )
        if DATE_TIME_HEADER not in match["headers"].split(";"):
            raise _unauthorized("authorization: SignedHeaders must name x-mq-date-time")
        try:
            signed_s = calendar.timegm(time.strptime(date_time, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            raise _unauthorized(
                f"x-mq-date-time {date_time[:40]!r} is not YYYYMMDDTHHMMSSZ"
            ) from None
        skew_s = abs(self._clock_s() - signed_s)
        if skew_s > self._max_skew_s + 1:  # the header has whole seconds
            raise _unauthorized(
                f"x-mq-date-time is {skew_s:.0f} s from the broker's clock (at most "
                f"{self._max_skew_s:.0f}): a stale or replayed call, or a client clock "
                "that is not UTC"
            )
        access_key = match["ak"]
        account = document.accounts.get(access_key)
        secret = account.secret_key.encode() if account is not None else _NO_SUCH_SECRET
        expected = hmac.new(secret, date_time.encode(), hashlib.sha1).hexdigest()
        if account is None or not hmac.compare_digest(expected, match["sig"].lower()):
            raise _unauthorized(
                f"access key {access_key} is unknown, or the signature does not match its "
                "secret key"
            )
        return account


def require(caller: Caller | None, *needs: Need) -> None:
    """Nothing when ``caller`` (None: the ACL is off) holds every need; FORBIDDEN else."""
    if caller is None:
        return
    account = caller.document().accounts.get(caller.access_key)
    for need in needs:
        if account is None or not holds(account, need):
            raise Refused(
                v2.FORBIDDEN,
                f"{caller.access_key} may not {_VERB[need.perm]} {need.kind.value} {need.name!r}",
            )


def may_publish(topic: str) -> Need:
    return topic_need(topic, Perm.PUB)


def may_subscribe(topic: str) -> Need:
    return topic_need(topic, Perm.SUB)


def may_consume_as(group: str) -> Need:
    return group_need(group, Perm.SUB)
