"""Outcomes of store operations as small enums returned as values.

The numeric values equal the proto enums in ``protos/boltmq/v1/message.proto``
so the servicer edge maps them with ``int()`` alone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

from boltmq.wire.record import RecordView


class PutStatus(enum.IntEnum):
    """How an append ended."""

    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPPED_FILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGE_CACHE_BUSY = 8
    UNKNOWN_ERROR = 9

    @property
    def stored(self) -> bool:
        """True when the message is in the CommitLog (even if not yet flushed/replicated)."""
        return self in _STORED


_STORED = frozenset(
    (
        PutStatus.PUT_OK,
        PutStatus.FLUSH_DISK_TIMEOUT,
        PutStatus.FLUSH_SLAVE_TIMEOUT,
        PutStatus.SLAVE_NOT_AVAILABLE,
    )
)


class GetStatus(enum.IntEnum):
    """How a read from a consume queue ended."""

    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


@dataclass(slots=True)
class PutResult:
    """The outcome of one message's append."""

    status: PutStatus
    msg_id: str = ""
    commitlog_offset: int = -1
    queue_offset: int = -1
    wrote_bytes: int = 0
    store_timestamp: int = 0
    error: str = ""
    """Why a message was refused (empty when stored)."""


def create_failed(count: int, exc: OSError) -> list[PutResult]:
    """CREATE_MAPPED_FILE_FAILED for ``count`` messages: the next CommitLog segment
    could not be created (disk full or unwritable)."""
    error = f"cannot create the next CommitLog segment: {exc.strerror or exc}"
    return [PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, error=error) for _ in range(count)]


class StoredRun(Sequence[PutResult]):
    """The results of records appended in one run, kept as columns.

    A 1,024-record batch would otherwise build 1,024 :class:`PutResult`
    objects that the servicer takes apart again into packed arrays; the
    columns go to the wire as they are, and a PutResult is built only when an
    in-process caller indexes or iterates. Every record of a run shares one
    status (``mark`` changes it for all: a flush or replica timeout) and one
    store timestamp.
    """

    __slots__ = (
        "msg_id_prefix",
        "commitlog_offsets",
        "queue_offsets",
        "sizes",
        "store_timestamp",
        "status",
    )

    def __init__(self, msg_id_prefix: str, store_timestamp: int) -> None:
        self.msg_id_prefix = msg_id_prefix
        self.commitlog_offsets: list[int] = []
        self.queue_offsets: list[int] = []
        self.sizes: list[int] = []
        self.store_timestamp = store_timestamp
        self.status = PutStatus.PUT_OK

    def mark(self, status: PutStatus, unless: frozenset[PutStatus] = frozenset()) -> None:
        """Give every record ``status`` unless its current one is in ``unless``."""
        if self.status not in unless:
            self.status = status

    def __len__(self) -> int:
        return len(self.commitlog_offsets)

    @overload
    def __getitem__(self, index: int) -> PutResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[PutResult]: ...

    def __getitem__(self, index: int | slice) -> PutResult | list[PutResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        offset = self.commitlog_offsets[index]
        return PutResult(
            self.status,
            f"{self.msg_id_prefix}{offset:016X}",
            offset,
            self.queue_offsets[index],
            self.sizes[index],
            self.store_timestamp,
        )

    def __iter__(self) -> Iterator[PutResult]:
        return (self[i] for i in range(len(self)))


@dataclass(slots=True)
class GetResult:
    """The outcome of one get: messages plus where the next get should start."""

    status: GetStatus
    messages: list[RecordView] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    raw: list[memoryview] = field(default_factory=list)
    """With ``get_messages(..., raw=True)``: the matching records' bytes instead, as views
    (records that lie back to back in the CommitLog may share one view)."""
    raw_count: int = 0
    """Records in ``raw``."""
    cold: bool = False
    """The read started behind the CommitLog's page-cache window (a cold read: its pages
    come from disk), so the cold limits (``max_transfer_*_on_message_in_disk``) bounded it."""


_COVERED_BY_REPLICA_MARK = frozenset(PutStatus) - {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT}
_FLUSH_TIMEOUT_MARK = frozenset(PutStatus) - {PutStatus.PUT_OK}


def mark_replica_status(results: Sequence[PutResult], status: PutStatus | None) -> None:
    """Stored messages not covered by a replica get ``status`` (they stay stored)."""
    if status is not None:
        _mark(results, status, _COVERED_BY_REPLICA_MARK)


def mark_flush_timeout(results: Sequence[PutResult]) -> None:
    """Stored messages whose flush timed out get FLUSH_DISK_TIMEOUT (they stay stored)."""
    _mark(results, PutStatus.FLUSH_DISK_TIMEOUT, _FLUSH_TIMEOUT_MARK)


def _mark(results: Sequence[PutResult], status: PutStatus, unless: frozenset[PutStatus]) -> None:
    """``status`` for every result whose status is not in ``unless``."""
    if isinstance(results, StoredRun):
        results.mark(status, unless)
        return
    for r in results:
        if r.status not in unless:
            r.status = status
