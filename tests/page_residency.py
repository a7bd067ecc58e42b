"""Which pages of a file the page cache holds, asked of the kernel (mincore(2)).

Independent of the store: the file is mapped afresh here, never read, so only
the page cache's state is reported.
"""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

PAGE_SIZE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)


def resident_pages(path: Path) -> list[bool]:
    """One flag per page of ``path``: True when that page is in the page cache."""
    size = path.stat().st_size
    pages = -(-size // PAGE_SIZE)
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), size)
        try:
            base = ctypes.c_char.from_buffer(mm)
            vec = (ctypes.c_ubyte * pages)()
            failed = _libc.mincore(
                ctypes.c_void_p(ctypes.addressof(base)), ctypes.c_size_t(size), vec
            )
            del base
            if failed:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return [bool(v & 1) for v in vec]
        finally:
            mm.close()
