"""Named errors of the HA service.

Store failures become :class:`StoreUnavailable` or :class:`StoreFailed` in
:mod:`services.ha.store_client`, once. The replication errors say why a
stream was closed; the follower logs them and reconnects with backoff, and
the master's servicer maps :class:`CannotResume` to FAILED_PRECONDITION.
"""

from __future__ import annotations

import grpc


class HAError(Exception):
    """Base of every error the HA service raises."""


class StoreUnavailable(HAError):
    """The store beside this HA service could not be reached or did not answer in time."""


class StoreFailed(HAError):
    """The store answered a call with an error status other than unavailability."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class CannotResume(HAError):
    """The master cannot serve this replica from where it is (its data was deleted, ...)."""


class MasterUnknown(HAError):
    """No master HA address: none configured and no registry names a live master."""


class ReplicationBroken(HAError):
    """A replication stream is closed because its two ends disagree; the replica reconnects."""


class HandshakeRefused(ReplicationBroken):
    """The master's handshake is missing or incompatible (segment size, epoch)."""


class OffsetMismatch(ReplicationBroken):
    """A chunk (or a report) is not at the offset the other side should be at."""


class ChunkRefused(ReplicationBroken):
    """The replica's store refused a chunk (garbled or misaligned records)."""


class StreamSilent(ReplicationBroken):
    """Nothing arrived for the housekeeping interval: the peer is gone or stuck."""
