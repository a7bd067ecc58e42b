"""Named errors of the broker's domain, in the kernel's one error vocabulary.

Each is a :class:`boltmq.kernel.errors.ServiceError` carrying the gRPC status
a caller gets, and a :class:`BrokerError`, so the broker's background tasks
catch every failure of a store call in one ``except``. Domain code raises
them; the servicer's handlers end a call with their status and message
(:func:`boltmq.kernel.errors.answers_errors`), there and nowhere else.
Outcomes that are not errors (a pull that found nothing, a put the store
refused) stay enums in responses.
"""

from __future__ import annotations

import grpc

from boltmq.kernel import errors


class BrokerError(errors.ServiceError):
    """Base of every error the broker reports to a caller (INTERNAL unless named)."""


class InvalidArgument(BrokerError, errors.InvalidArgument):
    """A malformed request; the message names the field."""


class NotFound(BrokerError, errors.NotFound):
    """An unknown topic or group."""


class PermissionDenied(BrokerError, errors.PermissionDenied):
    """A topic's perm bits or a group's settings forbid the operation."""


class FailedPrecondition(BrokerError, errors.FailedPrecondition):
    """The operation is not allowed in the current state (e.g. deleting a system topic)."""


class StoreUnavailable(BrokerError, errors.Unavailable):
    """The store could not be reached or did not answer in time."""


class StoreFailed(BrokerError):
    """The store answered with an error status other than unavailability."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message, code)


class CorruptMetadata(BrokerError):
    """A metadata file read back from the store is not what the broker wrote."""


class TooManyStreams(BrokerError):
    """A caller holds as many long-lived streams of a kind as one caller may."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class ReceiptHandleInvalid(InvalidArgument):
    """A POP receipt handle that does not decode, or that this broker did not issue for the
    group and topic it came with (forged or altered): INVALID_ARGUMENT."""


class ReceiptHandleStale(FailedPrecondition):
    """A genuine POP receipt handle whose delivery is over: the message was acked or
    dead-lettered, or its invisible time ran out and it was received again (a newer handle
    holds it): FAILED_PRECONDITION. Never acks or changes the newer delivery."""
