"""Named errors of the HA service, each carrying the gRPC status it ends a call with.

They derive from :mod:`boltmq.kernel.errors`, the one error vocabulary of
every service. Store failures become :class:`StoreUnavailable` or
:class:`StoreCallFailed` in :mod:`services.ha.store_client`, once. The
replication errors say why a stream was closed; the follower logs them and
reconnects with backoff, and the master's servicer ends the Replicate stream
with the error's ``code``:

=====================  ===================================================
error                  ``code``
=====================  ===================================================
CannotResume           FAILED_PRECONDITION (the message says what to do)
StreamSilent           DEADLINE_EXCEEDED
ReplicationBroken      ABORTED (every other disagreement of the two sides)
StoreUnavailable       UNAVAILABLE
ControllerUnavailable  UNAVAILABLE (etcd; only logged, never ends a call)
StoreCallFailed        the status the store answered with
any other HAError      INTERNAL
=====================  ===================================================
"""

from __future__ import annotations

import grpc

from boltmq.kernel.errors import FailedPrecondition, ServiceError, Unavailable


class HAError(ServiceError):
    """Base of every error the HA service raises (``code`` INTERNAL unless a subclass says)."""


class StoreUnavailable(HAError, Unavailable):
    """The store beside this HA service could not be reached or did not answer in time."""


class StoreCallFailed(HAError):
    """A call to the store beside this HA service ended with an error status other than
    unavailability; ``code`` is that status, the message carries the store's text."""

    def __init__(self, message: str, code: grpc.StatusCode) -> None:
        super().__init__(message, code)


class CannotResume(HAError, FailedPrecondition):
    """The master cannot serve this replica from where it is (its data was deleted, ...)."""


class ControllerUnavailable(HAError, Unavailable):
    """The controller's etcd did not answer (or answered with an error) in time."""


class MasterUnknown(HAError):
    """No master HA address: none configured and no registry names a live master."""


class ReplicationBroken(HAError):
    """A replication stream is closed because its two ends disagree; the replica reconnects."""

    code = grpc.StatusCode.ABORTED


class HandshakeRefused(ReplicationBroken):
    """The master's handshake is missing or incompatible (segment size, epoch)."""


class OffsetMismatch(ReplicationBroken):
    """A chunk (or a report) is not at the offset the other side should be at."""


class ChunkRefused(ReplicationBroken):
    """The replica's store refused a chunk (garbled or misaligned records)."""


class StreamSilent(ReplicationBroken):
    """Nothing arrived for the housekeeping interval: the peer is gone or stuck."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
