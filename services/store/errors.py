"""The store's named errors, in the kernel's one vocabulary (:mod:`boltmq.kernel.errors`).

The servicer wraps every RPC in :func:`boltmq.kernel.errors.answers_errors`,
which ends a call with ``(error.code, str(error))``:

- :class:`BadRequest`: a malformed request, INVALID_ARGUMENT, the message
  starting with the field's name;
- :class:`Rejected`: a request refused with another status (OUT_OF_RANGE for
  data that is gone or not yet there, RESOURCE_EXHAUSTED, DATA_LOSS, ...);
- :class:`StoreNotRunning`: an operation that needs a started store
  (UNAVAILABLE: it is recovering or shutting down, the caller may retry).

:class:`StoreLocked` is raised only to whoever opens a store (``start()``);
it never reaches a caller of the service.
"""

from __future__ import annotations

import grpc

from boltmq.kernel.errors import InvalidArgument, ServiceError, Unavailable


class BadRequest(InvalidArgument):
    """A malformed request: INVALID_ARGUMENT, the message starting with the field's name."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field


class Rejected(ServiceError):
    """A request refused with a status the kernel has no name for (OUT_OF_RANGE, ...)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details, code)


class StoreNotRunning(Unavailable, RuntimeError):
    """An operation that needs a started store (UNAVAILABLE).

    Also a RuntimeError, which is what an embedding program that starts and
    stops the store itself catches.
    """


class StoreLocked(RuntimeError):
    """Another process holds the store's lock file."""
