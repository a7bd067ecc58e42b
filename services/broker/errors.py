"""Named errors of the broker's domain, each carrying the gRPC status it maps to.

Domain code raises these; the servicer turns them into a status in one place
(``servicer._rpc``). Outcomes that are not errors (a pull that found nothing,
a put the store refused) stay enums in responses (DESIGN 4.8).
"""

from __future__ import annotations

import grpc


class BrokerError(Exception):
    """Base of every error the broker reports to a caller."""

    code = grpc.StatusCode.INTERNAL


class InvalidArgument(BrokerError):
    """A malformed request; the message names the field."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(BrokerError):
    """An unknown topic or group."""

    code = grpc.StatusCode.NOT_FOUND


class PermissionDenied(BrokerError):
    """A topic's perm bits or a group's settings forbid the operation."""

    code = grpc.StatusCode.PERMISSION_DENIED


class FailedPrecondition(BrokerError):
    """The operation is not allowed in the current state (e.g. deleting a system topic)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class StoreUnavailable(BrokerError):
    """The store could not be reached or did not answer in time."""

    code = grpc.StatusCode.UNAVAILABLE


class StoreFailed(BrokerError):
    """The store answered with an error status other than unavailability."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CorruptMetadata(BrokerError):
    """A metadata file read back from the store is not what the broker wrote."""
