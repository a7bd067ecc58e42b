"""StreamAccess: the access checks of each message of one open SendStream.

The gate (:mod:`services.broker.access.gate`) authenticates a stream once, when
it opens, from its signed metadata (a call of ``SendStream`` with an empty
body: :mod:`boltmq.kernel.signing`), takes one in-flight slot of the client for
as long as it is open, and hands the stream's handler a StreamAccess, which
checks every message as the gate checks a unary ``SendMessage``:

1. its signature (:func:`boltmq.kernel.signing.stream_signature`) under the
   account's secret as the ACL holds it now (a deleted account or a rotated
   secret stops the stream at the next message): a bad one is UNAUTHENTICATED
   for the whole stream (:class:`StreamRefused`), since whoever can forge one
   message could forge the next; the stream's nonce and the growing ids (checked
   by the handler) keep messages from being replayed;
2. that its SendRequest parses (INVALID_ARGUMENT for that message);
3. the client's rate and in-flight budget, one token and one slot per message,
   given back by :meth:`StreamAccess.done` (RESOURCE_EXHAUSTED for that message);
4. the account's rights, as SendMessage's (PERMISSION_DENIED for that message,
   the same text as a unary call's).

With access control off only 2 and 3 apply.
"""

from __future__ import annotations

import hmac
from contextvars import ContextVar

import grpc

from boltmq.kernel.caller_limits import CallerLimits
from boltmq.kernel.signing import SignedCall, stream_signature
from boltmq.v1 import broker_pb2
from services.broker.access.acl_file import Account
from services.broker.access.authorizer import AccessDenied, Authorizer

SEND_METHOD = "SendMessage"
"""What each message of a stream is authorized as."""


class StreamRefused(AccessDenied):
    """A message whose signature is wrong: the whole stream ends with this."""


class StreamAccess:
    """The checks of one stream's messages (module docstring)."""

    def __init__(
        self,
        method: str,
        authorizer: Authorizer | None,
        call: SignedCall | None,
        limits: CallerLimits | None,
        client_key: str,
    ) -> None:
        self._method = method
        self._authorizer = authorizer
        self._call = call
        """The stream's signed fields (None: access control off)."""
        self._limits = limits
        self.client_key = client_key
        """Whom the stream's messages are charged to (access key, else IP address)."""

    def admit(self, message: broker_pb2.SendStreamRequest) -> broker_pb2.SendRequest:
        """The message's SendRequest once it may be sent (it then holds a budget slot until
        :meth:`done`); AccessDenied for this message, StreamRefused for the stream."""
        account = self._verify(message)
        try:
            request = broker_pb2.SendRequest.FromString(message.send)
        except Exception as exc:  # protobuf's DecodeError
            raise AccessDenied(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"message {message.id}: send does not parse: {type(exc).__name__}",
            ) from None
        if self._limits is not None:
            why = self._limits.acquire(self.client_key)
            if why:
                raise AccessDenied(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self.client_key}: {why}")
        if account is not None:
            try:
                Authorizer.authorize(account, SEND_METHOD, request)
            except AccessDenied:
                self.done()
                raise
        return request

    def done(self) -> None:
        """Give back the budget slot of a message :meth:`admit` let through."""
        if self._limits is not None:
            self._limits.release(self.client_key)

    def _verify(self, message: broker_pb2.SendStreamRequest) -> Account | None:
        """The account that signed ``message`` (None with access control off)."""
        if self._authorizer is None or self._call is None:
            return None
        call = self._call
        account = self._authorizer.document().accounts.get(call.access_key)
        good = False
        if account is not None and message.signature:
            expected = stream_signature(
                account.secret_key,
                call.algorithm,
                call.nonce,
                message.id,
                message.timeout_ms,
                message.traceparent,
                message.send,
            )
            good = hmac.compare_digest(expected.encode(), message.signature.encode())
        if not good:
            raise StreamRefused(
                grpc.StatusCode.UNAUTHENTICATED,
                f"message {message.id} of the stream of access key {call.access_key} is not "
                "signed by it (unsigned, forged, or its secret changed)",
            )
        return account


_STREAM_ACCESS: ContextVar[StreamAccess | None] = ContextVar(
    "boltmq_broker_stream_access", default=None
)


def set_stream_access(access: StreamAccess) -> None:
    """The gate: ``access`` checks the messages of the stream in progress (its task)."""
    _STREAM_ACCESS.set(access)


def current_stream_access() -> StreamAccess:
    """The stream in progress's checks; with no gate in front (unit tests), a StreamAccess
    that checks nothing but the parse."""
    access = _STREAM_ACCESS.get()
    return access if access is not None else StreamAccess("", None, None, None, "")
