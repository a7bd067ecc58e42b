"""Signed requests for BoltMQ's access control (RocketMQ's ACL, on gRPC metadata).

A client with an access key / secret key pair signs every broker call; the
signature travels in gRPC metadata (lower-case keys, all ASCII):

Metadata key                 | Value
-----------------------------+-------------------------------------------------------
x-boltmq-access-key          | the access key (names the account; never the secret)
x-boltmq-timestamp-ms        | client clock, milliseconds since the Unix epoch (decimal)
x-boltmq-client-id           | the client id (``host@pid@random``), 1-255 printable chars
x-boltmq-signature-method    | ``HmacSHA1`` or ``HmacSHA256``
x-boltmq-signature           | base64 of HMAC(secret key, string to sign)

String to sign (UTF-8, ``\\n`` between fields, no trailing newline)::

    <full gRPC method, e.g. /boltmq.v1.BrokerService/SendMessage>
    <x-boltmq-timestamp-ms>
    <x-boltmq-client-id>

As in RocketMQ 5's gRPC ACL the signature covers the request's date and the
client, not the request body: hashing every body would cost as much as the
send itself on batches of megabytes. The method is signed too, so a captured
signature cannot be replayed on another call; a captured one for the same call
is accepted only within the broker's ``acl_signature_max_skew_ms``, and TLS
keeps it from being captured at all. One ``authorization`` header in RocketMQ's
``MQv2-HMAC-SHA1 Credential=...`` syntax was rejected: separate keys need no
parser and each can be refused with its own message.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

ACCESS_KEY_HEADER = "x-boltmq-access-key"
TIMESTAMP_HEADER = "x-boltmq-timestamp-ms"
CLIENT_ID_HEADER = "x-boltmq-client-id"
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
_PRINTABLE = re.compile(r"[\x21-\x7e]+")


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


def string_to_sign(method: str, timestamp_ms: int, client_id: str) -> bytes:
    """The bytes the signature covers (module docstring)."""
    return f"{method}\n{timestamp_ms}\n{client_id}".encode()


def signature(
    secret_key: str, algorithm: str, method: str, timestamp_ms: int, client_id: str
) -> str:
    """base64 HMAC of the string to sign under ``secret_key``."""
    digest = hmac.new(
        secret_key.encode(), string_to_sign(method, timestamp_ms, client_id), ALGORITHMS[algorithm]
    ).digest()
    return base64.b64encode(digest).decode()


def signed_metadata(
    credentials: Credentials, method: str, client_id: str, timestamp_ms: int | None = None
) -> tuple[tuple[str, str], ...]:
    """The metadata entries of one signed call (``timestamp_ms`` defaults to now)."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return (
        (ACCESS_KEY_HEADER, credentials.access_key),
        (TIMESTAMP_HEADER, str(now)),
        (CLIENT_ID_HEADER, client_id),
        (ALGORITHM_HEADER, credentials.algorithm),
        (
            SIGNATURE_HEADER,
            signature(credentials.secret_key, credentials.algorithm, method, now, client_id),
        ),
    )


@dataclass(frozen=True)
class SignedCall:
    """What a server reads from a call's metadata before it knows the secret."""

    access_key: str
    timestamp_ms: int
    client_id: str
    algorithm: str
    signature: str

    @classmethod
    def from_metadata(cls, metadata: Sequence[tuple[str, Any]] | None) -> SignedCall | None:
        """The call's signature fields; None when it carries no access key; SigningError
        naming the first missing or malformed field otherwise."""
        values = {key: value for key, value in (metadata or ()) if isinstance(value, str)}
        access_key = values.get(ACCESS_KEY_HEADER)
        if access_key is None:
            return None
        for key in (TIMESTAMP_HEADER, CLIENT_ID_HEADER, ALGORITHM_HEADER, SIGNATURE_HEADER):
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
        if values[ALGORITHM_HEADER] not in ALGORITHMS:
            raise SigningError(f"{ALGORITHM_HEADER} must be one of {', '.join(ALGORITHMS)}")
        return cls(
            check_access_key(access_key),
            int(timestamp),
            client_id,
            values[ALGORITHM_HEADER],
            values[SIGNATURE_HEADER],
        )

    def matches(self, secret_key: str, method: str) -> bool:
        """True when the signature is the one ``secret_key`` makes (constant time)."""
        expected = signature(secret_key, self.algorithm, method, self.timestamp_ms, self.client_id)
        return hmac.compare_digest(expected.encode(), self.signature.encode())


def _method_name(method: str | bytes) -> str:
    return method.decode() if isinstance(method, bytes) else method


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
    """Signs every call of a blocking channel (``grpc.intercept_channel``)."""

    def __init__(self, credentials: Credentials, client_id: str) -> None:
        self._credentials = credentials
        self._client_id = client_id

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = [
            *(details.metadata or ()),
            *signed_metadata(self._credentials, _method_name(details.method), self._client_id),
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
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return continuation(self._details(client_call_details), request)


class AsyncRequestSigner(
    # grpc has no type information: its classes are Any.
    grpc.aio.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.aio.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Signs every call of an aio channel (``channels.channel(..., interceptors=[...])``)."""

    def __init__(self, credentials: Credentials, client_id: str) -> None:
        self._credentials = credentials
        self._client_id = client_id

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        for key, value in signed_metadata(
            self._credentials, _method_name(details.method), self._client_id
        ):
            metadata.add(key, value)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)
