"""Signed requests for BoltMQ's access control (RocketMQ's ACL, on gRPC metadata).

A client with an access key / secret key pair signs every broker call; the
signature travels in gRPC metadata (lower-case keys, all ASCII). This is
format 3:

Metadata key                 | Value
-----------------------------+-------------------------------------------------------
x-boltmq-access-key          | the access key (names the account; never the secret)
x-boltmq-timestamp-ms        | client clock, milliseconds since the Unix epoch (decimal)
x-boltmq-client-id           | the client id (``host@pid@random``), 1-255 printable chars
x-boltmq-nonce               | 32 lower-case hex digits (16 random bytes), new for every call
x-boltmq-content-sha256      | 64 lower-case hex digits: SHA-256 of the serialized request
x-boltmq-target              | the name of the broker group the call is for (a broker's
                             | ``broker_name``: 1-127 letters, digits, ``% | _ -``), or
                             | empty: any broker
x-boltmq-signature-method    | ``HmacSHA1`` or ``HmacSHA256``
x-boltmq-signature           | base64 of HMAC(secret key, string to sign)

String to sign (UTF-8, ``\\n`` between fields, no trailing newline; the last line
is empty for an empty target)::

    BOLTMQ3
    <full gRPC method, e.g. /boltmq.v1.BrokerService/SendMessage>
    <x-boltmq-timestamp-ms>
    <x-boltmq-client-id>
    <x-boltmq-nonce>
    <x-boltmq-content-sha256>
    <x-boltmq-target>

The serialized request is the protobuf message exactly as it travels (the
bytes the broker receives), so the signature binds the call's method and its
body: a captured signature is useless with another body or on another method.
The nonce binds it to one call: the broker remembers every nonce it accepted
for as long as its timestamp is inside the window (``acl_signature_max_skew_ms``,
either side of the broker's clock; 30 s by default), and refuses it again, so a
captured call cannot be replayed either, and past the window its timestamp is
refused. Each broker group remembers its own nonces, so the target binds the
call to one group: a broker refuses a call whose target is not its own
``broker_name``, and as the target line is always signed, it can be neither
stripped nor changed. A call signed with an empty target is accepted by every
broker (within the window, a captured one could reach each group once): the
SDK names the group of every broker address it calls (from the routes and the
cluster view it reads), the ``boltmq`` CLI when it finds brokers through the
registry or is given ``--broker`` with ``--broker-address``; TLS keeps calls
from being captured.
The replicas of a group share its name: a call captured on its way to the
master could reach a replica within the window. The body digest is SHA-256
whatever the HMAC: one pass over the request per call on each side. Signers
take bytes already serialized as they are (:func:`request_bytes`), so a caller
sending pre-encoded requests serializes once.

Streams (``BrokerService/SendStream``): the stream's metadata is signed as above,
as a call whose body is empty (the SHA-256 of no bytes), so the stream's nonce is
accepted once and its open cannot be replayed. Each message on the stream then
carries its own signature (:func:`stream_signature`), the HMAC under the same
secret and method of::

    BOLTMQ3S
    <the stream's x-boltmq-nonce>
    <the message's id>
    <its timeout_ms>
    <its traceparent>
    <hex SHA-256 of the message's serialized SendRequest>

The nonce binds a message to its stream and the id, which must grow along the
stream, to its place there: a message copied into another stream, or sent again
on its own, is refused, and a changed body fails the digest, as on a unary call.

Older formats are refused with a message asking to upgrade the client:
format 1 (no nonce, no body digest; the string to sign was the method, the
timestamp and the client id) and format 2 (``BOLTMQ2``: format 3 without the
target, so a call captured on its way to one broker group could be replayed
on another). One ``authorization`` header in RocketMQ's ``MQv2-HMAC-SHA1
Credential=...`` syntax was rejected: separate keys need no parser and each can
be refused with its own message.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

ACCESS_KEY_HEADER = "x-boltmq-access-key"
TIMESTAMP_HEADER = "x-boltmq-timestamp-ms"
CLIENT_ID_HEADER = "x-boltmq-client-id"
NONCE_HEADER = "x-boltmq-nonce"
CONTENT_HEADER = "x-boltmq-content-sha256"
TARGET_HEADER = "x-boltmq-target"
ALGORITHM_HEADER = "x-boltmq-signature-method"
SIGNATURE_HEADER = "x-boltmq-signature"
ALGORITHMS: Mapping[str, Callable[..., Any]] = {
    "HmacSHA1": hashlib.sha1,
    "HmacSHA256": hashlib.sha256,
}
DEFAULT_ALGORITHM = "HmacSHA256"
ACCESS_KEY_PATTERN = re.compile(r"[A-Za-z0-9_.-]{6,128}")
"""Access keys: 6-128 letters, digits, ``_ . -`` (RocketMQ asks for at least 6)."""
SECRET_KEY_MIN_CHARS = 6
SECRET_KEY_MAX_CHARS = 256
CLIENT_ID_MAX_CHARS = 255
FORMAT_TAG = "BOLTMQ3"
"""First line of the string to sign: the format, so no other string can ever collide."""
STREAM_FORMAT_TAG = "BOLTMQ3S"
"""First line of a stream message's string to sign (:func:`stream_signature`)."""
EMPTY_BODY = b""
"""The body a stream's open is signed with: its messages are signed one by one."""
_PRINTABLE = re.compile(r"[\x21-\x7e]+")
_NONCE = re.compile(r"[0-9a-f]{32}")
_CONTENT = re.compile(r"[0-9a-f]{64}")
_TARGET = re.compile(r"[A-Za-z0-9%|_-]{0,127}")
Target = str | Callable[[], str]
"""A signer's target broker name: fixed, or read at every call (empty: any broker)."""


