"""ColumnRows: a batch kept as columns that also reads as a sequence of row tuples.

The bulk paths keep a batch's fields as numpy columns; the per-record paths
that remain read the same batch row by row. A subclass says how to make its
rows (:meth:`ColumnRows._rows`); they are made once, on the first index or
iteration, and never when only the columns are read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar, overload

Row = TypeVar("Row")


class ColumnRows(Sequence[Row], Generic[Row]):
    """Rows made from columns on first use (subclasses define ``_rows`` and ``__len__``)."""

    __slots__ = ("_made",)

    def __init__(self) -> None:
        self._made: list[Row] | None = None

    def _rows(self) -> list[Row]:
        raise NotImplementedError

    def rows(self) -> list[Row]:
        """Every row, made the first time it is asked for."""
        if self._made is None:
            self._made = self._rows()
        return self._made

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        return self.rows()[index]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())
