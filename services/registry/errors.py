"""Named errors of the registry, each carrying the gRPC status it ends a call with.

They derive from :mod:`boltmq.kernel.errors`, the one error vocabulary of
every service; the servicer's :func:`~boltmq.kernel.errors.answers_errors`
ends the call with ``(error.code, str(error))``.

==================  =================  =========================================
error               ``code``           raised by
==================  =================  =========================================
InvalidRequest      INVALID_ARGUMENT   the route table's values, on a bad field
TopicNotServed      NOT_FOUND          GetRoute, when no live broker serves it
==================  =================  =========================================
"""

from __future__ import annotations

from boltmq.kernel.errors import InvalidArgument, NotFound


class InvalidRequest(InvalidArgument):
    """A registration, unregistration or lookup with a bad field; ``field`` names it."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name


class TopicNotServed(NotFound):
    """No live broker serves the topic a route was asked for."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r}: no live broker serves it")
        self.topic = topic