class SigningError(ValueError):
    """Credentials or signed metadata that are malformed (not merely wrong)."""


@dataclass(frozen=True)
class Credentials:
    """An access key / secret key pair; ``repr`` never shows the secret."""

    access_key: str
    secret_key: str = field(repr=False)
    algorithm: str = DEFAULT_ALGORITHM
    """``HmacSHA256`` (default) or ``HmacSHA1``."""

    def __post_init__(self) -> None:
        check_access_key(self.access_key)
        check_secret_key(self.secret_key)
        if self.algorithm not in ALGORITHMS:
            raise SigningError(
                f"signature method must be one of {', '.join(ALGORITHMS)}, got {self.algorithm!r}"
            )


def check_access_key(access_key: str) -> str:
    """``access_key`` when well formed, else SigningError."""
    if not isinstance(access_key, str) or not ACCESS_KEY_PATTERN.fullmatch(access_key):
        raise SigningError("access key must be 6-128 letters, digits, '_', '.' or '-'")
    return access_key


def check_secret_key(secret_key: str) -> str:
    """``secret_key`` when well formed (printable ASCII, 6-256 chars), else SigningError."""
    if (
        not isinstance(secret_key, str)
        or not _PRINTABLE.fullmatch(secret_key)
        or not SECRET_KEY_MIN_CHARS <= len(secret_key) <= SECRET_KEY_MAX_CHARS
    ):
        raise SigningError(
            f"secret key must be {SECRET_KEY_MIN_CHARS}-{SECRET_KEY_MAX_CHARS} "
            "printable ASCII characters without spaces"
        )
    return secret_key


def request_bytes(request: Any) -> bytes:
    """The request as it travels: ``request`` itself when already serialized, else its
    protobuf serialization."""
    if isinstance(request, bytes):
        return request
    if isinstance(request, (bytearray, memoryview)):
        return bytes(request)
    data: bytes = request.SerializeToString()
    return data


def content_digest(body: bytes) -> str:
    """The ``x-boltmq-content-sha256`` value of a serialized request."""
    return hashlib.sha256(body).hexdigest()


def new_nonce() -> str:
    """A fresh ``x-boltmq-nonce`` (16 random bytes, hex)."""
    return secrets.token_hex(16)


