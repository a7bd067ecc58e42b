"""Segment file names, shared by the store and by readers of a store's files.

Every CommitLog, ConsumeQueue and IndexFile segment is named by the offset of its
first byte as 20 zero-padded decimal digits (``00000000001073741824``), so names
sort as their offsets do.
"""

from __future__ import annotations

FILE_NAME_DIGITS = 20


def file_name(start_offset: int) -> str:
    """Segment name: the start offset as 20 zero-padded digits."""
    return f"{start_offset:0{FILE_NAME_DIGITS}d}"


def is_segment_name(name: str) -> bool:
    """Whether ``name`` is a segment's name (20 decimal digits)."""
    return len(name) == FILE_NAME_DIGITS and name.isdigit()
