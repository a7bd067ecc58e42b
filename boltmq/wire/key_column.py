"""KeyColumn: the index keys of a batch whose records differ only in their unique ids.

Every message the SDK sends carries its own ``UNIQ_KEY`` (32 hex digits), the
last of its index keys; in one producer's batch the records' properties are
otherwise the same bytes, so the store finds the ids as one column of the
batch (:func:`boltmq.wire.record_heads.check_batch`). The index needs only
the hash of each ``topic#key`` (:func:`services.store.index_file.
column_key_hashes` computes them from the column as one matrix); making a
string and a tuple per record to hash them again cost more than the hashing.

A KeyColumn keeps the ids as they lay in the records: a ``count x width``
matrix of ASCII bytes (no separator, nothing above 0x7F), and the keys every
record shares before its id (the ``KEYS`` property's). As a sequence it is
each record's keys, ``(*shared, id)``, made only when someone indexes or
iterates it (the per-record dispatch paths, the verifier).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np
import numpy.typing as npt


class KeyColumn(Sequence[tuple[str, ...]]):
    """The index keys ``(*shared, ids[i])`` of each record of a batch."""

    __slots__ = ("shared", "ids")

    def __init__(self, shared: tuple[str, ...], ids: npt.NDArray[np.uint8]) -> None:
        if ids.ndim != 2 or not ids.shape[1]:
            raise ValueError(f"ids must be a count x width matrix of bytes, not {ids.shape}")
        self.shared = shared
        """The keys each record has before its unique id (mostly none)."""
        self.ids = ids
        """Each record's unique id, one row of ASCII bytes a record."""

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> tuple[str, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> KeyColumn: ...

    def __getitem__(self, index: int | slice) -> tuple[str, ...] | KeyColumn:
        if isinstance(index, slice):
            return KeyColumn(self.shared, self.ids[index])
        return (*self.shared, self.ids[index].tobytes().decode("ascii"))

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        width = self.ids.shape[1]
        text = np.ascontiguousarray(self.ids).tobytes().decode("ascii")
        shared = self.shared
        for at in range(0, len(text), width):
            yield (*shared, text[at : at + width])