def string_to_sign(
    method: str, timestamp_ms: int, client_id: str, nonce: str, content_sha256: str, target: str
) -> bytes:
    """The bytes the signature covers (module docstring)."""
    return (
        f"{FORMAT_TAG}\n{method}\n{timestamp_ms}\n{client_id}\n{nonce}\n{content_sha256}\n{target}"
    ).encode()


def check_target(target: str) -> str:
    """``target`` when it is a broker name or empty, else SigningError."""
    if not isinstance(target, str) or not _TARGET.fullmatch(target):
        raise SigningError(
            f"{TARGET_HEADER} must be a broker name (up to 127 letters, digits, "
            "'%', '|', '_' or '-') or empty"
        )
    return target


def signature(secret_key: str, algorithm: str, to_sign: bytes) -> str:
    """base64 HMAC of ``to_sign`` (:func:`string_to_sign`) under ``secret_key``."""
    digest = hmac.new(secret_key.encode(), to_sign, ALGORITHMS[algorithm]).digest()
    return base64.b64encode(digest).decode()


def stream_signature(
    secret_key: str,
    algorithm: str,
    stream_nonce: str,
    message_id: int,
    timeout_ms: int,
    traceparent: str,
    send: bytes,
) -> str:
    """The signature of one message of a signed stream (module docstring)."""
    to_sign = (
        f"{STREAM_FORMAT_TAG}\n{stream_nonce}\n{message_id}\n{timeout_ms}\n{traceparent}\n"
        f"{content_digest(send)}"
    ).encode()
    return signature(secret_key, algorithm, to_sign)


def signed_metadata(
    credentials: Credentials,
    method: str,
    client_id: str,
    body: bytes,
    timestamp_ms: int | None = None,
    nonce: str | None = None,
    *,
    target: str = "",
) -> tuple[tuple[str, str], ...]:
    """The metadata entries of one signed call of ``method`` carrying the serialized request
    ``body`` to the broker group named ``target`` (empty: any broker; ``timestamp_ms``
    defaults to now, ``nonce`` to a fresh one)."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    once = new_nonce() if nonce is None else nonce
    content = content_digest(body)
    to_sign = string_to_sign(method, now, client_id, once, content, check_target(target))
    return (
        (ACCESS_KEY_HEADER, credentials.access_key),
        (TIMESTAMP_HEADER, str(now)),
        (CLIENT_ID_HEADER, client_id),
        (NONCE_HEADER, once),
        (CONTENT_HEADER, content),
        (TARGET_HEADER, target),
        (ALGORITHM_HEADER, credentials.algorithm),
        (SIGNATURE_HEADER, signature(credentials.secret_key, credentials.algorithm, to_sign)),
    )


@dataclass(frozen=True)
class SignedCall:
    """What a server reads from a call's metadata before it knows the secret."""

    access_key: str
    timestamp_ms: int
    client_id: str
    nonce: str
    content_sha256: str
    target: str
    """The broker group the call is for; empty: any broker."""
    algorithm: str
    signature: str

    @classmethod
    def from_metadata(cls, metadata: Sequence[tuple[str, Any]] | None) -> SignedCall | None:
        """The call's signature fields; None when it carries no access key; SigningError
        naming the first missing or malformed field otherwise (a format-1 or format-2
        signature: one asking to upgrade the client)."""
        values = {key: value for key, value in (metadata or ()) if isinstance(value, str)}
        access_key = values.get(ACCESS_KEY_HEADER)
        if access_key is None:
            return None
        if NONCE_HEADER not in values and CONTENT_HEADER not in values:
            raise SigningError(
                f"old signature format (no {NONCE_HEADER}, request body unsigned) is refused: "
                "upgrade the client to a BoltMQ release that signs the request body"
            )
        if TARGET_HEADER not in values:
            raise SigningError(
                f"old signature format (no {TARGET_HEADER}, target broker unsigned) is "
                "refused: upgrade the client to a BoltMQ release that signs the target broker"
            )
        for key in (
            TIMESTAMP_HEADER,
            CLIENT_ID_HEADER,
            NONCE_HEADER,
            CONTENT_HEADER,
            ALGORITHM_HEADER,
            SIGNATURE_HEADER,
        ):
            if not values.get(key):
                raise SigningError(f"signed call without {key}")
        timestamp = values[TIMESTAMP_HEADER]
        if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 15:
            raise SigningError(f"{TIMESTAMP_HEADER} is not milliseconds since the epoch")
        client_id = values[CLIENT_ID_HEADER]
        if len(client_id) > CLIENT_ID_MAX_CHARS or not _PRINTABLE.fullmatch(client_id):
            raise SigningError(
                f"{CLIENT_ID_HEADER} must be 1-{CLIENT_ID_MAX_CHARS} printable characters"
            )
        if not _NONCE.fullmatch(values[NONCE_HEADER]):
            raise SigningError(f"{NONCE_HEADER} must be 32 lower-case hex digits")
        if not _CONTENT.fullmatch(values[CONTENT_HEADER]):
            raise SigningError(f"{CONTENT_HEADER} must be 64 lower-case hex digits")
        if values[ALGORITHM_HEADER] not in ALGORITHMS:
            raise SigningError(f"{ALGORITHM_HEADER} must be one of {', '.join(ALGORITHMS)}")
        check_target(values[TARGET_HEADER])
        return cls(
            check_access_key(access_key),
            int(timestamp),
            client_id,
            values[NONCE_HEADER],
            values[CONTENT_HEADER],
            values[TARGET_HEADER],
            values[ALGORITHM_HEADER],
            values[SIGNATURE_HEADER],
        )

    def covers(self, body: bytes) -> bool:
        """True when ``body`` (the serialized request received) is the one signed."""
        return hmac.compare_digest(content_digest(body), self.content_sha256)

    def matches(self, secret_key: str, method: str) -> bool:
        """True when the signature is the one ``secret_key`` makes for a call of ``method``
        with these fields (constant time); check :meth:`covers` for the body."""
        to_sign = string_to_sign(
            method, self.timestamp_ms, self.client_id, self.nonce, self.content_sha256, self.target
        )
        expected = signature(secret_key, self.algorithm, to_sign)
        return hmac.compare_digest(expected.encode(), self.signature.encode())


def _method_name(method: str | bytes) -> str:
    return method.decode() if isinstance(method, bytes) else method


def _target_name(target: Target) -> str:
    return target if isinstance(target, str) else target()


class _SyncCallDetails(
    collections.namedtuple(
        "_SyncCallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,  # type: ignore[misc]  # grpc has no type information: its classes are Any
):
    """A blocking call's details with the signed metadata added."""


class RequestSigner(
    # grpc has no type information: its classes are Any.
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Signs every call of a blocking channel (``grpc.intercept_channel``) for the broker
    group ``target`` names (a name, or a function read at every call; empty: any broker)."""

    def __init__(self, credentials: Credentials, client_id: str, target: Target = "") -> None:
        self._credentials = credentials
        self._client_id = client_id
        self._target = target

    def _details(self, details: grpc.ClientCallDetails, request: Any) -> grpc.ClientCallDetails:
        metadata = [
            *(details.metadata or ()),
            *signed_metadata(
                self._credentials,
                _method_name(details.method),
                self._client_id,
                request_bytes(request),
                target=_target_name(self._target),
            ),
        ]
        return _SyncCallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return continuation(self._details(client_call_details, request), request)

    def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return continuation(self._details(client_call_details, request), request)


class AsyncRequestSigner(
    # grpc has no type information: its classes are Any.
    grpc.aio.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.aio.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Signs every call of an aio channel (``channels.channel(..., interceptors=[...])``)
    for the broker group ``target`` names, as :class:`RequestSigner`."""

    def __init__(self, credentials: Credentials, client_id: str, target: Target = "") -> None:
        self._credentials = credentials
        self._client_id = client_id
        self._target = target

    def _details(
        self, details: grpc.aio.ClientCallDetails, request: Any
    ) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        for key, value in signed_metadata(
            self._credentials,
            _method_name(details.method),
            self._client_id,
            request_bytes(request),
            target=_target_name(self._target),
        ):
            metadata.add(key, value)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details, request), request)

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details, request), request)
